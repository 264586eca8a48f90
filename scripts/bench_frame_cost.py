"""Env-side cost of one recorded frame, against a memcpy of it, at three sizes.

For 210x160x3, 600x400x3 and 1280x720x3 frames: the median time of copying the
frame into another (cache-warm) buffer with numpy, and envrec's own stats of
``VideoRecorder.add_frame`` (p50, p99) while frames arrive at a pace the
encoder keeps up with (so no call waits for room). Target (DESIGN.md):
<= 1.5x the memcpy + 10 µs.
Usage: ``python scripts/bench_frame_cost.py [--frames 200]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

import envrec

SIZES = ((210, 160, 0.002), (400, 600, 0.006), (720, 1280, 0.025))  # height, width, pace (s per frame)


def memcpy_us(frame: np.ndarray, repeats: int = 200) -> float:
    dst = np.empty_like(frame)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        np.copyto(dst, frame)
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=200)
    args = p.parse_args()
    print(f"{'frame':>12} {'memcpy':>9} {'envrec p50':>11} {'p99':>9} {'target':>9}  p50 vs target")
    for h, w, pace in SIZES:
        rng = np.random.default_rng(0)
        frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(8)]
        copy = memcpy_us(frames[0])
        with tempfile.TemporaryDirectory() as folder:
            rec = envrec.VideoRecorder(folder, fps=30)
            time.sleep(1.0)  # let the worker start
            rec.start_clip("cost")
            for i in range(args.frames):
                frame = frames[i % len(frames)].copy()  # a fresh frame, as render() returns
                rec.add_frame(frame, i)
                time.sleep(pace)
            rec.end_clip()
            stats = rec.stats()
            rec.close()
        target = 1.5 * copy + 10
        verdict = "met" if stats["call_p50_us"] <= target else f"missed by {stats['call_p50_us'] - target:.0f} µs"
        print(
            f"{w:>5}x{h:<4}x3 {copy:>7.1f}µs {stats['call_p50_us']:>9.1f}µs {stats['call_p99_us']:>7.1f}µs "
            f"{target:>7.1f}µs  {verdict} (blocked {stats['blocked_s']:.3f} s, dropped {stats['frames_dropped']})"
        )


if __name__ == "__main__":
    main()
