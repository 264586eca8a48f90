"""What ``envrec.keep`` costs: one ``best(3)`` decision, and a CartPole run filmed with ``keep_if=best(3)``.

1. A ranked decision alone: ``best(3)`` asked about 100,000 outcomes with
   random returns (its recorder a stand-in that only counts discards),
   median over 7 rounds, in µs a decision.
2. The same CartPole episodes (seeded, sampled actions, every episode
   filmed) recorded with ``keep_if=None`` and with ``keep_if=best(3)``, in
   turn, ``--rounds`` times each: the medians of their wall times and their
   ratio (the keeper's own cost is a few µs a clip; discards are file
   deletions in the env process), and how many clips each left.

Usage: ``python scripts/bench/bench_keep.py [--episodes 10] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import gymnasium as gym
import numpy as np

import envrec


class _Counter:
    """Stands in for a recorder: counts the clips a keeper discards."""

    def __init__(self) -> None:
        self.discarded = 0

    def discard_clip(self, name: str) -> None:
        self.discarded += 1


def decision_us(n: int = 100_000, rounds: int = 7) -> float:
    returns = np.random.default_rng(0).normal(size=n).tolist()
    outcomes = [envrec.EpisodeOutcome(i, r, 10, True, False, {}, f"c{i}") for i, r in enumerate(returns)]
    times = []
    for _ in range(rounds):
        keeper = envrec.keep.best(3)
        keeper.attach(_Counter())
        t0 = time.perf_counter_ns()
        for o in outcomes:
            keeper(o)
        times.append((time.perf_counter_ns() - t0) / n / 1e3)
    return statistics.median(times)


def filmed_run(folder: str, episodes: int, keep_if) -> tuple[float, int]:
    env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), folder,
                             episode_trigger=lambda e: True, keep_if=keep_if)
    env.action_space.seed(0)
    t0 = time.perf_counter()
    for k in range(episodes):
        env.reset(seed=k)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    env.close()
    return time.perf_counter() - t0, sum(name.endswith(".mp4") for name in os.listdir(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"best(3) decision: {decision_us():.2f} us (median of 7 rounds of 100,000)")
    walls: dict[str, list[float]] = {"keep all": [], "best(3)": []}
    clips: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as root:
        for r in range(args.rounds):
            for label, times in walls.items():
                folder = os.path.join(root, f"{label}-{r}")
                wall, clips[label] = filmed_run(folder, args.episodes, envrec.keep.best(3) if label == "best(3)" else None)
                times.append(wall)
    for label, values in walls.items():
        print(f"{label}: {statistics.median(values):.2f} s for {args.episodes} filmed episodes, {clips[label]} clips left")
    ratio = statistics.median(walls["best(3)"]) / statistics.median(walls["keep all"])
    print(f"ratio best(3) / keep all: {ratio:.2f}")


if __name__ == "__main__":
    main()
