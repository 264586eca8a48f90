"""``VecRecordVideo``: SB3's ``VecVideoRecorder``, with the tiled frames encoded by envrec's encoder worker.

The schedule and the file names are SB3's (``VecVideoRecorder`` of
stable-baselines3 2.x): a step counter that starts at 0 and counts vector
steps; ``record_video_trigger(step)`` is asked at ``reset()`` and after each
step while no clip records; a clip starts with the frame of the step that
triggered it, holds ``video_length + 1`` frames and is named
``NAME_PREFIX-step-START-to-step-START+VIDEO_LENGTH.mp4``. Each frame is
``venv.render()``, the sub-envs' frames tiled as SB3 tiles them. The
difference: the frames go to an encoder worker as they come instead of
being held in memory and encoded by moviepy in the loop, so the step that
ends a clip does not stall, and each clip gets a ``.meta.json``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from ..errors import ConfigError
from ..formats.trace_format import PREFIX, check_prefix
from ..option_checks import CALLABLE, FOLDER, POSITIVE_NUMBER, check_options, int_in, optional
from ..record.clip_triggers import ClipKeeper, EpisodeOutcome, KeepIf, decide
from ..record.headless import headless_display
from ..record.video_recorder import ClipCallback, VideoRecorder
from ..supervision.shipper import shipping_name
from .adapter import check_vec_env, sub_env_attr

__all__ = ["VEC_RECORD_VIDEO_OPTIONS", "ClipTally", "VecRecordVideo"]

logger = logging.getLogger(__name__)

# What VecRecordVideo's own options accept; the rest are VideoRecorder's (VIDEO_RECORDER_OPTIONS) and StreamOptions'.
VEC_RECORD_VIDEO_OPTIONS = {
    "video_folder": FOLDER,
    "record_video_trigger": CALLABLE,
    "video_length": int_in(0, what="an integer >= 0 (a clip holds video_length + 1 frames, as SB3's)"),
    "name_prefix": PREFIX,
    "fps": optional(POSITIVE_NUMBER),
    "keep_if": optional(CALLABLE),
}


class ClipTally:
    """What happened in the sub-envs while a clip recorded: the ``EpisodeOutcome`` ``keep_if`` is given.

    ``episode_return`` is the sub-envs' mean return over the clip's steps,
    ``length`` its vector steps, ``terminated`` / ``truncated`` whether any
    sub-env's episode ended so within it, ``info`` has ``sub_env_returns``
    (one per sub-env) and ``episodes_ended``.

    Args:
        num_envs: how many sub-envs the VecEnv has.
    """

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs)
        self.steps = self.ended = 0
        self.terminated = self.truncated = False

    def step(self, rewards: np.ndarray, dones: np.ndarray, infos: list[dict]) -> None:
        self.returns += np.asarray(rewards, np.float64).reshape(self.returns.shape)
        self.steps += 1
        for i in np.flatnonzero(dones):
            self.ended += 1
            if infos[i].get("TimeLimit.truncated"):
                self.truncated = True
            else:
                self.terminated = True

    def outcome(self, clip_id: int, clip: str | None = None) -> EpisodeOutcome:
        info = {"sub_env_returns": self.returns.tolist(), "episodes_ended": self.ended}
        return EpisodeOutcome(clip_id, float(self.returns.mean()), self.steps, self.terminated, self.truncated, info, clip)


class VecRecordVideo(VecEnvWrapper):
    """Records clips of an SB3 VecEnv's tiled frames, as ``VecVideoRecorder`` does, encoded in a worker process.

    The same arguments, defaults, schedule and file names as SB3's
    ``VecVideoRecorder`` (``video_folder/NAME_PREFIX-step-S-to-step-E.mp4``),
    so switching is a one-line import change; moviepy is not needed.
    ``close()`` ends the current clip, waits for the encoder, then closes ``venv``.

    Args:
        venv: the VecEnv, its sub-envs made with ``render_mode="rgb_array"``.
        video_folder: where the clips go, created if needed.
        record_video_trigger: ``trigger(step) -> bool``: start a clip at this
            vector step (0 at the first ``reset()``).
        video_length: a clip holds this many frames after its first. Default 200.
        name_prefix: the clips' file prefix. Default ``"rl-video"``.
        fps: frames per second. Default None: sub-env 0's ``render_fps`` (30 without one).
        on_clip_closed: ``callback(video_path, meta)``, called in this process
            from the next ``step_wait()``/``reset()``/``close()`` after the
            encoder finished a clip, as for ``envrec.RecordVideo``. Default None.
        keep_if: ``keep_if(outcome) -> bool``, asked when a clip ends with its
            ``ClipTally`` outcome; a clip it refuses is deleted by the encoder
            (``clips_discarded``). Presets: ``envrec.keep.best(k)``, ``worst(k)``
            (the k clips of the run with the highest/lowest mean return; one
            preset per recorder), ``failures()``, ``successes()``. Default: keep all.
        recorder_options: ``VideoRecorder``'s other keyword arguments
            (``settings``, ``ffmpeg``, ``max_bytes``, ``keep_last_clips``,
            ``options`` and ``StreamOptions`` fields).

    Raises:
        ConfigError: ``venv`` is not an SB3 VecEnv or does not render
            ``rgb_array`` frames, a bad option (naming it), no ffmpeg found,
            a folder that cannot be written.
        RecordError: only with ``strict=True``, a frame the clip cannot take.
        WorkerError: only with ``strict=True``: the encoder failed.
    """

    def __init__(
        self,
        venv: VecEnv,
        video_folder: str | os.PathLike,
        record_video_trigger: Callable[[int], bool],
        video_length: int = 200,
        name_prefix: str = "rl-video",
        *,
        fps: float | None = None,
        on_clip_closed: ClipCallback | None = None,
        keep_if: KeepIf | None = None,
        **recorder_options: Any,
    ) -> None:
        check_vec_env("VecRecordVideo", venv)
        check_options("VecRecordVideo", VEC_RECORD_VIDEO_OPTIONS, locals())
        if venv.render_mode != "rgb_array":
            raise ConfigError(f"VecRecordVideo: the render_mode must be 'rgb_array', not {venv.render_mode!r}: "
                              "make each sub-env with render_mode='rgb_array'")
        VecEnvWrapper.__init__(self, venv)
        headless_display()  # before the sub-envs' first render opens pygame's display (in this process)
        metadata = sub_env_attr(venv, "metadata", None) or {}
        self.frames_per_sec: float = fps or metadata.get("render_fps", 30)
        self.record_video_trigger = record_video_trigger
        self.video_folder = os.path.abspath(video_folder)
        self.name_prefix = check_prefix(shipping_name(name_prefix, recorder_options))
        self.video_length = video_length
        self.keep_if = keep_if
        self.step_id = 0
        self.recording = False
        self.recorded_frames = 0  # a count: the frames themselves go to the encoder
        self.video_name: str | None = None
        self.video_path: str | None = None
        self.clips = 0
        self._tally = ClipTally(self.num_envs)
        spec = sub_env_attr(venv, "spec")
        self.recorder = VideoRecorder(
            self.video_folder, fps=self.frames_per_sec, env_id=getattr(spec, "id", None), on_clip_closed=on_clip_closed,
            **recorder_options,
        )
        if isinstance(keep_if, ClipKeeper):  # envrec.keep.best(k): it discards the clips it stops keeping
            try:
                keep_if.attach(self.recorder)
            except BaseException:
                self.recorder.close()  # its worker is not left running
                raise

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        self.recorder.poll()
        if self.record_video_trigger(self.step_id):
            self._start_video_recorder()
        return obs

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.step_id += 1
        self.recorder.poll()
        if self.recording:
            self._tally.step(rewards, dones, infos)
            self._capture_frame()
            if self.recorded_frames > self.video_length:
                self._stop_recording()
        elif self.record_video_trigger(self.step_id):
            self._start_video_recorder()
        return obs, rewards, dones, infos

    def _start_video_recorder(self) -> None:
        """SB3's: a clip named by its first step and that step plus ``video_length``; its first frame now."""
        if self.recording:
            self._stop_recording()
        name = f"{self.name_prefix}-step-{self.step_id}-to-step-{self.step_id + self.video_length}"
        self.video_name = name + ".mp4"
        self.video_path = os.path.join(self.video_folder, self.video_name)
        self.recorder.start_clip(name, start_step=self.step_id, num_envs=self.num_envs)
        self.recording = True
        self._tally = ClipTally(self.num_envs)
        self._capture_frame()

    def _capture_frame(self) -> None:
        frame = self.venv.render()
        if not isinstance(frame, np.ndarray):
            logger.warning("envrec: recording stopped: render() returned %s, not a numpy array", type(frame).__name__)
            self._stop_recording()
            return
        self.recorder.add_frame(frame, self.step_id)
        self.recorded_frames += 1

    def _stop_recording(self) -> None:
        """End the clip: the encoder finishes the file in the background (or deletes it, if ``keep_if`` says so)."""
        if self.recorded_frames == 0:
            logger.warning("envrec: ignored saving a video as there were zero frames to save")
        keep = True
        try:
            name = self.video_name[:-4] if self.video_name else None
            keep = decide(self.keep_if, self._tally.outcome(self.clips, name))
        finally:  # a keep_if that raises: its clip still ends (kept), so that close() finishes
            self.recorder.end_clip(keep=keep)
            self.clips += 1
            self.recording = False
            self.recorded_frames = 0

    def stats(self) -> dict[str, Any]:
        """The encoder's counters (every key: docs/reference.md, "Stats")."""
        return self.recorder.stats()

    def close(self) -> None:
        """End the current clip, wait for the encoder to finish it, then close ``venv``."""
        try:
            if self.recording:
                self._stop_recording()
            self.recorder.close()
        finally:
            self.venv.close()
