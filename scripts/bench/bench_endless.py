"""An episode that never ends: what is on disk, and what a reader sees, while it runs.

An env whose episode never ends (``FrameEnv(84, 84, length=None)``) is
recorded for ``--steps`` steps with ``batch_bytes=1 MB`` and ``max_bytes=5 MB``
(the case of issue 24: before episode parts, 424 MB were on disk after 20,000
steps and a reader saw none of them until ``close()``). Every ``--every``
steps it samples:

* the bytes of every file in the folder (committed batches, the open batch,
  spills, manifests) and the bytes the manifest names, against ``max_bytes``;
* what a ``TraceReader`` opened then sees: steps, the episode's ``first_step``
  (it moves forward as a budget evicts the oldest parts) and its parts, and
  how many times it had to read again because a batch was evicted under it;
* how far behind the env the reader is, in steps and in seconds.

Variants run side by side, interleaved over ``--rounds``: no recording,
envrec as configured (``commit_interval`` default 5 s), and envrec with
``commit_interval=None`` (parts cut by size only). It prints steps/s medians
with ratios to no recording, and each envrec variant's samples from its last
round. ``--compression`` (default ``none``: raw frames, bytes as the issue
measured them; ``auto`` is envrec's default) and ``--step-us`` (the env's own
cost per step) are passed through.

Usage: ``python scripts/bench/bench_endless.py [--steps 20000] [--every 4000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import envrec
from envrec.bench.variants import FrameEnv

MB = 1_000_000


def folder_bytes(folder: str) -> int:
    total = 0
    for entry in os.scandir(folder):
        try:
            total += entry.stat().st_size
        except FileNotFoundError:
            pass  # evicted or renamed while we looked
    return total


def look(folder: str) -> dict:
    """What a reader opened now sees (read again when a budget evicts a batch under it, as ``refresh()`` would;
    ``looks``: how many reads that took)."""
    for looks in range(1, 51):
        try:
            reader = envrec.TraceReader(folder, verify=False)
        except envrec.TraceError:
            return {"steps": 0, "first_step": None, "parts": 0, "named_bytes": 0, "looks": looks}  # nothing committed yet
        try:
            with reader:
                steps = sum(ep.length for ep in reader)
                last = reader[-1] if len(reader) else None
                named = sum(m["counters"]["bytes"] for m in reader.manifests)
        except envrec.TraceError:
            continue  # evicted while read: look again
        return {
            "steps": steps,
            "first_step": last.first_step if last is not None else None,
            "parts": len(last.parts) if last is not None else 0,
            "named_bytes": named,
            "looks": looks,
        }
    raise RuntimeError(f"{folder}: 50 looks in a row were overtaken by an eviction")


def one_run(folder: str, variant: str, args: argparse.Namespace) -> dict:
    env = FrameEnv(84, 84, length=None, step_us=args.step_us)
    if variant != "none":
        compression = None if args.compression == "none" else args.compression
        kwargs = {"commit_interval": None} if variant == "size only" else {}
        env = envrec.RecordTrace(env, folder, batch_bytes=MB, max_bytes=5 * MB, compression=compression, **kwargs)
    samples = []
    env.reset(seed=0)
    t0 = time.perf_counter()
    busy = 0.0  # the time spent stepping, without the samples' own
    for step in range(1, args.steps + 1):
        env.step(0)
        if variant != "none" and step % args.every == 0:
            busy += time.perf_counter() - t0
            rate = step / busy
            seen = look(folder)
            samples.append({"step": step, "disk_mb": folder_bytes(folder) / MB, **seen,
                            "behind_steps": step - seen["steps"] - (seen["first_step"] or 0),
                            "behind_s": (step - seen["steps"] - (seen["first_step"] or 0)) / rate})
            t0 = time.perf_counter()
    busy += time.perf_counter() - t0
    env.close()
    return {"steps_per_s": args.steps / busy, "samples": samples, "final": look(folder) if variant != "none" else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--every", type=int, default=4_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compression", default="none", help="none, auto, zstd, ... (RecordTrace's compression)")
    p.add_argument("--step-us", type=float, default=0.0)
    args = p.parse_args()
    variants = ("none", "envrec", "size only")
    rates: dict[str, list[float]] = {v: [] for v in variants}
    last: dict[str, dict] = {}
    for _ in range(args.rounds):
        for v in variants:
            with tempfile.TemporaryDirectory(prefix="envrec-endless-") as folder:
                r = one_run(folder, v, args)
            rates[v].append(r["steps_per_s"])
            last[v] = r
    base = statistics.median(rates["none"])
    print(f"{args.steps} steps of one endless episode, 84x84x3, batch_bytes=1 MB, max_bytes=5 MB, "
          f"compression={args.compression}; medians over {args.rounds} rounds")
    for v in variants:
        med = statistics.median(rates[v])
        print(f"  {v:>10}: {med:8.0f} steps/s  {med / base:5.2f}x of no recording")
    for v in variants[1:]:
        r = last[v]
        print(f"\n{v} (last round): at step, files on disk / named by the manifest (MB), reader sees steps "
              "[first_step, parts], behind by")
        for s in r["samples"]:
            print(f"  {s['step']:>6}: {s['disk_mb']:6.1f} / {s['named_bytes'] / MB:5.1f} MB   {s['steps']:>6} steps "
                  f"[{s['first_step']}, {s['parts']}]   behind {s['behind_steps']} steps ({s['behind_s']:.2f} s), {s['looks']} look(s)")
        worst = max(s["disk_mb"] for s in r["samples"])
        print(f"  largest on disk: {worst:.1f} MB = {worst / 5:.2f}x max_bytes; after close: {r['final']}")


if __name__ == "__main__":
    main()
