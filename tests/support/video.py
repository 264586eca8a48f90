"""Decoding videos with ffmpeg itself, and small envs that render known pictures."""

from __future__ import annotations

import json
import os
import subprocess

import gymnasium as gym
import imageio_ffmpeg
import numpy as np
from gymnasium import spaces as S

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def decode(path, width: int, height: int) -> np.ndarray:
    """Every frame ffmpeg can decode from ``path`` (a cut-short file: up to its last complete fragment)."""
    out = subprocess.run(
        [FFMPEG, "-v", "quiet", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        capture_output=True,
        timeout=60,
    )
    n = len(out.stdout) // (width * height * 3)
    return np.frombuffer(out.stdout[: n * width * height * 3], np.uint8).reshape(n, height, width, 3)


def probe_size(path) -> tuple[int, int]:
    out = subprocess.run([FFMPEG, "-hide_banner", "-i", str(path)], capture_output=True, text=True, timeout=30)
    for token in out.stderr.replace(",", " ").split():
        if "x" in token and token.split("x")[0].isdigit() and token.split("x")[1].isdigit():
            return tuple(int(v) for v in token.split("x"))
    raise AssertionError(f"no size in ffmpeg's description of {path}: {out.stderr}")


def meta(folder, name) -> dict:
    with open(os.path.join(folder, name + ".meta.json")) as f:
        return json.load(f)


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


def run_episodes(env, episodes: int, seed: int = 0) -> int:
    """Step ``episodes`` episodes; return the number of steps taken."""
    steps = 0
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            done = term or trunc
            steps += 1
    return steps
