"""Compressed traces against raw ones on Atari-like frames, side by side in one run.

Two measurements per codec (raw, zstd-1, zstd-3, zstd-3 without the delta filter ``zstd-3-nof``,
the default ``auto``, lz4), interleaved over
``--rounds`` rounds, medians printed with ratios to raw:

* throughput: the env (210x160x3 frames, no work of its own) steps as fast as
  the serializer takes the records, for ``--seconds``; steps/s counts until
  everything is committed (``close()`` included). Bytes on disk per step
  and the ratio to raw come from the same run.
* env-side cost: the same env paced at ``--rate`` steps/s, so the ring never
  fills; the mean µs of ``RecordTrace``'s own work per step (its call
  timer; medians over rounds), which must not change with the codec (compression happens in the
  worker).

Targets: zstd >= 50x smaller than raw, its throughput >= raw's, env-side
cost within +-5 %. Usage: ``python scripts/bench/bench_compression.py [--rounds 3] [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import envrec
from envrec.bench.variants import FrameEnv

CODECS = {"raw": None, "zstd-1": "zstd:1", "zstd-3": "zstd", "zstd-3-nof": envrec.Compression(delta=False), "auto": "auto",
          "lz4": "lz4"}


def throughput(folder: str, compression, seconds: float) -> tuple[float, float]:
    """(steps per second until committed, bytes on disk per step)."""
    env = envrec.RecordTrace(FrameEnv(frames="game"), folder, compression=compression)
    steps, t0, seed = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        env.reset(seed=seed)
        seed += 1
        for _ in range(200):
            _, _, term, _, _ = env.step(0)
            steps += 1
            if term:
                env.reset(seed=seed)
                seed += 1
    env.close()
    elapsed = time.perf_counter() - t0
    on_disk = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
    return steps / elapsed, on_disk / steps


def env_side_us(folder: str, compression, seconds: float, rate: float) -> float:
    """Mean µs of the recorder's own work per step, the env paced so the ring never fills."""
    env = envrec.RecordTrace(FrameEnv(frames="game"), folder, compression=compression)
    env.reset(seed=0)
    t0 = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) - t0 < seconds:
        _, _, term, _, _ = env.step(0)
        n += 1
        if term:
            env.reset(seed=n)
        pause = t0 + n / rate - now
        if pause > 0:
            time.sleep(pause)
    stats = env.stats()
    env.close()
    assert stats["blocked_s"] < 0.01 * seconds, f"the ring filled ({stats['blocked_s']:.2f} s blocked): lower --rate"
    return stats["call_mean_us"]  # not blocked, so no outliers to hide; the p50 is a histogram bucket


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=1000.0, help="paced steps/s for the env-side cost (default 1000)")
    p.add_argument("--folder", default=None)
    args = p.parse_args()
    tput: dict[str, list] = {k: [] for k in CODECS}
    size: dict[str, list] = {k: [] for k in CODECS}
    cost: dict[str, list] = {k: [] for k in CODECS}
    base = tempfile.mkdtemp(prefix="bench-compression-", dir=args.folder or ".")
    try:
        for r in range(args.rounds):
            for name, codec in CODECS.items():
                folder = os.path.join(base, f"{name}-{r}")
                sps, per_step = throughput(folder, codec, args.seconds)
                tput[name].append(sps)
                size[name].append(per_step)
                shutil.rmtree(folder)
                cost[name].append(env_side_us(folder + "-paced", codec, args.seconds, args.rate))
                shutil.rmtree(folder + "-paced")
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {k: (statistics.median(tput[k]), statistics.median(size[k]), statistics.median(cost[k])) for k in CODECS}
    raw = med["raw"]
    print(f"Atari-like 210x160x3 frames, medians of {args.rounds} interleaved rounds of {args.seconds:g} s")
    print(f"{'codec':>10} {'steps/s':>9} {'vs raw':>7} {'bytes/step':>11} {'smaller':>8} {'env µs/step':>12} {'vs raw':>7}")
    for k, (sps, per_step, us) in med.items():
        print(f"{k:>10} {sps:9.0f} {sps / raw[0]:6.2f}x {per_step:11.0f} {raw[1] / per_step:7.0f}x {us:12.1f} {us / raw[2]:6.2f}x")


if __name__ == "__main__":
    main()
