"""What envrec.sb3 costs an SB3 loop, against the alternatives, in interleaved rounds (medians reported).

1. Traces: vector steps/s of a ``DummyVecEnv`` of ``--envs`` CartPoles
   stepped with random actions: ``bare`` (no recording), ``vec-record-trace``
   (``envrec.sb3.VecRecordTrace`` around the VecEnv) and ``inner-record-trace``
   (an ``envrec.RecordTrace`` inside each ``make_env``: one worker per sub-env).
   The loop is timed; ``close()`` (flushing) separately.
2. Video: ``--video-steps`` vector steps of 4 CartPoles with a clip always
   recording (``record_video_trigger=lambda s: s % 100 == 0``,
   ``video_length=99``): SB3's ``VecVideoRecorder`` (frames held, moviepy
   encoding in the step that ends a clip) against ``envrec.sb3.VecRecordVideo``
   (frames to the encoder worker). Wall time of the loop with ``close()``, and
   the slowest step (SB3's stall at a clip's end). Needs moviepy for SB3's.

``python scripts/bench/bench_sb3.py [--rounds 3] [--steps 2000] [--envs 8] [--video-steps 300]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import gymnasium as gym  # the SDL driver is chosen above
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecVideoRecorder

import envrec
from envrec.sb3 import VecRecordTrace, VecRecordVideo


class MakeEnv:
    def __init__(self, i: int, inner: str | None = None, render_mode: str | None = None) -> None:
        self.i, self.inner, self.render_mode = i, inner, render_mode

    def __call__(self) -> gym.Env:
        env = gym.make("CartPole-v1", render_mode=self.render_mode)
        return envrec.RecordTrace(env, self.inner, name_prefix=f"inner{self.i}") if self.inner else env


def trace_round(variant: str, folder: str, n: int, steps: int) -> tuple[float, float, float]:
    """(vector steps/s of the loop, this process's CPU µs per vector step, seconds in close()) of one variant.

    The CPU time is what the loop's own process spent, the workers' not: on a loaded machine the wall-clock
    rate also says how the workers competed for the cores."""
    inner = folder if variant == "inner-record-trace" else None
    venv = DummyVecEnv([MakeEnv(i, inner) for i in range(n)])
    if variant == "vec-record-trace":
        venv = VecRecordTrace(venv, folder, name_prefix="outer")
    actions = np.random.default_rng(0).integers(0, 2, (steps, n))
    venv.seed(0)
    venv.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    for a in actions:
        venv.step(a)
    t1, c1 = time.perf_counter(), time.process_time()
    venv.close()
    return steps / (t1 - t0), (c1 - c0) / steps * 1e6, time.perf_counter() - t1


def video_round(variant: str, folder: str, steps: int) -> tuple[float, float]:
    """(seconds for the loop and close(), the slowest step in seconds)."""
    venv = DummyVecEnv([MakeEnv(i, render_mode="rgb_array") for i in range(4)])
    wrap = VecVideoRecorder if variant == "sb3-vec-video-recorder" else VecRecordVideo
    venv = wrap(venv, folder, lambda s: s % 100 == 0, video_length=99)
    actions = np.random.default_rng(0).integers(0, 2, (steps, 4))
    slowest = 0.0
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # SB3, moviepy: each clip
        venv.reset()
        for a in actions:
            s = time.perf_counter()
            venv.step(a)
            slowest = max(slowest, time.perf_counter() - s)
        venv.close()
    return time.perf_counter() - t0, slowest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--video-steps", type=int, default=300)
    args = p.parse_args()
    traces: dict[str, list[tuple[float, float, float]]] = {"bare": [], "vec-record-trace": [], "inner-record-trace": []}
    videos: dict[str, list[tuple[float, float]]] = {"sb3-vec-video-recorder": [], "vec-record-video": []}
    for _ in range(args.rounds):
        for variant, runs in traces.items():
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(trace_round(variant, tmp, args.envs, args.steps))
        for variant, runs in videos.items():
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(video_round(variant, tmp, args.video_steps))
    bare = statistics.median(r[0] for r in traces["bare"])
    print(f"traces: {args.envs} CartPoles in a DummyVecEnv, {args.steps} vector steps, {args.rounds} rounds (medians)")
    for variant, runs in traces.items():
        sps, cpu, close = (statistics.median(r[k] for r in runs) for k in range(3))
        print(f"  {variant:20} {sps:7.0f} vector steps/s ({sps / bare:.2f}x bare), {cpu:6.0f} µs CPU a step in this process,"
              f" close {close:.2f} s")
    print(f"video: 4 CartPoles, {args.video_steps} vector steps, a clip always recording (100 frames each)")
    for variant, runs in videos.items():
        wall, slowest = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"  {variant:24} {wall:6.2f} s with close()  slowest step {slowest * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
