"""``RecordVideo``: Gymnasium's video wrapper, with frames encoded by a worker process."""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from ..errors import ClosedError, ConfigError
from ..formats.ffmpeg import VideoSettings
from ..formats.trace_format import PREFIX, check_prefix
from ..option_checks import BOOL, CALLABLE, FOLDER, POSITIVE_NUMBER, check_options, int_in, optional
from ..options import StreamOptions
from ..supervision.shipper import shipping_name
from ..supervision.stream import warn_start_method
from .call_lock import held_for_close
from .clip_triggers import ClipKeeper, KeepIf, OutcomeTracker, capped_cubic_video_schedule, decide
from .headless import headless_display
from .video_recorder import ClipCallback, VideoRecorder

__all__ = ["RECORD_VIDEO_OPTIONS", "RecordVideo"]

logger = logging.getLogger(__name__)


# What RecordVideo's own options accept; the rest are VideoRecorder's (VIDEO_RECORDER_OPTIONS) and StreamOptions'.
RECORD_VIDEO_OPTIONS = {
    "video_folder": FOLDER,
    "episode_trigger": optional(CALLABLE),
    "step_trigger": optional(CALLABLE),
    "video_length": int_in(0, what="an integer >= 0 (0: the whole episode)"),
    "name_prefix": PREFIX,
    "fps": optional(POSITIVE_NUMBER),
    "disable_logger": BOOL,
    "gc_trigger": optional(CALLABLE),
    "keep_if": optional(CALLABLE),
}


