"""The episode loop that steps a wrapped env, and the feeder that hands a recorder episodes directly."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

import envrec


def episode_lengths(env, episodes: int, seed: int = 0, *, reseed: bool = True, action_seed: int | None = None,
                    options: dict | None = None) -> list[int]:
    """Step ``episodes`` whole episodes of ``env`` with sampled actions; their lengths.

    Episode ``k`` is reset with ``seed=seed + k`` (with ``reseed=False``: only the first, with ``seed``;
    the others go on from the env's own generator), with ``options`` if given; ``action_seed`` seeds the
    action space first. No reset after the last episode.
    """
    if action_seed is not None:
        env.action_space.seed(action_seed)
    lengths = []
    for k in range(episodes):
        env.reset(seed=seed + k if reseed or k == 0 else None, options=options)
        n, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            n, done = n + 1, terminated or truncated
        lengths.append(n)
    return lengths


def run_episodes(env, episodes: int, seed: int = 0, **how) -> int:
    """``episode_lengths`` (same arguments), for the number of steps taken."""
    return sum(episode_lengths(env, episodes, seed, **how))


def feed(rec, episodes: int, steps: int = 10, start: int = 0, *, shape: tuple[int, ...] = (16, 16, 3),
         fill: Callable[[int], int] | None = None, during: Callable[[int, int], object] | None = None) -> None:
    """Hand a ``TraceRecorder`` ``episodes`` episodes of ``steps`` steps, numbered from ``start``.

    Episode ``k`` is reset with ``seed=k``; its observations are uint8 frames of ``shape`` filled with
    ``fill(k)`` (0 without it) whose first value is the step's index (0 to ``steps - 1``) after each
    step; step ``t``'s action is ``t % 2``, its reward 1.0, the last step terminates. ``during(k, t)``
    runs after each step.
    """
    for k in range(start, start + episodes):
        obs = np.full(shape, 0 if fill is None else fill(k), np.uint8)
        rec.add_reset(obs, seed=k)
        for t in range(steps):
            obs.flat[0] = t
            rec.add_step(t % 2, obs, 1.0, t == steps - 1, False)
            if during is not None:
                during(k, t)


def record_cartpole(folder, episodes: int = 3, *, video: bool | Callable[[int], bool] = False, action_seed: int = 0,
                    **options) -> int:
    """Record ``episodes`` CartPole-v1 episodes (``run_episodes``) with ``RecordTrace(..., **options)``; the steps taken.

    ``video``: also ``RecordVideo`` into the same folder, of every episode (``True``) or of those its
    episode trigger picks, as ``envrec record`` writes them side by side.
    """
    env = gym.make("CartPole-v1", render_mode="rgb_array" if video else None)
    if video:
        env = envrec.RecordVideo(env, str(folder), episode_trigger=(lambda e: True) if video is True else video)
    env = envrec.RecordTrace(env, folder, **options)
    steps = run_episodes(env, episodes, action_seed=action_seed)
    env.close()
    return steps
