"""What ``envrec bench`` and the scripts compare envrec with: a synthetic env and the alternatives.

* ``FrameEnv``: frames of any size whose step costs almost nothing (or a set
  amount of busy CPU, like an emulator), returning a fresh frame each step:
  noise, or game-like frames (``game_frame``) that compress as a game's do.
  The one synthetic frame env of ``envrec bench``, the tests and ``scripts/``.
* ``RenderEveryStep``: produces each frame and throws it away (the cost of
  frames without recording them).
* ``SyncPipe``: old gym's VideoRecorder way, an ffmpeg child per episode fed
  from inside ``step()``.
* ``InProcessTrace``: gym-recording's TraceRecording way, episodes buffered
  in lists in the env process, each batch written synchronously at an
  episode end.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..errors import ConfigError
from ..formats.ffmpeg import VideoSettings, encode_command, find_ffmpeg

__all__ = ["FrameEnv", "InProcessTrace", "RenderEveryStep", "SyncPipe", "game_frame"]


class FrameEnv(gym.Env):
    """HxWx3 uint8 observations (and renders), a fresh frame each step, after ``step_us`` of busy work.

    Args:
        height: Frame height in pixels.
        width: Frame width in pixels.
        length: Steps per episode (``None``: episodes never end).
        step_us: Busy CPU time per step, in microseconds (an emulator's cost).
        render_mode: Only ``"rgb_array"``.
        frames: ``"noise"``, random pixels that do not compress (one of them changes each step), or
            ``"game"``, a static background with moving sprites that compress as a game's frames do;
            each ``"game"`` frame depends only on the episode's reset seed and the step
            (:func:`game_frame`), so a reader can check every frame it reads back.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}  # noqa: RUF012  (Gymnasium declares metadata as a class-level dict)

    def __init__(self, height: int = 210, width: int = 160, length: int | None = 1000, step_us: float = 0.0,
                 render_mode="rgb_array", frames: str = "noise"):
        if frames not in ("noise", "game"):
            raise ConfigError(f"frames must be 'noise' or 'game', not {frames!r}")
        self.observation_space = spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.action_space = spaces.Discrete(6)
        self.length = length
        self.step_s = step_us / 1e6
        self.render_mode = render_mode
        self.game = frames == "game"
        if self.game:
            self.frame = game_frame(0, 0, height, width)
        else:
            self.frame = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
        self.seed_, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_ = int(seed) if seed is not None else 0
        self.t = 0
        if self.game:
            return self._draw(), {}
        return self.frame.copy(), {}

    def step(self, action):
        self.t += 1
        if self.step_s:
            end = time.perf_counter() + self.step_s
            while time.perf_counter() < end:
                pass
        if self.game:
            obs = self._draw()
        else:
            self.frame[0, 0, 0] = self.t % 256
            obs = self.frame.copy()
        return obs, 1.0, self.length is not None and self.t >= self.length, False, {}

    def render(self):
        return self.frame

    def _draw(self) -> np.ndarray:
        """A new game frame (never changed afterwards: observation and render share it)."""
        self.frame = game_frame(self.seed_, self.t, *self.frame.shape[:2])
        return self.frame


def game_frame(seed: int, t: int, height: int = 210, width: int = 160) -> np.ndarray:
    """What ``FrameEnv(frames="game")`` shows at step ``t`` of an episode reset with ``seed``.

    Args:
        seed: The episode's reset seed (0 when it was reset without one).
        t: The step (0: the reset's observation).
        height: Frame height in pixels.
        width: Frame width in pixels.
    """
    frame = np.zeros((height, width, 3), np.uint8)
    frame[:, :, 0] = 144
    frame[30:190:20, :, 1] = 72  # stripes and a floor, as Atari's playfields have
    frame[195:, :, :] = 200
    for k in range(4):
        y = (seed * 13 + k * 47 + t * (k + 1)) % max(1, height - 10)
        x = (seed * 7 + k * 31 + t * (2 * k + 1)) % max(1, width - 6)
        frame[y : y + 10, x : x + 6] = (60 * k, 255, 220 - 50 * k)
    return frame


class RenderEveryStep(gym.Wrapper):
    """Produce each frame and throw it away."""

    def reset(self, **kwargs):
        out = self.env.reset(**kwargs)
        self.env.render()
        return out

    def step(self, action):
        out = self.env.step(action)
        self.env.render()
        return out


class SyncPipe(gym.Wrapper):
    """Old gym's VideoRecorder: an ffmpeg per episode, fed from inside step().

    With envrec's encoder settings (codec, preset, threads, conversion) unless
    told otherwise, so a comparison measures the hand-off alone."""

    def __init__(self, env, folder: str, settings: VideoSettings | None = None) -> None:
        super().__init__(env)
        os.makedirs(folder, exist_ok=True)
        self.folder, self.n = folder, 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.exe, _ = find_ffmpeg()
        self.settings = settings or VideoSettings()  # envrec's own encoder settings: only the hand-off differs
        self.fps = env.metadata.get("render_fps", 30)

    def _frame(self):
        frame = np.asarray(self.env.render())
        if self.proc is None:
            h, w, c = frame.shape
            path = os.path.join(self.folder, f"sync-{self.n}.mp4")
            cmd = encode_command(self.exe, w, h, c, self.fps, path, self.settings)
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE)
        assert self.proc.stdin is not None
        self.proc.stdin.write(frame.tobytes())

    def _close_clip(self):
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc, self.n = None, self.n + 1

    def reset(self, **kwargs):
        self._close_clip()
        out = self.env.reset(**kwargs)
        self._frame()
        return out

    def step(self, action):
        out = self.env.step(action)
        self._frame()
        return out

    def close(self):
        self._close_clip()
        super().close()


class InProcessTrace(gym.Wrapper):
    """gym-recording's way: buffer each episode in lists, write batches synchronously (~5 MB target)."""

    def __init__(self, env, directory: str) -> None:
        super().__init__(env)
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.obs: list[Any] = []
        self.acts: list[Any] = []
        self.rews: list[Any] = []
        self.episodes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.buffered = 0
        self.batch_steps = 100
        self.first = 0

    def reset(self, **kwargs):
        self._end_episode()
        obs, info = self.env.reset(**kwargs)
        self.obs.append(obs)
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.acts.append(action)
        self.obs.append(obs)
        self.rews.append(r)
        self.buffered += 1
        return obs, r, term, trunc, info

    def _end_episode(self):
        if not self.obs:
            return
        self.episodes.append((np.array(self.obs), np.array(self.acts), np.array(self.rews)))
        self.obs, self.acts, self.rews = [], [], []
        if self.buffered >= self.batch_steps:
            self._save()

    def _save(self):
        stem = os.path.join(self.directory, f"inproc.ep{self.first:09d}")
        with open(stem + ".bin", "wb") as bin_f:
            eps = []
            for arrays in self.episodes:
                d = {}
                for name, a in zip(("observations", "actions", "rewards"), arrays, strict=True):
                    bin_f.write(b"\0" * (-bin_f.tell() % 8))
                    off = bin_f.tell()
                    a.tofile(bin_f)
                    d[name] = {"__type": "ndarray", "shape": a.shape, "dtype": str(a.dtype), "npyoff": off}
                eps.append(d)
            size = bin_f.tell()
        with open(stem + ".json", "w") as f:
            json.dump({"episodes": eps}, f)
        self.batch_steps = max(1, min(50000, int(5_000_000 / (size / max(self.buffered, 1)) + 1)))
        self.first += len(self.episodes)
        self.episodes, self.buffered = [], 0

    def close(self):
        self._end_episode()
        if self.episodes:
            self._save()
        super().close()
