"""The env-side video recorder: copies rendered frames into a ring drained by an encoder worker.

The env process only checks each frame and copies it once into shared
memory; encoding happens in the encoder worker (see ``envrec.workers.encoder``).
A frame the env side cannot accept — not a uint8 array of HxW, HxWx3 or
HxWx4, a shape that changes mid-clip, a text frame that breaks old gym's
rules — ends its clip *broken* (logged once, the reason in the clip's
``.meta.json``); later frames of that clip are dropped and counted. With
``strict=True`` such a frame raises ``RecordError`` instead.

If the encoder worker dies, the env goes on; the clip it was writing gets a
``.meta.json`` marked broken with the exit status, and the next clip starts a
fresh worker (at most ``max_restarts`` times).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np

from ..contract.faults import NO_FAULT, FaultSpec, from_env
from ..contract.protocol import EncoderConfig, Kind, Status
from ..errors import ClosedError, ConfigError, RecordError, RecordTooLargeError
from ..formats.atomic import remove_stale_tmp
from ..formats.clip_meta import CLIP_FILE_SUFFIXES, ClipMeta, is_clip_file, meta_path, read_clip_meta
from ..formats.ffmpeg import VideoSettings, find_ffmpeg
from ..formats.ownfolder import OwnFolder
from ..formats.ship_ledger import ledger_name
from ..formats.shipped import clip_recorder_id
from ..formats.store import store_url
from ..formats.trace_format import check_prefix
from ..option_checks import BOOL, CALLABLE, FOLDER, POSITIVE_INT, POSITIVE_NUMBER, STR, Accepts, check_options, optional
from ..options import StreamOptions
from ..supervision.closers import register_closer, unregister_closer
from ..supervision.restarts import RestartPolicy
from ..supervision.shipper import ShipTargets, shipper_for
from ..supervision.stats import CallTimes, process_facts, summary_line
from ..supervision.stream import RawRecord, RingRecord, Stream, warn_start_method
from .call_lock import close_once
from .clip_names import claim_clip_name, warn_if_replacing_a_stranger
from .clip_state import ClipState, delete_clip_files, mark_discarded, renamed_method, write_broken_meta
from .frame_checks import check_image_frame, check_text_frame
from .packer import FrameRecord, frame_packer
from .recorder import check_folder

__all__ = ["DEFAULT_FRAME_RING_BYTES", "VIDEO_RECORDER_OPTIONS", "ClipCallback", "PendingClips", "VideoRecorder",
           "check_text_frame", "drain_clip_callback"]

CALLBACK_DRAIN_S = 30.0  # how long close() waits for on_clip_closed's own thread to finish the last clips

ClipCallback = Callable[[str | None, ClipMeta], None]  # (the video's path, None without one; its metadata)


@runtime_checkable
class PendingClips(Protocol):
    """A clip callback that works in a thread of its own (``envrec.log``'s loggers): ``pending`` counts the clips it
    was given and has not finished with."""

    pending: int


def drain_clip_callback(callback: ClipCallback, timeout_s: float | None = None) -> int:
    """Wait (at most ``timeout_s``, default ``CALLBACK_DRAIN_S``) until a callback with a ``pending`` count
    (``PendingClips``) has finished the clips it was given; the count left, warned when not 0 (0 at once for a
    callback that works in the caller's thread).

    Args:
        callback: an ``on_clip_closed`` callback.
        timeout_s: the most to wait, in seconds.
    """
    if not isinstance(callback, PendingClips) or not isinstance(callback.pending, int):
        return 0
    limit_s = CALLBACK_DRAIN_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + limit_s
    while callback.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    left = int(callback.pending)
    if left:
        logger.warning("envrec: %d clip(s) still being handled by on_clip_closed %r after %g s: close() goes on "
                       "(callbacks_pending)", left, callback, limit_s)
    return left

logger = logging.getLogger(__name__)

_UINT8 = np.dtype(np.uint8)
DEFAULT_FRAME_RING_BYTES = 128 << 20  # ~48 frames of 720p, ~186 of 600x400: slack while ffmpeg catches up
FRAME_PACE_S = 0.016  # past half full, a frame waits for ffmpeg's next frame at most this long (RingWriter.set_pacing)


# What VideoRecorder's own options accept (the stream's are StreamOptions', the encoder's VideoSettings').
VIDEO_RECORDER_OPTIONS = {
    "folder": FOLDER,
    "fps": POSITIVE_NUMBER,
    "settings": optional(Accepts("a VideoSettings", lambda v: isinstance(v, VideoSettings))),
    "ffmpeg": optional(STR),
    "env_id": optional(STR),
    "max_bytes": optional(POSITIVE_INT),
    "keep_last_clips": optional(POSITIVE_INT),
    "on_clip_closed": optional(CALLABLE),
    "replace_clips": BOOL,
}


class VideoRecorder:
    """Encodes clips of rendered frames in a worker process; one clip at a time.

    ``start_clip(name)`` / ``add_frame(frame, step)`` / ``end_clip()``; a clip
    named NAME becomes ``NAME.mp4`` (``NAME.cast`` for text) and
    ``NAME.meta.json`` in ``folder``. The recorder under ``RecordVideo``;
    use it as a context manager or call ``close()``. Several threads may call
    it: each frame is whole (``envrec.record.call_lock``). A failed encoder is
    replaced by a fresh one before the next clip, at most ``max_restarts``
    times; the clips it did not finish get a ``.meta.json`` saying why.

    Args:
        folder: where the clips go, created if needed.
        fps: frames per second of the clips, a positive number. Default 30.
        settings: a ``VideoSettings``. Default: its defaults.
        ffmpeg: the ffmpeg executable. Default None: found as ``RecordVideo`` says.
        env_id: the env's id, written into each clip's metadata. Default None.
        max_bytes: a disk budget for this recorder's clips: the worker deletes
            the oldest whole clips beyond it, never the newest
            (``clips_evicted``). Default None: no budget.
        keep_last_clips: keep at most this many clips (the newest). Default None.
        on_clip_closed: ``callback(video_path, meta)`` per finished clip, as
            for ``RecordVideo``. Default None.
        replace_clips: write a clip over one of the same name (``envrec render`` re-rendering an episode).
            Default False: a taken name gets ``-2``, ``-3``... (``envrec.record.clip_names``).
        options: a ``StreamOptions``; its fields may also come as keyword
            arguments (``**stream_options``), which win. ``hang_timeout_s``
            must exceed ``settings.stall_timeout_s``.
        faults: a fault to inject into the encoder (tests). Default None:
            ``$ENVREC_FAULTS``, or none.
        start_method: deprecated and ignored (a ``DeprecationWarning``).

    Raises:
        ConfigError: a bad option (naming it), no ffmpeg found, a folder that
            cannot be written, ``hang_timeout_s`` not above the stall timeout,
            a clip name that could leave the folder (``start_clip``).
        RecordError: only with ``strict=True``, a frame the clip cannot take;
            without it the clip is marked broken and later frames dropped.
        ClosedError: ``start_clip`` after ``close()``.
        WorkerError: only with ``strict=True``: the encoder failed.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        fps: float = 30,
        settings: VideoSettings | None = None,
        ffmpeg: str | None = None,
        env_id: str | None = None,
        max_bytes: int | None = None,
        keep_last_clips: int | None = None,
        on_clip_closed: ClipCallback | None = None,
        replace_clips: bool = False,
        options: StreamOptions | None = None,
        faults: FaultSpec | None = None,
        start_method: str | None = None,
        **stream_options: Any,
    ) -> None:
        warn_start_method(start_method)
        check_options("VideoRecorder", VIDEO_RECORDER_OPTIONS, locals())
        self.on_clip_closed = on_clip_closed
        self.replace_clips = replace_clips
        opts = StreamOptions.merge(options, stream_options)
        hang_timeout_s = opts.hang_timeout_s
        self.folder = check_folder(folder)
        remove_stale_tmp(self.folder, finals=CLIP_FILE_SUFFIXES)  # what a killed encoder of an earlier run left
        self.fps = fps
        self.settings = settings or VideoSettings()
        self.ffmpeg, self.backend = find_ffmpeg(ffmpeg)
        self.strict = opts.strict
        self.max_restarts = opts.max_restarts
        if hang_timeout_s is not None and hang_timeout_s <= self.settings.stall_timeout_s:
            raise ConfigError(
                f"hang_timeout_s ({hang_timeout_s:g}) must exceed VideoSettings.stall_timeout_s "
                f"({self.settings.stall_timeout_s:g}): the encoder may wait that long for ffmpeg"
            )
        self.recorder_id = f"{os.getpid()}-{time.time_ns()}-{id(self):x}"
        # Every clip file written, moved or removed relative to the folder opened now (see envrec.formats.ownfolder)
        self._own = OwnFolder(self.folder, is_clip_file)
        remote = clip_recorder_id(self.recorder_id)
        cfg = EncoderConfig(
            self.folder, self.ffmpeg, self.backend, self.settings, env_id, faults or from_env() or NO_FAULT,
            recorder=self.recorder_id, max_bytes=max_bytes, keep_last_clips=keep_last_clips, folder_id=self._own.identity,
            ship_ledger=ledger_name(remote, store_url(opts.ship_to)) if opts.ship_to is not None else None,
        )
        self._start(cfg, opts, remote)
        self.times = CallTimes() if opts.timing else None
        self._first_frame_at: float | None = None
        self.clip: ClipState | None = None
        self.clips_started = 0
        self.frames_sent = 0
        self.frames_dropped = 0
        self._warned_broken = False
        self._unreported: deque[ClipState] = deque()  # clips sent, not yet known finished
        self._clips_seen = 0
        self.clips_unkept = 0  # clips kept when they ended, deleted since by discard_clip
        self.callbacks_pending = 0  # clips on_clip_closed had not finished with when close() stopped waiting
        self._lock = threading.RLock()  # one call at a time, each frame whole (envrec.record.call_lock)
        self._closing = False
        register_closer(self)

    def _start(self, cfg: EncoderConfig, opts: StreamOptions, remote: str) -> None:
        """The encoder's stream and, with ``ship_to``, the shipper; nothing left running when either fails."""
        self._shipper = None
        try:
            self._shipper = shipper_for(opts, self.folder, self._own.identity,
                                        ShipTargets(prefixes=(), clip_recorders=(self.recorder_id,), clip_remote=remote))
            self._stream = Stream(
                "encoder",
                cfg,
                opts,
                ring_bytes=opts.ring_or(DEFAULT_FRAME_RING_BYTES),
                restart=RestartPolicy.fresh_per_clip(dataclasses.replace(cfg, faults=NO_FAULT)),  # a fault fires once
                pace_s=FRAME_PACE_S,
            )
            if self._shipper is not None:
                self._shipper.wait_ready()
        except BaseException:
            if getattr(self, "_stream", None) is not None:
                self._stream.close()
            self._own.close()
            raise

    @property
    def closed(self) -> bool:
        return self._stream.closed

    @property
    def folder_id(self) -> tuple[int, int]:
        """``(st_dev, st_ino)`` of the clips' folder as this recorder opened it: every clip file goes there."""
        return self._own.identity

    @property
    def backlog_bytes(self) -> int:
        """Bytes of records sent that the encoder has not taken yet: 0 when it has caught up."""
        return self._stream.backlog_bytes

    @property
    def recording(self) -> bool:
        return self.clip is not None

    # -- clips -----------------------------------------------------------------
    def start_clip(self, name: str, *, episode_id: int | None = None, text: bool = False, **extra: Any) -> None:
        """Begin clip ``name`` (ends the current one). ``text=True`` for ansi frames."""
        with self._lock:
            self._start_clip(name, episode_id, text, extra)

    def _start_clip(self, name: str, episode_id: int | None, text: bool, extra: dict[str, Any]) -> None:
        self._check_open()
        check_prefix(name)
        if self.clip is not None:
            self.end_clip()
        if not self.replace_clips:
            name = claim_clip_name(self._own, name, ".cast" if text else ".mp4")
        else:
            warn_if_replacing_a_stranger(self._own, name, ".cast" if text else ".mp4")
        self._recover()
        self.poll()
        self.clip = ClipState(name, "ansi" if text else "video", episode_id, self.fps)
        self.clip.blocked_at_start = self._stream.blocked_s
        if self.times is not None:
            self.clip.calls_at_start = (self.times.count, self.times.total_ns)
        self.clips_started += 1
        self._unreported.append(self.clip)
        desc = {"name": name, "kind": self.clip.kind, "fps": self.fps, "episode_id": episode_id, **extra}
        self._send(Kind.CLIP_START, 0, 0, (json.dumps(desc).encode("utf-8"),))

    def add_frame(self, frame: Any, step: int = 0) -> None:
        """Add one rendered frame to the current clip (ignored when no clip is recording)."""
        t0 = perf_counter_ns()
        with self._lock:
            clip = self.clip
            if clip is None:
                return
            packer, shape, stream = clip.packer, clip.shape, self._stream
            if (
                packer is not None
                and shape is not None  # set with the packer
                and type(frame) is np.ndarray
                and frame.shape == clip.raw_shape
                and frame.dtype == _UINT8
                and stream.broken is None
                and not stream.closed
                and not self._closing
            ):  # a frame like the clip's first: its checks were done then
                if stream.send(FrameRecord(packer, clip.episode_id or 0, step, frame, shape)):
                    clip.frames += 1
                    self.frames_sent += 1
                else:
                    clip.dropped += 1
                    self.frames_dropped += 1
            else:
                self._add_frame(frame, step)
        if self.times is not None:
            self.times.add(perf_counter_ns() - t0)

    def _add_frame(self, frame: Any, step: int) -> None:
        clip = self.clip
        assert clip is not None  # add_frame checked
        self._check_open()
        if clip.broken is not None:
            self._drop()
            return
        if clip.kind == "ansi":
            problem = check_text_frame(frame)
            if problem:
                return self._refuse(problem)
            text = (frame.encode("utf-8"),)
            record: RingRecord = RawRecord(Kind.TEXT_FRAME, clip.episode_id or 0, step, text)
        else:
            problem = check_image_frame(frame)
            if problem:
                return self._refuse(problem)
            shape = frame.shape if frame.ndim == 3 else (*frame.shape, 1)
            if clip.shape is None:
                clip.shape = shape
            elif shape != clip.shape:
                return self._refuse(f"frame {clip.frames} has shape {shape}, the clip started with {clip.shape}")
            if clip.packer is None:  # from now on frames like this one skip the checks (add_frame)
                clip.packer, clip.raw_shape = frame_packer(shape), frame.shape
            record = FrameRecord(clip.packer, clip.episode_id or 0, step, frame, shape)
        try:
            ok = self._stream.send(record)
        except RecordTooLargeError as exc:
            return self._refuse(str(exc))
        if ok:
            clip.frames += 1
            self.frames_sent += 1
            if self._first_frame_at is None:
                self._first_frame_at = time.monotonic()
        else:
            clip.dropped += 1
            self.frames_dropped += 1

    def end_clip(self, keep: bool = True, extra: dict[str, Any] | None = None) -> None:
        """Finish the current clip: the worker closes its file and writes its metadata.

        ``keep=False`` discards it: the worker deletes what it encoded and
        counts it in ``clips_discarded``; no callback is called for it.
        ``extra``: more keys for its ``.meta.json``, known only at its end
        (JSON values; ``envrec render`` writes its replay verdict so).
        """
        with self._lock:
            self._end_clip(keep, extra)

    def _end_clip(self, keep: bool, extra: dict[str, Any] | None) -> None:
        clip, self.clip = self.clip, None
        if clip is None:
            return
        clip.keep = keep
        self._send(Kind.CLIP_END, 0, 0, (self._clip_end_part(clip, extra),))
        self._stream.check()
        if self._stream.broken is not None:
            self._write_unfinished_meta(self._stream.broken)

    def _clip_end_part(self, clip: ClipState, extra: dict[str, Any] | None = None) -> bytes:
        """What the env side knows of a clip, for its ``.meta.json``."""
        env = {"frames_dropped_env_side": clip.dropped, "blocked_s": self._stream.blocked_s - clip.blocked_at_start}
        if self.times is not None:
            calls = self.times.count - clip.calls_at_start[0]
            total = self.times.total_ns - clip.calls_at_start[1]
            env.update(calls=calls, call_mean_us=total / calls / 1e3 if calls else 0.0, call_total_s=total / 1e9)
            env.update(run_call_p99_us=self.times.percentile(99), run_call_max_us=self.times.max_ns / 1e3)
        doc = {"frames_sent": clip.frames, "frames_dropped": clip.dropped, "env_process": env, "keep": clip.keep,
               "extra": extra or {}}
        return json.dumps(doc).encode("utf-8")

    def poll(self) -> None:
        """Report clips the worker finished since the last look: ``on_clip_closed``, and a warning for broken ones.

        One shared-memory read when nothing finished; ``RecordVideo`` calls it
        from every ``step()`` and ``reset()``, and ``close()`` does after the
        worker has finished everything.
        """
        if not self._unreported:
            return  # nothing pending: no shared-memory read at all
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        # Once the worker is gone every clip sent is final (its metadata written by one side or the other).
        finished = self._clips_seen + len(self._unreported) if self._stream.closed else self._stream.status(Status.CLIPS)
        while self._clips_seen < finished and self._unreported:
            clip = self._unreported.popleft()
            self._clips_seen += 1
            self._drop_discarded(clip)
            if not clip.keep or clip.discarded:
                continue  # discarded by the worker, or discarded by a keeper since: nothing on disk to report
            try:
                m = read_clip_meta(meta_path(self.folder, clip.name))
            except (OSError, ValueError):
                continue  # evicted by a budget before we looked, or never written (a dead encoder)
            if m.get("broken") and clip.broken is None:  # the env side said so itself when it broke it
                logger.warning("envrec: clip %s is broken: %s", clip.name, m.get("reason"))
            if self.on_clip_closed is not None:
                video = m.get("path")
                self.on_clip_closed(os.path.join(self.folder, video) if video else None, m)

    def discard_clip(self, name: str) -> None:
        """Delete clip ``name`` (kept when it ended) once the encoder finished it, counted in ``clips_discarded``:
        ``envrec.keep.best``'s clip that dropped out. Deleted at once if ``poll`` reported it (its callback was
        called), else when it does (no callback). Only its files (``delete_clip_files``).

        Args:
            name: the clip's name, as given to ``start_clip``.
        """
        with self._lock:
            if not mark_discarded(self._unreported, name):  # reported finished already: its files go now
                self.clips_unkept += delete_clip_files(self._own, name, self.recorder_id)

    evict_clip = renamed_method("discard_clip", "VideoRecorder.evict_clip")  # the old name, for one release

    def _drop_discarded(self, *clips: ClipState) -> None:
        """Delete the files of those of ``clips`` that ``envrec.keep`` discarded, counting each clip deleted."""
        for clip in clips:
            if clip.discarded and delete_clip_files(self._own, clip.name, self.recorder_id):
                self.clips_unkept += 1

    def _refuse(self, problem: str) -> None:
        clip = self.clip
        assert clip is not None
        if self.strict:
            raise RecordError(f"clip {clip.name}: {problem}")
        clip.broken, clip.packer = problem, None
        logger.warning("envrec: clip %s is broken: %s", clip.name, problem)
        self._send(Kind.CLIP_BROKEN, 0, 0, (problem.encode("utf-8"),))
        self._drop()

    def _drop(self) -> None:
        assert self.clip is not None
        self.clip.dropped += 1
        self.frames_dropped += 1

    def _check_open(self) -> None:
        if self._closing and not self._stream.closed:
            raise ClosedError("this recorder is being closed (close() was called in another thread): nothing more is recorded")
        self._stream.check_open()

    def _send(self, kind: int, episode: int, step: int, sections: tuple) -> bool:
        return self._stream.send(RawRecord(kind, episode, step, sections))

    def _recover(self) -> None:
        """Before a new clip: a broken encoder worker is replaced by a fresh one, while restarts remain."""
        self._stream.check()
        if self._stream.broken is None:
            return
        reason = self._stream.broken
        if self._stream.restart():  # the failed worker is gone after this: what it did not finish stays unfinished
            self._write_unfinished_meta(reason)
            self._drop_discarded(*self._unreported)  # final now: the failed worker is gone
            self._unreported.clear()
            self._clips_seen = self._stream.status(Status.CLIPS)
        elif not self._warned_broken:
            self._warned_broken = True
            logger.error("envrec: the encoder failed %d times; no more clips will be recorded", self.max_restarts + 1)

    def _write_unfinished_meta(self, reason: str | None) -> None:
        """Metadata for every clip sent to a failed worker that it did not finish (the one it failed on
        and those queued behind it): a clip whose ``.meta.json`` the worker never wrote gets one saying why."""
        for clip in self._unreported:
            if not os.path.exists(meta_path(self.folder, clip.name)):
                write_broken_meta(self._own, clip, reason)

    # -- counters and ending -----------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters of this recorder; every key is in docs/reference.md ("Stats")."""
        s = self._stream
        written = s.status(Status.FRAMES_WRITTEN)
        out = {
            "clips_started": self.clips_started,
            "clips_finished": s.status(Status.CLIPS),
            "clips_broken": s.status(Status.CLIPS_BROKEN),
            "frames_sent": self.frames_sent,
            "frames_written": written,
            "frames_dropped": self.frames_dropped + s.status(Status.FRAMES_DROPPED),
            "clips_evicted": s.status(Status.EVICTED),
            "bytes_evicted": s.status(Status.BYTES_EVICTED),
            "clips_discarded": s.status(Status.CLIPS_DISCARDED) + self.clips_unkept,
            "callbacks_pending": self.callbacks_pending,
            **s.stats(),
            **(self.times.summary() if self.times is not None else {}),
            "ffmpeg": self.ffmpeg,
        }
        if self._first_frame_at is not None:
            out["encoder_fps"] = written / max(time.monotonic() - self._first_frame_at, 1e-9)
        if self._shipper is not None:
            out |= self._shipper.stats()
        if not s.closed:
            ffmpeg = process_facts(s.status(Status.ENCODER_PID))
            if ffmpeg:
                out["ffmpeg_cpu_s"], out["ffmpeg_rss_bytes"] = ffmpeg["cpu_s"], ffmpeg["rss_bytes"]
        return out

    def close(self) -> dict | None:
        """End the current clip, stop the worker, free the ring. Harmless when repeated, and in a forked child.

        From another thread: a call in progress is finished first, later ones raise ``ClosedError``
        (``envrec.record.call_lock``).
        """
        return close_once(self, self._stream, self._close)

    def _close(self) -> dict | None:
        unregister_closer(self)
        clip, self.clip = self.clip, None
        if clip is not None:
            self._send(Kind.CLIP_END, 0, 0, (self._clip_end_part(clip),))
        summary = self._stream.close(final_stats=self.stats())
        if self._stream.broken is not None:
            self._write_unfinished_meta(self._stream.broken)  # the worker is gone: what it left is unfinished
        self.poll()
        self._drain_callback()
        self._own.close()
        if self._shipper is not None:
            self._shipper.finish()  # every clip's metadata is written now: shipped within the deadline
        logger.info("envrec: %d clip(s) in %s: %s", self.clips_started, self.folder, summary_line(self.stats()))
        return summary

    def _drain_callback(self) -> None:
        """Wait for the clips ``on_clip_closed`` still works on in a thread of its own (``drain_clip_callback``), so
        that closing the env and then the logger's writer loses none; what is left is ``callbacks_pending``."""
        if self.on_clip_closed is not None:
            self.callbacks_pending = drain_clip_callback(self.on_clip_closed)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
