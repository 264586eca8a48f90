"""A small env that renders pictures of its state at any ``width``/``height``, with optional hidden randomness.

Registered as ``envrec-test/Picture-v0`` (``register()``), so a recording of it carries a spec that
replay recreates by importing this module.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces as S

ENV_ID = "envrec-test/Picture-v0"


class PictureEnv(gym.Env):
    """Observation ``[t, x]``: ``x`` a random walk drawn from ``np_random``; frames show a bar at ``x`` on a
    background that changes with ``t``. At step ``hidden_step`` (when set), ``x`` also moves by randomness
    no seed reaches (fresh OS entropy), so a replay diverges there."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012  (Gymnasium declares metadata as a class-level dict)

    def __init__(self, width: int = 64, height: int = 48, length: int = 12, hidden_step: int | None = None,
                 render_mode: str | None = None):
        self.width, self.height, self.length, self.hidden_step = width, height, length, hidden_step
        self.render_mode = render_mode
        self.observation_space = S.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = S.Discrete(3)
        self.t, self.x = 0, 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.x], np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, float(self.np_random.uniform(-1, 1))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.x += (int(action) - 1) * 0.1 + float(self.np_random.normal(0, 0.05))
        if self.t == self.hidden_step:
            self.x += float(np.random.default_rng().uniform(0.5, 1.0))  # no seed reaches this
        return self._obs(), float(-abs(self.x)), abs(self.x) > 2, self.t >= self.length, {}

    def render(self):
        frame = np.zeros((self.height, self.width, 3), np.uint8)
        frame[..., 0] = (self.t * 20) % 256
        frame[..., 2] = 80
        col = int(np.clip((self.x + 2) / 4 * (self.width - 1), 0, self.width - 1))
        frame[:, max(0, col - 1) : col + 2, 1] = 255
        return frame


def register() -> str:
    """Register ``PictureEnv`` as ``envrec-test/Picture-v0`` (once); its id."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point="tests.support.picture_env:PictureEnv")
    return ENV_ID
