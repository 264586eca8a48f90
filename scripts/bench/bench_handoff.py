"""The encoder worker's CPU per frame: the ring's pages handed to ffmpeg (vmsplice) against a copy into its pipe.

For 210x160, 600x400 and 1280x720 frames of noise (the costliest to encode),
a ``VideoRecorder`` sends ``--frames`` frames as fast as it can, once with
``VideoSettings(zero_copy=True)`` (the default) and once with
``zero_copy=False`` (one ``write`` per frame: the worker's copy), in
interleaved rounds. Printed: the worker's and ffmpeg's CPU per frame
(medians) and the worker's share of ffmpeg's CPU (target: <= 0.15x).
Usage: ``python scripts/bench/bench_handoff.py [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

import envrec
from envrec.formats.ffmpeg import VideoSettings

SIZES = ((210, 160, 1500), (400, 600, 300), (720, 1280, 100))  # height, width, frames per run


def one_run(h: int, w: int, n: int, zero_copy: bool) -> tuple[float, float]:
    """(worker µs per frame, ffmpeg µs per frame) of one clip of ``n`` frames."""
    frames = [np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8) for i in range(4)]
    with tempfile.TemporaryDirectory() as folder:
        rec = envrec.VideoRecorder(folder, fps=30, settings=VideoSettings(zero_copy=zero_copy, faststart=False))
        time.sleep(0.5)  # the worker's start is not the frames' cost
        start_cpu = rec.stats()["worker_cpu_s"]
        rec.start_clip("handoff")
        for i in range(n):
            rec.add_frame(frames[i % len(frames)], i)
        rec.end_clip()
        rec.close()
        stats = rec.stats()
    return (stats["worker_cpu_s"] - start_cpu) / n * 1e6, stats["ffmpeg_cpu_s"] / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    runs: dict[tuple[int, int, bool], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for h, w, n in SIZES:
            for zero_copy in (True, False):
                runs.setdefault((h, w, zero_copy), []).append(one_run(h, w, n, zero_copy))
    print(f"{'frame':>10} {'hand-off':>10} {'worker':>11} {'ffmpeg':>12} {'worker/ffmpeg':>14} {'runs of worker µs':>24}")
    for (h, w, zero_copy), values in runs.items():
        worker = statistics.median(v[0] for v in values)
        ffmpeg = statistics.median(v[1] for v in values)
        spread = ", ".join(f"{v[0]:.0f}" for v in values)
        how = "vmsplice" if zero_copy else "write"
        print(f"{w:>5}x{h:<4} {how:>10} {worker:>8.0f} µs {ffmpeg:>9.0f} µs {worker / ffmpeg:>13.3f}x {spread:>24}")


if __name__ == "__main__":
    main()
