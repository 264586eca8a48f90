"""Where the env waits in lumps when the encoder is slower than the env: each step above a threshold, by index.

Records a synthetic env of HxW frames (``--step-us`` of CPU a step, one clip
for the whole run) with ``envrec.RecordVideo`` for ``--steps`` steps, ``--runs``
times, and prints per run the steps' total, the median step, the 99th percentile, ``close()``
and every step above ``--ms`` with its index. With the default 128 MiB ring
of 720p frames the ring would be full at step ~47 (a 64 MiB ring: ~23), where the
env waited for ffmpeg's start in one lump; the frame ring's pacing makes it wait a
little at each frame from half full instead. ``--ring-mib``, ``--nice`` and ``--behind-nice`` change the
ring's size and ffmpeg's niceness (``VideoSettings.nice``, ``behind_nice``; ``--behind-nice 10``: one
niceness, as before ``behind_nice``).
Usage: ``python scripts/soak/lumps.py [--frames 720x1280] [--step-us 500] [--steps 300] [--runs 3]
[--ms 20] [--ring-mib 128] [--nice 10] [--behind-nice 0] [--timeline] [--pause 0]``.
The first run of a process waits for its worker's cold start (an interpreter importing numpy and envrec,
while the env fills the ring); later runs take a spare worker when ``--pause`` leaves it time to be
ready (``envrec.supervision.spare``), and ``ENVREC_SPARE_WORKER=0`` makes every run cold.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

import envrec
from envrec.bench.variants import FrameEnv
from envrec.contract.records import Status


def one_run(folder: str, args: argparse.Namespace) -> str:
    h, w = (int(x) for x in args.frames.split("x"))
    env = envrec.RecordVideo(FrameEnv(h, w, length=None, step_us=args.step_us), folder,
                             episode_trigger=lambda e: True, ring_bytes=args.ring_mib << 20,
                             settings=envrec.VideoSettings(nice=args.nice, behind_nice=args.behind_nice))
    t_start = time.perf_counter()
    env.reset(seed=0)
    took, seen = [], Timeline(env.recorder, t_start) if args.timeline else None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        env.step(env.action_space.sample())
        took.append(time.perf_counter() - t0)
        if seen is not None:
            seen.look(len(took))
    t0 = time.perf_counter()
    env.close()
    closed = time.perf_counter() - t0
    ms = np.array(took) * 1e3
    lumps = ", ".join(f"step {i}: {x:.1f} ms" for i, x in enumerate(ms) if x > args.ms) or "none"
    return (f"steps {ms.sum():.0f} ms, median {np.median(ms):.2f} ms, p99 {np.percentile(ms, 99):.1f} ms, close {closed * 1e3:.0f} ms; "
            f"above {args.ms:g} ms: {lumps}" + (f"\n    {seen}" if seen is not None else ""))


class Timeline:
    """``--timeline``: after each step, the ms since ``reset()`` began when the encoder had started the clip's
    ffmpeg and when ffmpeg had taken its first frames (the worker's status words), and the step at which each
    was first seen."""

    MARKS = (1, 2, 5, 10, 20, 40)

    def __init__(self, recorder, t_start: float) -> None:
        self.recorder, self.t_start = recorder, t_start
        self.events: list[str] = []
        self._started = False
        self._marks = list(self.MARKS)

    def look(self, step: int) -> None:
        status = self.recorder._stream.status  # the worker's status words (tests and soak scripts read them)
        at = (time.perf_counter() - self.t_start) * 1e3
        if not self._started and status(Status.ENCODER_PID):
            self._started = True
            self.events.append(f"ffmpeg started by {at:.0f} ms (step {step})")
        written = status(Status.FRAMES_WRITTEN)
        while self._marks and written >= self._marks[0]:
            self.events.append(f"{self._marks.pop(0)} frame(s) taken by {at:.0f} ms (step {step})")

    def __str__(self) -> str:
        return "; ".join(self.events)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", default="720x1280")
    p.add_argument("--step-us", type=float, default=500.0)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ms", type=float, default=20.0)
    p.add_argument("--ring-mib", type=int, default=128)
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--behind-nice", type=int, default=0)
    p.add_argument("--timeline", action="store_true", help="when ffmpeg started and took its first frames")
    p.add_argument("--pause", type=float, default=0.0,
                   help="seconds between runs: from 1, the runs after the first take a spare worker ready")
    args = p.parse_args()
    for r in range(args.runs):
        if r:
            time.sleep(args.pause)
        with tempfile.TemporaryDirectory() as folder:
            print(f"run {r + 1}: {one_run(folder, args)}")


if __name__ == "__main__":
    main()
