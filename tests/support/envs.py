"""Small real Gymnasium environments for tests: one per space shape we must record, one that renders known pictures."""

from __future__ import annotations

import copy
import os
import random
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces as S

SPACES = {
    "box_f32_nan": S.Box(-1.0, 1.0, (4,), np.float32),
    "box_u8_image": S.Box(0, 255, (7, 5, 3), np.uint8),
    "box_f64_2d": S.Box(-10.0, 10.0, (2, 3), np.float64),
    "box_i16": S.Box(-100, 100, (3,), np.int16),
    "discrete": S.Discrete(5, start=-2),
    "multidiscrete": S.MultiDiscrete([3, 4, 5]),
    "multibinary": S.MultiBinary([2, 3]),
    "text": S.Text(max_length=12, min_length=0),
    "dict": S.Dict({"pos": S.Box(-1, 1, (2,), np.float32), "id": S.Discrete(4), "name": S.Text(6)}),
    "tuple": S.Tuple((S.Discrete(3), S.Box(0, 1, (2,), np.float32), S.Tuple((S.MultiBinary(3),)))),
}


class SpaceEnv(gym.Env):
    """Samples its observations from ``observation_space``; rewards include NaN and ±inf; infos are varied."""

    metadata = {"render_modes": []}  # noqa: RUF012  (Gymnasium declares metadata as a class-level dict)

    def __init__(self, observation_space, action_space=None, episode_len=7, nan=True):
        self.observation_space = observation_space
        self.action_space = action_space if action_space is not None else S.Discrete(3)
        self.episode_len = episode_len
        self.nan = nan
        self._t = 0

    def _obs(self):
        obs = self.observation_space.sample()
        if self.nan and isinstance(self.observation_space, S.Box) and self.observation_space.dtype.kind == "f":
            obs = obs.copy()
            obs.flat[0] = [np.nan, np.inf, -np.inf, -0.0][self._t % 4]
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self._t = 0
        return self._obs(), {"start": True, "seed_given": seed}

    def step(self, action):
        self._t += 1
        rewards = [1.5, float("nan"), float("inf"), -float("inf"), np.float32(0.25), 3]
        reward = rewards[self._t % len(rewards)] if self.nan else float(self._t)
        info = {}
        if self._t % 2:
            info = {
                "t": self._t,
                "np_f32": np.float32(self._t / 3),
                "arr": np.arange(3, dtype=np.int16) * self._t,
                "tuple": (1, "two"),
                "nan": float("nan"),
                7: "int key",
                "obj": object,
            }
        terminated = self._t >= self.episode_len
        return self._obs(), reward, terminated, False, info


class Capture(gym.Wrapper):
    """Keeps deep copies of everything the env returned, to compare with what was recorded."""

    def __init__(self, env):
        super().__init__(env)
        self.episodes = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.episodes.append({"obs": [copy.deepcopy(obs)], "act": [], "rew": [], "term": [], "trunc": [], "info": [info]})
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        ep = self.episodes[-1]
        ep["obs"].append(copy.deepcopy(obs))
        ep["act"].append(copy.deepcopy(action))
        ep["rew"].append(r)
        ep["term"].append(term)
        ep["trunc"].append(trunc)
        ep["info"].append(info)
        return obs, r, term, trunc, info


class ColourEnv(gym.Env):
    """Renders solid frames of one colour per episode; ``channels`` 3 or 4; any size."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}  # noqa: RUF012  (Gymnasium declares metadata as a class-level dict)

    def __init__(self, colours=((255, 0, 0), (0, 0, 255)), size=(48, 64), channels=3, episode_len=10, render_mode="rgb_array"):
        self.colours = colours
        self.size = size
        self.channels = channels
        self.episode_len = episode_len
        self.render_mode = render_mode
        self.observation_space = S.Discrete(2)
        self.action_space = S.Discrete(2)
        self.episode = -1
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return 0, 0.0, self.t >= self.episode_len, False, {}

    def render(self):
        h, w = self.size
        frame = np.zeros((h, w, self.channels), np.uint8)
        frame[..., :3] = self.colours[self.episode % len(self.colours)]
        if self.channels == 4:
            frame[..., 3] = 255
        return frame


class DriftEnv(gym.Env):
    """Observations drawn from ``np_random`` (so seeded and unseeded resets replay), and two faults to find:
    at step ``hidden_at`` (1-based; 0: never) ``observation[2]`` also gets Python's global ``random``, which
    replay cannot restore; with ``crash_seed``, the process dies (``os._exit``; with ``hang``, sleeps for 10
    minutes first) at step 2 of an episode reset with that seed."""

    metadata = {"render_modes": []}  # noqa: RUF012  (Gymnasium declares metadata as a class-level dict)

    def __init__(self, hidden_at=0, episode_len=8, crash_seed=None, hang=False, render_mode=None):
        self.hidden_at = hidden_at
        self.episode_len = episode_len
        self.crash_seed, self.hang = crash_seed, hang
        self.render_mode = render_mode
        self.observation_space = S.Box(-np.inf, np.inf, (4,), np.float64)
        self.action_space = S.Discrete(2)
        self.t = 0
        self.seed = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.seed = 0, seed
        return self.np_random.normal(size=4), {"t": 0}

    def step(self, action):
        self.t += 1
        if self.crash_seed is not None and self.seed == self.crash_seed and self.t == 2:
            if self.hang:
                time.sleep(600)
            os._exit(3)
        obs = self.np_random.normal(size=4)
        if self.t == self.hidden_at:
            obs[2] += random.random()
        return obs, float(action) + self.np_random.random(), self.t >= self.episode_len, False, {"t": self.t}


DRIFT_ID = "envrec-test/Drift-v0"


def register_drift() -> str:
    """Register ``DriftEnv`` as ``DRIFT_ID`` (once); the id."""
    if DRIFT_ID not in gym.registry:
        gym.register(DRIFT_ID, entry_point="tests.support.envs:DriftEnv", max_episode_steps=50)
    return DRIFT_ID


def make_drift(render_mode=None, **kwargs):
    """A ``DriftEnv`` without hidden randomness, as ``--make tests.support.envs:make_drift`` builds it."""
    return gym.wrappers.TimeLimit(DriftEnv(render_mode=render_mode, **kwargs), 50)


def make_crashing(render_mode=None):
    """A ``DriftEnv`` whose process dies in the episode reset with seed 1."""
    return make_drift(render_mode, crash_seed=1)


def make_hanging(render_mode=None):
    """A ``DriftEnv`` that hangs in the episode reset with seed 1."""
    return make_drift(render_mode, crash_seed=1, hang=True)


class DriftSnapshot:
    """A snapshot hook for ``DriftEnv``: its step count (``np_random`` is recorded beside a snapshot)."""

    name = "tests.support.envs:DRIFT_SNAPSHOT"

    def take(self, env):
        return np.array([env.unwrapped.t], np.int64)

    def restore(self, env, state):
        env.unwrapped.t = int(state[0])


DRIFT_SNAPSHOT = DriftSnapshot()
