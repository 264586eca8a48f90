"""Envs that fail one of ``envrec doctor``'s env checks each, registered on import.

The doctor makes its env in an interpreter of its own, so the tests name these as ``module:id``
(``tests.support.doctor_envs:DoctorHumanOnly-v0``): Gymnasium imports the module there, which registers them.
"""

from __future__ import annotations

import time
from typing import ClassVar

import gymnasium as gym
import numpy as np

MODULE = "tests.support.doctor_envs"


class _Base(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}

    def render(self):
        return np.zeros((24, 32, 3), np.uint8)


class HumanOnly(_Base):
    """Renders for a window only: nothing envrec can film."""

    metadata: ClassVar[dict] = {"render_modes": ["human"], "render_fps": 30}

    def render(self):
        return None


class NoFps(_Base):
    """Renders rgb_array frames but says nothing of its speed."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"]}


class FloatFrames(_Base):
    """Says rgb_array but renders float frames (0-1), which envrec refuses."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def render(self):
        return np.zeros((24, 32, 3), np.float32)


class AnsiOnly(_Base):
    """Renders text only: recorded as asciicast clips."""

    metadata: ClassVar[dict] = {"render_modes": ["ansi"], "render_fps": 4}

    def render(self):
        return "+--+\n|@ |\n+--+\n"


class Hangs(_Base):
    """Never finishes making: the doctor must give up on it, not wait."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = None) -> None:
        time.sleep(600)


for _name, _cls in (("HumanOnly", HumanOnly), ("NoFps", NoFps), ("FloatFrames", FloatFrames), ("AnsiOnly", AnsiOnly),
                    ("Hangs", Hangs)):
    gym.register(f"Doctor{_name}-v0", entry_point=_cls)


def env_id(name: str) -> str:
    """The ``module:id`` the doctor is given for the env ``name`` (``"HumanOnly"``...)."""
    return f"{MODULE}:Doctor{name}-v0"
