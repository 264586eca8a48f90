"""What shipping costs and how fast it ships: four figures, side by side in one run, against moto's S3 server.

1. **Throughput**: ``envrec ship`` of a folder of recorded batches against ``s3fs.put`` of the very same
   files (no index, no commits): MB/s of each, median of ``--rounds``, and their ratio.
2. **Commit-to-visible lag**: a recorder committing every ``--commit-interval`` seconds with ``ship_to``,
   a reader polling ``open_dataset(URL).refresh()``: for each batch, the time from its local commit
   (its files' mtime) to the reader seeing it; median and worst.
3. **Env-side cost per step** of ``RecordTrace`` on CartPole with shipping on and off, interleaved rounds:
   median µs per step over the bare env, and the ratio (the goal: unchanged).
4. **Four writers** (four processes, each a ``RecordTrace`` shipping to the same URL) with a reader following
   them: steps recorded, batches visible to the reader at the end against batches committed, and the lag.
5. **Preemption**: SIGTERM to the process group of a job recording trace and video: seconds until every
   worker and shipper is gone with everything committed shipped (Slurm's SIGKILL comes 30 s after).

Usage: ``python scripts/bench/bench_ship.py [--rounds 5] [--steps 20000]`` (needs ``moto[server]``,
``s3fs`` and ``pyarrow``: the test extra). Only 127.0.0.1 is ever a target.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BUCKET = "envrec-bench"


def start_server() -> object:
    """moto's S3 server on 127.0.0.1 with the bucket; the standard variables point s3fs at it."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return server


def record(folder: str, steps: int, ship_to: str | None = None, pace_s: float = 0.0, **options) -> tuple[float, object]:
    """CartPole stepped ``steps`` times under RecordTrace (``pace_s``: a pause every 100 steps, a run that
    lasts); seconds per step inside the loop, and the stats."""
    import gymnasium as gym

    import envrec

    env = envrec.RecordTrace(gym.make("CartPole-v1"), folder, ship_to=ship_to, **options)
    per_step = step_through(env, steps, pace_s)
    env.close()
    return per_step, env.recorder.stats()


def step_through(env, steps: int, pace_s: float = 0.0) -> float:
    """Seconds per step of ``steps`` random steps (a pause of ``pace_s`` every 100)."""
    env.reset(seed=0)
    env.action_space.seed(0)
    t0 = time.perf_counter()
    for i in range(steps):
        *_, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
        if pace_s and i % 100 == 99:
            time.sleep(pace_s)
    return (time.perf_counter() - t0) / steps


def bare(steps: int) -> float:
    import gymnasium as gym

    return step_through(gym.make("CartPole-v1"), steps)


def frames_recording(folder: str, steps: int) -> None:
    """A recording of 84x84x4 random uint8 observations (28 KiB a step, incompressible), raw, 4 MB batches."""
    import numpy as np
    from gymnasium.spaces import Box, Discrete

    import envrec

    rng = np.random.default_rng(0)
    space = Box(0, 255, (84, 84, 4), np.uint8)
    with envrec.TraceRecorder(folder, space, Discrete(4), batch_bytes=4_000_000, compression=None,
                              commit_interval=None) as rec:
        rec.add_reset(rng.integers(0, 256, space.shape, np.uint8), seed=0)
        for i in range(steps):
            rec.add_step(1, rng.integers(0, 256, space.shape, np.uint8), 0.0, i % 500 == 499, False)
            if i % 500 == 499:
                rec.add_reset(rng.integers(0, 256, space.shape, np.uint8))


