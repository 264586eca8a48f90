"""A recording made for real: a short episode through ``RecordTrace`` (a serializer worker started as envrec
starts it: a fresh interpreter, the ring's memfd and eventfds passed to it) and a short clip through
``VideoRecorder`` (an encoder worker and its ffmpeg), both read back, in a temporary folder removed after.

What no single check above sees: that a worker process starts here (``sys.executable`` or ``ENVREC_PYTHON``
is a Python that imports envrec, descriptors pass, nothing forbids the child), and that a step and a frame
cross the ring to the disk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import EnvrecError
from ..read.reader import TraceReader
from ..record.record_trace import RecordTrace
from ..record.video_recorder import VideoRecorder
from .result import CheckStatus, Result

__all__ = ["RECORDING_STEPS", "recording_result"]

RECORDING_STEPS = 50
CLIP_FRAMES, CLIP_SHAPE = 10, (48, 64, 3)
WORKER_FIX = ("envrec starts its workers as `python -P -m envrec.workers ROLE` with this interpreter "
              "(or ENVREC_PYTHON): check that it imports envrec (ENVREC_PYTHON unset, or a Python with envrec "
              "installed), and run with -v to see the worker's output")


class _Tiny(gym.Env):
    """Ten-dimensional observations, two actions, episodes of ``RECORDING_STEPS`` steps."""

    metadata = {"render_modes": []}  # noqa: RUF012  (Gymnasium declares metadata as a class-level dict)
    observation_space = gym.spaces.Box(-1.0, 1.0, (10,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(10, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full(10, self.t / RECORDING_STEPS, np.float32), 1.0, self.t >= RECORDING_STEPS, False, {}


def _trace(folder: str) -> str:
    """'' when an episode recorded through a serializer reads back whole; else what went wrong."""
    env = RecordTrace(_Tiny(), folder, name_prefix="doctor")
    try:
        env.reset(seed=0)
        for _ in range(RECORDING_STEPS):
            env.step(1)
    finally:
        env.close()
    stats = env.stats()
    if stats["broken"] or stats["records_dropped"]:
        return f"the trace broke (records dropped: {stats['records_dropped']})"
    episodes = list(TraceReader(folder, prefix="doctor"))
    if len(episodes) != 1 or episodes[0].length != RECORDING_STEPS:
        return f"read back {[e.length for e in episodes]} step(s), not one episode of {RECORDING_STEPS}"
    return ""


def _clip(folder: str) -> str:
    """'' when a clip encoded by an encoder worker is written with its metadata; else what went wrong."""
    recorder = VideoRecorder(folder, fps=30)
    try:
        recorder.start_clip("doctor-clip")
        for t in range(CLIP_FRAMES):
            recorder.add_frame(np.full(CLIP_SHAPE, t * 20, np.uint8), t)
        recorder.end_clip()
    finally:
        recorder.close()
    stats = recorder.stats()
    if stats["clips_finished"] != 1 or stats["clips_broken"] or stats["frames_written"] != CLIP_FRAMES:
        return (f"the encoder finished {stats['clips_finished']} clip(s), {stats['clips_broken']} broken, "
                f"{stats['frames_written']} of {CLIP_FRAMES} frames written")
    if not os.path.getsize(os.path.join(folder, "doctor-clip.mp4")) or not os.path.exists(os.path.join(folder, "doctor-clip.meta.json")):
        return "the clip or its metadata is missing"
    return ""


def recording_result() -> Result:
    """A trace and a clip recorded by real workers into a temporary folder, read back, removed."""
    folder = tempfile.mkdtemp(prefix="envrec-doctor-")
    try:
        try:
            trace = _trace(folder)
            clip = _clip(folder)
        except (EnvrecError, OSError) as exc:
            return Result("recording", CheckStatus.FAIL, f"{type(exc).__name__}: {exc}", WORKER_FIX)
        if trace or clip:
            return Result("recording", CheckStatus.FAIL, "; ".join(w for w in (trace, clip) if w), WORKER_FIX)
        return Result("recording", CheckStatus.PASS, f"an episode of {RECORDING_STEPS} steps through a serializer worker and a "
                      f"{CLIP_FRAMES}-frame clip through an encoder worker, read back")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