class RecordVideo(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Records clips of ``env``'s rendered frames, as ``gymnasium.wrappers.RecordVideo`` does.

    The same constructor, defaults, triggers and file names as Gymnasium 1.x
    (``video_folder/NAME_PREFIX-episode-N.mp4``, ``...-step-N.mp4``), so
    switching is a one-line import change. The differences: frames are
    encoded by a worker process instead of being held in memory and encoded
    inside ``reset()``; each clip gets a ``.meta.json``; ``ansi``
    environments are recorded as asciicast (``.cast``). ``close()`` ends the
    current clip, waits for the encoder, then closes ``env``.

    Args:
        env: the environment, made with ``render_mode="rgb_array"`` (or
            ``"ansi"``, ``"rgb_array_list"``).
        video_folder: where the clips go, created if needed.
        episode_trigger: ``trigger(episode_id) -> bool``: record this episode.
            Default (when neither trigger is given): Gymnasium's capped cubic
            schedule (episodes 0, 1, 8, 27, ..., then every 1000th).
        step_trigger: ``trigger(step_id) -> bool``: start a clip at this step.
        video_length: frames per clip; default 0: the whole episode.
        name_prefix: the clips' file prefix. Default ``"rl-video"``.
        fps: frames per second of the clips. Default None: the env's
            ``render_fps`` (30 without one). One frame is recorded per step:
            for an env whose step spans several frames (frame skip) pass
            ``fps=render_fps / frameskip`` to play in real time.
        disable_logger: accepted for Gymnasium's signature (no moviepy here).
        gc_trigger: ``trigger(episode_id) -> bool``: ``gc.collect()`` after a
            clip. Default None, unlike Gymnasium: no frames are held, so a
            full collection per clip would only stall the step.
        settings: a ``VideoSettings`` (codec, preset, crf, ...). Default: its defaults.
        ffmpeg: the ffmpeg executable. Default None: ``$ENVREC_FFMPEG``, then
            ``ffmpeg`` (or ``avconv``) on PATH, then ``imageio-ffmpeg``'s.
        max_bytes: a disk budget for this recorder's clips; beyond it the oldest
            whole clips are deleted, never the newest (``clips_evicted``). Default None.
        keep_last_clips: keep at most this many clips (the newest). Default None.
        on_clip_closed: ``callback(video_path, meta)``, called in this process
            from the next ``step()``/``reset()``/``close()`` after the encoder
            finished a clip (its file complete, its ``.meta.json`` written):
            for W&B, TensorBoard, an upload. ``video_path`` is None for a clip
            with no playable file (``meta["broken"]`` says why).
        keep_if: ``keep_if(outcome) -> bool``, asked when a clip ends with the
            ``EpisodeOutcome`` of the episode it ends in; a clip it refuses
            is deleted by the encoder (``clips_discarded``). Default: keep all.
            Presets: ``envrec.keep.best(k)``, ``worst(k)`` (the k best/worst of
            the run: a clip kept earlier is deleted when it drops out, also
            counted in ``clips_discarded``), ``failures()``, ``successes()``.
        options: a ``StreamOptions``; its fields may also come as keyword
            arguments (``**stream_options``), which win.
        start_method: deprecated and ignored (a ``DeprecationWarning``).

    Raises:
        ConfigError: a render mode without frames (None, ``"human"``), a bad
            option (naming it), no ffmpeg found, a folder that cannot be written.
        RecordError: only with ``strict=True``, a frame the clip cannot take
            (not uint8 HxW, HxWx3 or HxWx4, or a shape that changed); without
            it the clip is marked broken, logged once, and the env goes on.
        ClosedError: ``reset()``, ``step()`` or a clip started after ``close()`` (or while another thread
            closes it), as ``RecordTrace``: the env is not stepped once its recorder is closed.
        WorkerError: only with ``strict=True``: the encoder failed.
    """

    def __init__(
        self,
        env: gym.Env,
        video_folder: str,
        episode_trigger: Callable[[int], bool] | None = None,
        step_trigger: Callable[[int], bool] | None = None,
        video_length: int = 0,
        name_prefix: str = "rl-video",
        fps: int | None = None,
        disable_logger: bool = True,
        gc_trigger: Callable[[int], bool] | None = None,
        *,
        settings: VideoSettings | None = None,
        ffmpeg: str | None = None,
        max_bytes: int | None = None,
        keep_last_clips: int | None = None,
        on_clip_closed: ClipCallback | None = None,
        keep_if: KeepIf | None = None,
        options: StreamOptions | None = None,
        start_method: str | None = None,
        **stream_options: Any,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            video_folder=video_folder,
            episode_trigger=episode_trigger,
            step_trigger=step_trigger,
            video_length=video_length,
            name_prefix=name_prefix,
            fps=fps,
            disable_logger=disable_logger,
            gc_trigger=gc_trigger,
        )
        warn_start_method(start_method)
        check_options("RecordVideo", RECORD_VIDEO_OPTIONS, locals())
        headless_display()  # before the env's first render opens pygame's display
        gym.Wrapper.__init__(self, env)
        _check_render_mode(env.render_mode)
        self._set_triggers(episode_trigger, step_trigger, video_length, gc_trigger, keep_if)
        self.disable_logger = disable_logger
        self.video_folder = _video_folder(video_folder)
        if fps is None:
            fps = self.metadata.get("render_fps", 30)
        self.frames_per_sec: int = fps
        self.name_prefix: str = check_prefix(shipping_name(name_prefix, {**stream_options, "options": options}))
        self._video_name: str | None = None
        self.recording: bool = False
        self.recorded_frames = 0  # a count: the frames themselves go to the encoder
        self.render_history: list = []
        self.step_id = -1
        self.episode_id = -1
        self.recorder = VideoRecorder(
            self.video_folder,
            fps=fps,
            settings=settings,
            ffmpeg=ffmpeg,
            env_id=env.spec.id if env.spec is not None else None,
            max_bytes=max_bytes,
            keep_last_clips=keep_last_clips,
            on_clip_closed=on_clip_closed,
            options=options,
            **stream_options,
        )
        self._outcome = OutcomeTracker()
        self._lock = threading.RLock()  # the counters, triggers and clip of one step at a time (envrec.record.call_lock)
        self._closing = False
        self._text = env.render_mode == "ansi"
        self._attach_keeper(keep_if)

    def _set_triggers(self, episode_trigger, step_trigger, video_length: int, gc_trigger, keep_if: KeepIf | None) -> None:
        """Gymnasium's defaults (the capped-cubic episode schedule)."""
        if episode_trigger is None and step_trigger is None:
            episode_trigger = capped_cubic_video_schedule
        self.episode_trigger = episode_trigger
        self.step_trigger = step_trigger
        self.video_length: int | float = video_length if video_length != 0 else float("inf")
        self.gc_trigger = gc_trigger
        self.keep_if = keep_if

    def _attach_keeper(self, keep_if: KeepIf | None) -> None:
        """A ``ClipKeeper`` (``envrec.keep.best``) learns its recorder; one on a second recorder is refused."""
        if isinstance(keep_if, ClipKeeper):
            try:
                keep_if.attach(self.recorder)
            except BaseException:
                self.recorder.close()  # its worker is not left running
                raise

    def _capture_frame(self) -> None:
        assert self.recording, "Cannot capture a frame, recording wasn't started."
        frame = self.env.render()
        if isinstance(frame, list):
            if len(frame) == 0:
                logger.warning("Trying to capture render frame but 'env.render()' has just been called. The frame cannot be captured.")
                return
            self.render_history += frame
            frame = frame[-1]
        self.recorder.add_frame(frame, self.step_id + 1)
        self.recorded_frames += 1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._refuse_if_closed("reset")
        obs, info = super().reset(seed=seed, options=options)
        with self._lock:
            self._refuse_if_closed("reset")  # close() began in another thread while the env was reset
            self._after_reset(info)
        return obs, info

    def _refuse_if_closed(self, call: str) -> None:
        if self._closing:
            raise ClosedError(f"RecordVideo.{call}() after close() (or while another thread closes it): nothing more "
                              "is recorded, and the closed env is not stepped")

    def _after_reset(self, info: dict[str, Any]) -> None:
        self.episode_id += 1
        if self.recording and self.video_length == float("inf"):
            self.stop_recording()  # the previous episode's clip, decided on that episode's outcome
        self._outcome.reset(self.episode_id, info)
        self.recorder.poll()
        if self.episode_trigger and self.episode_trigger(self.episode_id):
            self.start_recording(f"{self.name_prefix}-episode-{self.episode_id}")
        if self.recording:
            self._capture_frame()
            if self.recorded_frames > self.video_length:
                self.stop_recording()

    def step(self, action):
        self._refuse_if_closed("step")
        obs, rew, terminated, truncated, info = self.env.step(action)
        with self._lock:
            self._refuse_if_closed("step")  # close() began in another thread while the env stepped
            self._after_step(rew, terminated, truncated, info)
        return obs, rew, terminated, truncated, info

    def _after_step(self, rew: Any, terminated: bool, truncated: bool, info: dict[str, Any]) -> None:
        self.step_id += 1
        if self.keep_if is not None:
            self._outcome.step(rew, terminated, truncated, info)
        self.recorder.poll()
        if self.step_trigger and self.step_trigger(self.step_id):
            self.start_recording(f"{self.name_prefix}-step-{self.step_id}")
        if self.recording:
            self._capture_frame()
            if self.recorded_frames > self.video_length:
                self.stop_recording()

    def render(self) -> Any:
        render_out: Any = super().render()
        with self._lock:
            if self.recording and isinstance(render_out, list):
                for frame in render_out:
                    self.recorder.add_frame(frame, self.step_id + 1)
                self.recorded_frames += len(render_out)
            if len(self.render_history) > 0:
                tmp_history = self.render_history
                self.render_history = []
                return tmp_history + render_out
        return render_out

    def start_recording(self, video_name: str) -> None:
        """Start a new recording. If it is already recording, stops the current recording before starting the new one."""
        with self._lock:
            if self.recording:
                self.stop_recording()
            self.recorder.start_clip(video_name, episode_id=self.episode_id, text=self._text)
            self.recording = True  # once the clip has begun: a refused one (ClosedError) leaves nothing recording
            self._video_name = video_name

    def stop_recording(self) -> None:
        """Stop the current recording; the encoder finishes the file in the background."""
        with self._lock:
            self._stop_recording()

    def _stop_recording(self) -> None:
        assert self.recording, "stop_recording was called, but no recording was started"
        if self.recorded_frames == 0:
            logger.warning("Ignored saving a video as there were zero frames to save.")
        keep = True
        try:
            keep = decide(self.keep_if, self._outcome.outcome(self._video_name))
        finally:  # a keep_if that raises: its clip still ends (kept), so that close() finishes
            self.recorder.end_clip(keep=keep)
            self.recorded_frames = 0
            self.recording = False
            self._video_name = None
        if self.gc_trigger and self.gc_trigger(self.episode_id):
            gc.collect()

    def stats(self) -> dict[str, Any]:
        return self.recorder.stats()

    def close(self) -> None:
        """Stops the recording, waits for the encoder to finish, then closes the env.

        From another thread: a step in progress is finished first (``envrec.record.call_lock``).
        """
        try:
            with held_for_close(self, self.recorder._stream.ring):
                if self.recording:
                    self.stop_recording()
                self.recorder.close()
        finally:
            super().close()


def _check_render_mode(render_mode: str | None) -> None:
    """Gymnasium's RecordVideo refuses these modes with these words; so does ours (ansi is recorded as text)."""
    if render_mode in {None, "human"}:
        raise ConfigError(
            f"Render mode is {render_mode}, which is incompatible with RecordVideo. "
            "Initialize your environment with a render_mode that returns an image, such as rgb_array "
            "(or text: ansi)."
        )


def _video_folder(video_folder: str) -> str:
    """The absolute folder. Gymnasium warns "Overwriting existing videos" whenever it exists; envrec never
    overwrites a clip (``envrec.record.clip_names``), so it says nothing."""
    return os.path.abspath(video_folder)