def throughput(tmp: str, rounds: int) -> None:
    import s3fs

    from envrec.formats.ownfolder import OwnFolder
    from envrec.formats.store import Store
    from envrec.ship.counters import ShipCounters
    from envrec.ship.shipping import FolderShipping, ShipTargets

    src = f"{tmp}/tp-src"
    frames_recording(src, 2_000)
    files = [f for f in os.listdir(src) if ".ep" in f]
    size = sum(os.path.getsize(f"{src}/{f}") for f in files)
    fs = s3fs.S3FileSystem()
    ours, theirs = [], []
    for r in range(rounds):
        t0 = time.perf_counter()
        fs.put([f"{src}/{f}" for f in files], f"{BUCKET}/put-{r}/")
        theirs.append(size / (time.perf_counter() - t0) / 1e6)
        with OwnFolder(src) as own:
            shipping = FolderShipping(Store(f"s3://{BUCKET}/ship-{r}"), own, ShipTargets(), ShipCounters(shared=False))
            t0 = time.perf_counter()
            shipping.ship_pass()
            ours.append(size / (time.perf_counter() - t0) / 1e6)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"1. throughput, {len(files)} batch files, {size / 1e6:.1f} MB, median of {rounds}: envrec's shipping pass "
          f"{a:.1f} MB/s (CRC checks, indexes and create-only commits included), s3fs.put of the same files "
          f"{b:.1f} MB/s: ratio {a / b:.2f}")


def follow(url: str, until: threading.Event, seen: dict[str, float]) -> None:
    """Poll the dataset; when each batch key is first seen."""
    import envrec

    ds = envrec.open_dataset(url, cache_dir=tempfile.mkdtemp(prefix="envrec-bench-cache-"))
    while True:
        ds.refresh()
        now = time.time()
        for rec in ds.cache.recorders.values():
            for c in rec.commits.values():
                seen.setdefault(f"{rec.name}/{c['entry']['fn']}" if c.get("entry") else c["key"], now)
        if until.is_set():
            return
        time.sleep(0.05)


def lags(folder: str, seen: dict[str, float]) -> list[float]:
    """Seconds from each batch's local commit (its .json's mtime) to the reader seeing it."""
    out = []
    for key, t in seen.items():
        path = os.path.join(folder, key.split("/", 1)[1])
        if os.path.exists(path):
            out.append(t - os.path.getmtime(path))
    return out


def lag(tmp: str, steps: int, interval: float) -> None:
    url = f"s3://{BUCKET}/lag"
    stop, seen = threading.Event(), {}
    reader = threading.Thread(target=follow, args=(url, stop, seen))
    reader.start()
    record(f"{tmp}/lag", steps, ship_to=url, pace_s=0.05, commit_interval=interval)
    time.sleep(1.0)
    stop.set()
    reader.join()
    got = lags(f"{tmp}/lag", seen)
    print(f"2. commit-to-visible lag (commit_interval {interval} s, {len(got)} batches, reader polling every 50 ms): "
          f"median {statistics.median(got) * 1e3:.0f} ms, worst {max(got) * 1e3:.0f} ms")


def env_cost(tmp: str, steps: int, rounds: int) -> None:
    off, on, base = [], [], []
    for r in range(rounds):
        base.append(bare(steps))
        off.append(record(f"{tmp}/off-{r}", steps)[0])
        on.append(record(f"{tmp}/on-{r}", steps, ship_to=f"s3://{BUCKET}/cost-{r}", commit_interval=1.0)[0])
    b = statistics.median(base)
    a_off, a_on = statistics.median(off) - b, statistics.median(on) - b
    print(f"3. env-side cost per step over the bare env (CartPole, {steps} steps, median of {rounds} interleaved "
          f"rounds): shipping off +{a_off * 1e6:.2f} µs, on +{a_on * 1e6:.2f} µs: ratio {a_on / a_off:.2f}")


WRITER = """
import sys, time, gymnasium as gym, envrec
env = envrec.RecordTrace(gym.make("CartPole-v1"), sys.argv[1], ship_to=sys.argv[2], commit_interval=0.5)
env.reset(seed=int(sys.argv[3])); env.action_space.seed(int(sys.argv[3]))
for i in range(int(sys.argv[4])):
    *_, te, tr, _ = env.step(env.action_space.sample())
    if te or tr: env.reset()
    if i % 100 == 99: time.sleep(0.05)
env.close()
print(env.recorder.stats()["batches"])
"""


