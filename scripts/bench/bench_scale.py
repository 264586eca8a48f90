"""Scaling: 1, 2 and 4 recorded envs as Ray actors on this machine, with and without recording.

Each actor steps its env (``--env``, default CartPole-v1; ``--frames`` adds
rendering and a video of every episode) as fast as it can for ``--seconds``;
the total steps/s of all actors is measured with recording off and on
(``envrec.ray.recording_env_creator``, raw traces), interleaved over
``--rounds`` rounds, with the bytes/s written. Medians and the spread are
printed, and each recorded figure as a ratio to the unrecorded one at the
same number of actors.

Usage: ``python scripts/bench/bench_scale.py [--rounds 3] [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import gymnasium as gym
import ray

from envrec.ray import recording_env_creator

ACTORS = (1, 2, 4)


@ray.remote
class Runner:
    def __init__(self, env_id: str, folder: str | None, index: int, video: bool):
        make = (lambda c: gym.make(env_id, render_mode="rgb_array")) if video else (lambda c: gym.make(env_id))
        if folder is None:
            self.env = make({})
        else:
            video_opts = {"episode_trigger": lambda e: True} if video else False
            self.env = recording_env_creator(make, folder, video=video_opts)({"worker_index": index})
        self.video = video
        self.env.reset(seed=index)

    def run(self, seconds: float) -> int:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            _, _, term, trunc, _ = self.env.step(self.env.action_space.sample())
            if self.video and not hasattr(self.env, "directory"):
                self.env.render()  # the unrecorded run renders too: only recording differs
            steps += 1
            if term or trunc:
                self.env.reset()
        return steps

    def close(self) -> None:
        self.env.close()


def one(n: int, recorded: bool, args, root: str) -> tuple[float, float]:
    folder = tempfile.mkdtemp(dir=root) if recorded else None
    actors = [Runner.remote(args.env, folder, i, args.frames) for i in range(n)]
    ray.get([a.run.remote(0.2) for a in actors])  # warm: workers started, first episode under way
    t0 = time.perf_counter()
    steps = sum(ray.get([a.run.remote(args.seconds) for a in actors]))
    ray.get([a.close.remote() for a in actors])  # everything committed
    elapsed = time.perf_counter() - t0
    written = 0
    if folder is not None:
        written = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
        shutil.rmtree(folder)
    for a in actors:
        ray.kill(a)
    return steps / elapsed, written / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--frames", action="store_true", help="render every step and record a video of every episode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    ray.init(num_cpus=max(ACTORS), include_dashboard=False, log_to_driver=False, logging_level="error")
    root = tempfile.mkdtemp(prefix="envrec-bench-scale-")
    results: dict[tuple[int, bool], list[tuple[float, float]]] = {(n, r): [] for n in ACTORS for r in (False, True)}
    try:
        for _ in range(args.rounds):
            for key, runs in results.items():
                runs.append(one(*key, args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ray.shutdown()
    print(f"{args.env}{' with video' if args.frames else ''} on {os.cpu_count()} cores; medians of {args.rounds} rounds (spread)")
    for n in ACTORS:
        base = [s for s, _ in results[(n, False)]]
        rec = [s for s, _ in results[(n, True)]]
        rate = statistics.median(b for _, b in results[(n, True)])
        print(f"  {n} actor(s): {statistics.median(base):8.0f} steps/s unrecorded ({min(base):.0f}-{max(base):.0f}), "
              f"{statistics.median(rec):8.0f} recorded ({min(rec):.0f}-{max(rec):.0f}) = "
              f"{statistics.median(rec) / statistics.median(base):.2f}x, {rate / 1e6:.1f} MB/s written")


if __name__ == "__main__":
    main()
