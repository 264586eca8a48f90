"""Kill the trace serializer at random times, many times, during one recording; then check every step.

A thread SIGKILLs whichever serializer is running at random intervals while
the env process records episodes whose observations carry their global step
number. Every ``long_every``-th episode is long (``long_steps`` steps, many
batches' worth, so it is committed in parts and kills land inside its parts),
and the recording stops inside an episode that never ended. Afterwards: the
manifest parses, every file it names is complete, the steps read back are
exactly the steps produced — none missing, none duplicated, in order — and
every episode reads back as one, its parts stitched. Usage: ``python scripts/soak/soak_serializer.py [--kills 200] [--folder DIR]``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import threading
import time

import numpy as np
from gymnasium import spaces

import envrec


def soak(folder: str, kills: int, seed: int = 0, min_gap_s: float = 0.05, max_gap_s: float = 0.6,
         long_every: int = 5, long_steps: int = 3000) -> dict:
    rng = random.Random(seed)
    rec = envrec.TraceRecorder(
        folder, spaces.Box(0, 255, (8, 8, 3), np.uint8), spaces.Discrete(2), batch_bytes=100_000, max_restarts=kills + 10
    )
    done = threading.Event()
    killed: list[float] = []
    latencies: list[float] = []  # from a kill to its successor being started

    def killer() -> None:
        last = None
        while len(killed) < kills and not done.is_set():
            time.sleep(rng.uniform(min_gap_s, max_gap_s))
            pid = rec.worker_pid
            if pid == last:
                continue  # not replaced yet: killing it again would count a kill that did nothing
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            t_kill = time.monotonic()
            killed.append(t_kill)
            last = pid
            while rec.worker_pid == pid and not done.is_set() and time.monotonic() - t_kill < 10:
                time.sleep(0.005)
            if rec.worker_pid != pid:
                latencies.append(time.monotonic() - t_kill)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    obs = np.zeros((8, 8, 3), np.uint8)
    step = episode = 0
    t0 = time.monotonic()
    lengths: list[int] = []  # of each episode begun; the last one never ends
    while thread.is_alive():
        rec.add_reset(obs, seed=episode)
        length = long_steps if episode % long_every == long_every - 1 else rng.randint(5, 40)
        lengths.append(0)
        for t in range(length):
            step += 1
            lengths[-1] += 1
            obs.reshape(-1)[:8] = np.frombuffer(np.uint64(step).tobytes(), np.uint8)
            rec.add_step(step % 2, obs, 1.0, t == length - 1, False)
            if t % 100 == 99 and not thread.is_alive():
                break  # the recording stops inside this episode
        episode += 1
        time.sleep(0.001)  # an env's own pace
    done.set()
    rec.close()
    elapsed = time.monotonic() - t0
    stats = rec.stats()
    reader = envrec.TraceReader(folder)
    problems = [p for m in reader.manifests for b in m["batches"] for p in reader.check_batch(b)]
    got = []
    read_lengths, parted = [], 0
    for ep in reader:
        got += [int(np.frombuffer(o.reshape(-1)[:8].tobytes(), np.uint64)[0]) for o in ep.observations[1:]]
        read_lengths.append(ep.length)
        parted += len(ep.parts) > 1
    return {
        "kills": len(killed),
        "restarts": stats["restarts"],
        "episodes_produced": episode,
        "episodes_read": len(reader),
        "steps_produced": step,
        "steps_read": len(got),
        "missing": step - len(set(got)),
        "duplicated": len(got) - len(set(got)),
        "in_order": got == sorted(got),
        "episode_lengths_match": read_lengths == lengths,
        "episodes_in_parts": parted,
        "problems": problems,
        "records_lost": stats["records_lost"],
        "records_dropped": stats["records_dropped"],
        "broken": stats["broken"],
        "elapsed_s": elapsed,
        "replaced_within_s_median": float(np.median(latencies)) if latencies else None,
        "replaced_within_s_max": max(latencies) if latencies else None,
        "complete": reader.manifests[0]["complete"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--folder", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="envrec-soak-") as tmp:
        r = soak(args.folder or tmp, args.kills, args.seed)
    for k, v in r.items():
        print(f"{k:>18}: {v}")
    ok = not (r["missing"] or r["duplicated"] or r["problems"] or r["broken"]) and r["in_order"] and r["episode_lengths_match"]
    print("invariants hold" if ok else "INVARIANT VIOLATED")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