def writers(tmp: str, steps: int) -> None:
    url = f"s3://{BUCKET}/four"
    stop, seen = threading.Event(), {}
    reader = threading.Thread(target=follow, args=(url, stop, seen))
    reader.start()
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, f"{tmp}/w{i}", url, str(i), str(steps)], stdout=subprocess.PIPE,
                              text=True) for i in range(4)]
    committed = sum(int(p.communicate()[0].strip().splitlines()[-1]) for p in procs)
    wall = time.perf_counter() - t0
    time.sleep(1.0)
    stop.set()
    reader.join()
    got = [x for i in range(4) for x in lags(f"{tmp}/w{i}", {k: v for k, v in seen.items()})]
    print(f"4. four writers x {steps} steps to one URL, a reader following: {committed} batches committed, "
          f"{len(seen)} seen by the reader, {4 * steps / wall:.0f} steps/s in all; lag median "
          f"{statistics.median(got) * 1e3:.0f} ms, worst {max(got) * 1e3:.0f} ms")


PREEMPTED = """
import sys, time, gymnasium as gym, envrec
env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), sys.argv[1], ship_to=sys.argv[2],
                         episode_trigger=lambda e: True)
env = envrec.RecordTrace(env, sys.argv[1], ship_to=sys.argv[2], commit_interval=1.0)
env.reset(seed=0)
print("stepping", flush=True)
while True:
    *_, te, tr, _ = env.step(env.action_space.sample())
    if te or tr: env.reset()
"""


def _running(p) -> bool:
    """Alive and not a zombie (a zombie has exited; no one here reaps it)."""
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def preemption(tmp: str, rounds: int) -> None:
    """SIGTERM to the process group of a job recording trace and video: seconds until every shipper exited."""
    import signal

    import psutil

    took, complete = [], 0
    for r in range(rounds):
        url = f"s3://{BUCKET}/preempt-{r}"
        # pygame's SDL would take SIGTERM over and ignore it (docs/robustness.md): the job dies of it, as jobs do
        job = subprocess.Popen([sys.executable, "-c", PREEMPTED, f"{tmp}/pre-{r}", url], stdout=subprocess.PIPE,
                               text=True, start_new_session=True, env={**os.environ, "SDL_NO_SIGNAL_HANDLERS": "1"})
        job.stdout.readline()
        time.sleep(3.0)
        family = psutil.Process(job.pid).children(recursive=True)
        t0 = time.perf_counter()
        os.killpg(job.pid, signal.SIGTERM)
        job.wait()
        while any(map(_running, family)):
            time.sleep(0.05)
        took.append(time.perf_counter() - t0)
        import envrec

        ds = envrec.open_dataset(url, cache_dir=f"{tmp}/pre-cache-{r}")
        trace = next(n for n in ds.recorders if not n.startswith("clips."))
        complete += ds.cache.recorders[trace].final is not None
    print(f"5. SIGTERM to the process group of a job recording trace and video at full speed: every worker and "
          f"shipper gone, everything committed shipped, median {statistics.median(took):.1f} s, worst "
          f"{max(took):.1f} s over {rounds} runs (Slurm gives 30 s); final manifest shipped in {complete} of {rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--only", default="1,2,3,4,5", help="which figures, e.g. 1,3")
    args = parser.parse_args()
    server = start_server()
    tmp = tempfile.mkdtemp(prefix="envrec-bench-ship-")
    only = set(args.only.split(","))
    try:
        if "1" in only:
            throughput(tmp, args.rounds)
        if "2" in only:
            lag(tmp, args.steps, 0.5)
        if "3" in only:
            env_cost(tmp, args.steps, args.rounds)
        if "4" in only:
            writers(tmp, args.steps)
        if "5" in only:
            preemption(tmp, args.rounds)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
