"""A long recording under realistic load: does anything grow that should stay flat?

An Atari-like env (``FrameEnv(frames="game")``, 210x160x3 frames: static background, moving
sprites, so they compress the way a real game's do) is stepped as fast as it goes and
recorded with ``RecordTrace(compression="zstd", max_bytes=...)`` and
``RecordVideo`` (every ``--video-every``-th episode, ``keep_last_clips``), so
the disk budget keeps bytes on disk bounded too. Every ``--every`` seconds it
samples: steps/s, env-side µs per step (both recorders' calls), RSS and
open file descriptors of every process (env, serializer, encoder, ffmpeg),
bytes on disk, mean commit latency over the window, the ring high-water
mark and the time the env spent blocked on a full ring.

Every ``--long-every``-th episode is ``--long-factor`` times as long as the
others, so it spans many batches and is committed in parts (with a budget its
oldest parts are evicted while it runs), and the run stops inside an episode
that has not ended. After a warm-up (the first fifth of the samples) it checks that RSS and
descriptors of the env and both workers stay flat, and that commit latency
does not grow; then it reads the kept episodes back and compares every frame
with the one the env produced. Writes ``soak.csv`` and ``soak.png`` into
``--out`` and exits non-zero when a check fails.

Usage: ``python scripts/soak/soak_long_run.py [--minutes 60] [--every 10] [--out soak-out]``.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import statistics
import time

import numpy as np
import psutil

import envrec
from envrec.bench.variants import FrameEnv, game_frame
from envrec.contract.records import Status

ROLES = ("env", "serializer", "encoder", "ffmpeg")
FIELDS = ["t_s", "steps", "steps_per_s", "env_us_per_step", "commit_ms", "ring_high_water_mb", "blocked_s", "disk_mb",
          "batches_evicted", "clips_evicted"] + [f"{r}_{k}" for r in ROLES for k in ("rss_mb", "fds")]


def process_facts(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for role in ROLES:
        rss = fds = float("nan")
        try:
            p = psutil.Process(pids[role]) if pids.get(role) else None
            if p is not None:
                rss, fds = p.memory_info().rss / 2**20, p.num_fds()
        except psutil.Error:
            pass
        out[f"{role}_rss_mb"], out[f"{role}_fds"] = rss, fds
    return out


def folder_bytes(folder: str) -> int:
    total = 0
    for entry in os.scandir(folder):
        try:
            total += entry.stat().st_size
        except FileNotFoundError:
            pass  # evicted while we looked
    return total


def soak(out: str, minutes: float, every_s: float, episode_len: int = 1000, video_every: int = 10,
         max_bytes: int = 512 << 20, keep_last_clips: int = 20, batch_bytes: int = 5_000_000,
         long_every: int = 7, long_factor: int = 20, commit_interval: float | None = 5.0) -> dict:
    data = os.path.join(out, "recording")
    shutil.rmtree(data, ignore_errors=True)  # RecordVideo warns about a folder that exists
    env = base = FrameEnv(length=episode_len, frames="game")
    planned = lambda episode: episode_len * (long_factor if episode % long_every == long_every - 1 else 1)
    video = env = envrec.RecordVideo(env, data, episode_trigger=lambda e: e % video_every == 0, keep_last_clips=keep_last_clips)
    trace = env = envrec.RecordTrace(env, data, compression="zstd", max_bytes=max_bytes, batch_bytes=batch_bytes,
                                      commit_interval=commit_interval)
    rows: list[dict] = []
    csv_path = os.path.join(out, "soak.csv")
    with open(csv_path, "w", newline="") as f:
        csv.DictWriter(f, fieldnames=FIELDS).writeheader()
    t0 = last_t = time.monotonic()
    steps = last_steps = 0
    last = {"calls_s": 0.0, "commit_us": 0, "commits": 0}
    episode = 0
    end = t0 + minutes * 60
    while time.monotonic() < end:
        base.length = planned(episode)
        env.reset(seed=episode)
        for _ in range(base.length):
            env.step(0)
            steps += 1
            if steps % 200 == 0 and time.monotonic() >= end:
                break  # the run stops inside this episode
            if steps % 200 == 0 and time.monotonic() - last_t >= every_s:
                now = time.monotonic()
                ts, vs = trace.stats(), video.stats()
                calls_s = ts.get("call_total_s", 0.0) + vs.get("call_total_s", 0.0)
                commits = ts["commits"] - last["commits"]
                row = {
                    "t_s": round(now - t0, 1),
                    "steps": steps,
                    "steps_per_s": (steps - last_steps) / (now - last_t),
                    "env_us_per_step": (calls_s - last["calls_s"]) / max(1, steps - last_steps) * 1e6,
                    "commit_ms": (ts["commit_us_total"] - last["commit_us"]) / commits / 1e3 if commits else float("nan"),
                    "ring_high_water_mb": ts["ring_high_water_bytes"] / 2**20,
                    "blocked_s": ts["blocked_s"] + vs["blocked_s"],
                    "disk_mb": folder_bytes(data) / 2**20,
                    "batches_evicted": ts["batches_evicted"],
                    "clips_evicted": vs["clips_evicted"],
                    **process_facts({
                        "env": os.getpid(), "serializer": trace.recorder.worker_pid,
                        "encoder": video.recorder._stream.worker_pid,
                        "ffmpeg": video.recorder._stream.status(Status.ENCODER_PID),
                    }),
                }
                rows.append(row)
                append_csv(csv_path, row)  # as it comes: an hour of samples survives whatever ends the run
                last = {"calls_s": calls_s, "commit_us": ts["commit_us_total"], "commits": ts["commits"]}
                last_t, last_steps = now, steps
        episode += 1
    env.close()
    plot(os.path.join(out, "soak.png"), rows)
    result = {"rows": rows, "episodes": episode, "steps": steps, "checks": check(rows)}
    result["trace_stats"], result["video_stats"] = trace.stats(), video.stats()
    result["readback"] = read_back(data, planned)
    result["ok"] = all(ok for ok, _ in result["checks"].values()) and result["readback"]["mismatches"] == 0
    return result


def check(rows: list[dict]) -> dict[str, tuple[bool, str]]:
    """Flat after warm-up: the last third of the samples against the first third."""
    warm = rows[max(2, len(rows) // 5):]
    if len(warm) < 3:
        return {"samples": (False, f"only {len(warm)} samples after warm-up: run longer or sample more often")}
    third = max(1, len(warm) // 3)
    first, last = warm[:third], warm[-third:]
    out = {}
    for role in ("env", "serializer", "encoder"):
        a, b = (statistics.median(r[f"{role}_rss_mb"] for r in part) for part in (first, last))
        out[f"{role}_rss"] = (b <= a * 1.10 + 16, f"RSS {a:.0f} -> {b:.0f} MiB")
        # the floor of each third: the encoder holds 3 more (a pipe, a pidfd, the clip's file) while a clip's
        # ffmpeg runs, and on a loaded machine it runs longer, so a median can catch it in one third and not in
        # the other (12 -> 15 seen); a leak raises the floor
        fa, fb = (min((r[f"{role}_fds"] for r in part if r[f"{role}_fds"] == r[f"{role}_fds"]), default=math.nan)
                  for part in (first, last))
        out[f"{role}_fds"] = (fb <= fa + 1, f"fds {fa:.0f} -> {fb:.0f} (max {max(r[f'{role}_fds'] for r in warm):.0f})")
    lat = [[r["commit_ms"] for r in part if r["commit_ms"] == r["commit_ms"]] for part in (first, last)]
    if lat[0] and lat[1]:
        a, b = statistics.median(lat[0]), statistics.median(lat[1])
        out["commit_latency"] = (b <= 1.5 * a + 1.0, f"commit {a:.1f} -> {b:.1f} ms")
    else:
        out["commit_latency"] = (False, "no commit in a window: batches too large for the sampling interval")
    return out


def read_back(folder: str, planned) -> dict:
    """Every kept episode, frame by frame, against what the env drew (``planned(seed)``: its length)."""
    reader = envrec.TraceReader(folder)
    episodes = mismatches = frames = parted = 0
    for ep in reader:
        episodes += 1
        parted += len(ep.parts) > 1 or ep.first_step > 0  # stitched from parts, or its first ones evicted
        seed = ep.seed if ep.seed is not None else 0
        for t in range(0, ep.length + 1, 50):  # every 50th frame: the whole hour would take as long again to compare
            frames += 1
            if not np.array_equal(ep.observations[t], game_frame(seed, ep.first_step + t)):
                mismatches += 1
        if ep.complete and ep.first_step + ep.length != planned(seed):
            mismatches += 1
    return {"episodes": episodes, "frames_checked": frames, "mismatches": mismatches, "episodes_in_parts": parted}


def append_csv(path: str, row: dict) -> None:
    with open(path, "a", newline="") as f:
        csv.DictWriter(f, fieldnames=FIELDS).writerow({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})


def plot(path: str, rows: list[dict]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    t = [r["t_s"] / 60 for r in rows]
    fig, axes = plt.subplots(3, 2, figsize=(12, 9), sharex=True)
    panels = [
        ("steps/s", ["steps_per_s"]), ("env-side µs per step", ["env_us_per_step"]),
        ("RSS (MiB)", [f"{r}_rss_mb" for r in ROLES]), ("open fds", [f"{r}_fds" for r in ROLES]),
        ("commit latency (ms)", ["commit_ms"]), ("on disk (MiB)", ["disk_mb"]),
    ]
    for ax, (title, keys) in zip(axes.flat, panels, strict=True):
        for k in keys:
            ax.plot(t, [r[k] for r in rows], label=k.split("_")[0] if len(keys) > 1 else None)
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        if len(keys) > 1:
            ax.legend(fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--every", type=float, default=10.0, help="seconds between samples (default 10)")
    p.add_argument("--out", default="soak-out")
    p.add_argument("--max-bytes", type=int, default=512 << 20, help="the trace's disk budget (default 512 MiB)")
    p.add_argument("--long-every", type=int, default=7, help="every N-th episode is long (default 7)")
    p.add_argument("--long-factor", type=int, default=20, help="how many times longer (default 20)")
    args = p.parse_args()
    r = soak(args.out, args.minutes, args.every, max_bytes=args.max_bytes, long_every=args.long_every,
             long_factor=args.long_factor)
    rows = r["rows"]
    print(f"envrec from {os.path.dirname(envrec.__file__)}")
    print(f"{r['steps']} steps, {r['episodes']} episodes in {args.minutes:g} min; {len(rows)} samples -> {args.out}/soak.csv, soak.png")
    for key in ("steps_per_s", "env_us_per_step", "commit_ms", "disk_mb"):
        vals = [x[key] for x in rows if x[key] == x[key]]
        if vals:
            print(f"  {key:>18}: median {statistics.median(vals):9.1f}  min {min(vals):9.1f}  max {max(vals):9.1f}")
    for name, (ok, what) in r["checks"].items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {what}")
    rb = r["readback"]
    print(f"  read back {rb['episodes']} kept episodes, {rb['frames_checked']} frames compared, {rb['mismatches']} mismatches; "
          f"{rb['episodes_in_parts']} read back from parts")
    ts = r["trace_stats"]
    print(f"  trace: {ts['batches']} batches, {ts['batches_evicted']} evicted, {ts['bytes_committed'] / 2**20:.0f} MiB committed, "
          f"records dropped {ts['records_dropped']}, broken {ts['broken']}")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
