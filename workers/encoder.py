"""The encoder: turns the records of a frame ring into video clips (or asciicasts) with metadata.

Per clip: at the clip's first frame (its size is known then) ffmpeg is taken
(one started ahead for a clip of the same command, see ``ffmpeg_output``) or
started, and the next one is started ahead;
each frame goes to ffmpeg's stdin straight from the ring (``FrameFeed``),
those already waiting in the ring taken as one run; at the clip's
end ffmpeg finishes, the fragmented MP4 is remuxed into a standard one (unless
``VideoSettings.faststart`` is False: in this process, ``formats.mp4_faststart``,
or by ffmpeg for a video that module does not rewrite), and
``NAME.meta.json`` is written beside it. Finishing and remuxing run in a
thread while the next clip's frames go on to its own ffmpeg (``_Ending``):
a full ring would otherwise make the env wait that long at each clip's end. Every file is still committed in this thread, in the
order the clips ended: the remuxed video (fsync, rename), then the metadata,
counts and disk budget. A clip whose ffmpeg dies, hangs or
refuses its input, or whose frames change shape, is *broken*: what ffmpeg
wrote is kept (a fragmented MP4 decodes up to its last complete fragment),
later frames of that clip are dropped and counted, and the metadata says why.
The next clip starts a fresh ffmpeg. A clip with no frame leaves no video
file, only metadata marked ``empty`` (as old gym's recorder did).

Text frames (``render_mode="ansi"``) are written as asciicast v2 (``.cast``).

Every file is written, moved and removed relative to the clips' folder opened
once (``OwnFolder``; ffmpeg writes into the video this worker opened, through
one of its descriptors), and only a
clip's own names: a folder swapped for a symlink after the recorder opened it
is never written into, and a symlink, FIFO or folder planted at a clip's
video name breaks that clip (nothing is written through it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from envrec.contract.children import run_own_group
from envrec.contract.procinfo import process_facts, signal_name
from envrec.contract.protocol import EncoderConfig, Handler, Kind, ReleasePolicy, Status, StatusSink
from envrec.contract.records import FRAME_SHAPE, RecordLayout, frame_layout
from envrec.contract.ring import REC_STEP_AT
from envrec.contract.ring_reader import RUN, RecordRun
from envrec.errors import RecordError
from envrec.formats.clip_meta import META_SUFFIX, ClipMeta, is_clip_file
from envrec.formats.ffmpeg import encode_command, encoded_size, remux_command
from envrec.formats.mp4_faststart import Mp4Unsupported, faststart
from envrec.formats.ownfolder import OwnFolder

from .asciicast import CastWriter
from .clip_budget import ClipBudget
from .ffmpeg_nice import NiceChoice, nice_of
from .ffmpeg_output import OutputSlot
from .ffmpeg_process import FfmpegProcess
from .frame_feed import FrameFeed
from .meta_commit import commit_clip_meta

__all__ = ["Encoder"]

logger = logging.getLogger(__name__)

REMUX_TIMEOUT_S = 60.0  # ffmpeg moving a finished clip's index to the front (faststart): a copy of the file
# A broken clip's ffmpeg (bad frame, shape changed): how long it may take to write out what it has, playable up
# to its last fragment; shorter than FINISH_TIMEOUT_S, since the env goes on and what it has not written is lost anyway.
BROKEN_FINISH_GRACE_S = 5.0
ENDING_POLL_S = 0.01  # an idle worker looks this often whether a clip finished encoding
VERSION_TIMEOUT_S = 10.0  # ``ffmpeg -version``, asked once per worker for the clips' metadata


@dataclass
class _Clip:
    name: str
    kind: str  # "video" or "ansi"
    fps: float
    episode_id: int | None
    first_step: int | None = None
    last_step: int | None = None
    frames: int = 0
    dropped: int = 0
    shape: tuple | None = None
    proc: FfmpegProcess | None = None
    cmdline: list | None = None
    broken: str | None = None
    exit_status: str | None = None
    stderr_tail: list = field(default_factory=list)
    cast: CastWriter | None = None  # an ansi clip's
    started_at: float | None = None  # monotonic time of the first frame
    extra: dict = field(default_factory=dict)
    layout: RecordLayout | None = None  # of its frames in the ring, once its shape is known
    template: np.ndarray | None = None  # the header of those frames
    shape_row: np.ndarray | None = None  # its FRAME_SHAPE section as bytes


@dataclass
class _Ending:
    """A clip that ended, in the order clips ended: its ffmpeg finishing (and the remux) in the ending
    thread until ``encoded`` is done; its metadata is written once it is."""

    clip: _Clip
    path: str
    env_side: dict
    encoded: Future | None = None  # None: nothing to wait for (no ffmpeg ran, or it was already gone)
    hold: int | None = None  # ring position of its oldest frame ffmpeg had not read (zero copy): held until it exits
    exited: threading.Event = field(default_factory=threading.Event)  # its ffmpeg is gone: the hold is over
    remuxed: str | None = None  # the temporary file the remux wrote, committed over ``path`` in the main thread


class Encoder(Handler):
    """Consumes video records (``handle``); one clip open at a time. A frame's room in the ring goes back
    once ffmpeg has read it (``release_point``): with zero copy ffmpeg reads the ring's own pages.

    Args:
        cfg: how to encode and where.
        status: sets the ring's status words (``Status``) for the env process.
    """

    release = ReleasePolicy.RELEASE_POINT
    cfg: EncoderConfig

    def __init__(self, cfg: EncoderConfig, status: StatusSink | None = None) -> None:
        super().__init__(cfg, status)
        self.clip: _Clip | None = None
        self.clips = 0
        self.clips_discarded = 0
        self.clips_broken = 0
        self.frames_written = 0
        self.frames_dropped = 0
        self.records = 0
        self.error: str | None = None
        self.faults = cfg.faults.injector()
        # A fault injected per record or frame must see each one: no runs then.
        self.takes_runs = not cfg.faults.sees_each_record("record", "frame")
        self._version: str | None = None
        self._version_asked: threading.Thread | None = None
        self.own = OwnFolder(cfg.folder, is_clip_file, expect=cfg.folder_id)
        self.budget = ClipBudget(self.own, cfg.recorder, cfg.max_bytes, cfg.keep_last_clips, cfg.ship_ledger)
        self.feed = FrameFeed()
        self._endings: deque[_Ending] = deque()
        self._ending_thread: ThreadPoolExecutor | None = None  # started at the first clip end with an ffmpeg
        self._standby: FfmpegProcess | None = None  # ffmpeg started ahead for a next clip of its command
        self.nice_choice = NiceChoice(cfg.settings.nice, cfg.settings.behind_nice)

    # -- names ---------------------------------------------------------------
    def _video_name(self, clip: _Clip) -> str:
        return clip.name + (".cast" if clip.kind == "ansi" else ".mp4")

    def _clear_video_name(self, clip: _Clip) -> str | None:
        """The video's name made ready for writing: a symlink planted there is removed (the clip replaces it,
        never writes through it); why it cannot be written when something else that is not a file is there."""
        name = self._video_name(clip)
        st = self.own.lstat(name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            self.own.unlink(name)
        elif st is not None and not stat.S_ISREG(st.st_mode):
            return f"{name} in {self.cfg.folder} is not a regular file (a FIFO, a folder, a device): the clip is not written"
        return None

    def version(self) -> str:
        """The first line of ``ffmpeg -version``, for the clips' metadata (asked once, see ``_ask_version``)."""
        if self._version_asked is not None:
            self._version_asked.join()
        if self._version is None:
            self._probe_version()
        assert self._version is not None  # set by the probe
        return self._version

    def _ask_version(self) -> None:
        """Ask ffmpeg's version in a thread when the first clip's ffmpeg starts: the answer is there by the
        clip's end, instead of a third ffmpeg run after the clip's and its remux (~12 ms at close)."""
        if self._version is None and self._version_asked is None:
            self._version_asked = threading.Thread(target=self._probe_version, name="envrec-ffmpeg-version", daemon=True)
            self._version_asked.start()

    def _probe_version(self) -> None:
        try:
            out = run_own_group([self.cfg.ffmpeg, "-version"], VERSION_TIMEOUT_S, text=True)
            self._version = (out.stdout.splitlines() or ["unknown"])[0]
        except (OSError, subprocess.SubprocessError) as exc:
            self._version = f"unknown ({exc})"

    # -- records -------------------------------------------------------------
    def handle(self, rec, position: int) -> bool:
        self.faults.point("record")
        if self._endings:
            self._complete_endings(wait=False)
        self.records += 1
        kind = rec.kind
        if kind == Kind.FRAME:
            self._on_frame(rec, position)
        elif kind == RUN:
            self._on_frame_run(rec, position)
        elif kind == Kind.TEXT_FRAME:
            self._on_text(rec)
        elif kind == Kind.CLIP_START:
            if self.clip is not None:
                self._end_clip({})
            self._on_start(json.loads(bytes(rec.sections[0])))
        elif kind == Kind.CLIP_END:
            if self.clip is not None:
                self._end_clip(json.loads(bytes(rec.sections[0])))
        elif kind == Kind.CLOSE:
            self.finish(clean=True)
            return True
        elif kind == Kind.CLIP_BROKEN:
            if self.clip is not None:
                self._break(bytes(rec.sections[0]).decode("utf-8", "replace"))
        else:
            raise ValueError(f"unknown record kind {kind} in the frame ring")
        self._status(Status.RECORDS, self.records)
        return False

    def _on_start(self, desc: dict) -> None:
        self.clip = _Clip(desc["name"], desc.get("kind", "video"), float(desc["fps"]), desc.get("episode_id"))
        self.clip.extra = {k: v for k, v in desc.items() if k not in ("name", "kind", "fps", "episode_id")}
        if self.clip.kind == "ansi":
            problem = self._clear_video_name(self.clip)
            if problem is not None:
                self._break(problem)
                return
            self.clip.cast = CastWriter(self.own, self._video_name(self.clip), self.clip.name, self.clip.fps)

    def _count_frames(self, clip: _Clip, first_step: int, last_step: int, n: int = 1) -> None:
        if clip.started_at is None:
            clip.started_at = time.monotonic()
        clip.frames += n
        clip.first_step = first_step if clip.first_step is None else clip.first_step
        clip.last_step = last_step
        self.frames_written += n
        self._status(Status.FRAMES_WRITTEN, self.frames_written)

    def _drop(self, clip: _Clip, n: int = 1) -> None:
        clip.dropped += n
        self.frames_dropped += n
        self._status(Status.FRAMES_DROPPED, self.frames_dropped)

    def _on_frame(self, rec, position: int) -> None:
        clip = self.clip
        if clip is None or clip.broken is not None or clip.kind != "video":
            if clip is not None:
                self._drop(clip)
            return
        shape = FRAME_SHAPE.unpack(rec.sections[0])
        if clip.proc is None:
            self._start_ffmpeg(clip, shape)
            if clip.broken is not None:
                self._drop(clip)
                return
        elif shape != clip.shape:
            self._break(f"frame {clip.frames} has shape {shape}, the clip started with {clip.shape}")
            self._drop(clip)
            return
        self.faults.point("frame")
        assert clip.proc is not None  # started above, or the clip would be broken
        pixels = rec.sections[1]
        failed = self.feed.send(clip.proc, position, pixels)
        if failed is not None:
            self._break(failed)
            self._drop(clip)
            return
        self._count_frames(clip, rec.step, rec.step)
        self._pace(clip, len(pixels))

    @property
    def run_template(self) -> np.ndarray | None:
        """The header of the frames the worker loop may hand over in runs (``RingReader.poll_run``): the
        open clip's, once its first frame started ffmpeg; None while frames must come one at a time."""
        clip = self.clip
        return clip.template if clip is not None and clip.proc is not None and self.takes_runs else None

    def _on_frame_run(self, run: RecordRun, position: int) -> None:
        """Frames of the open clip's size at once: one call hands them all to ffmpeg, one status update, one
        release decision; each frame's room is still released only as ffmpeg reads past it."""
        clip = self.clip
        assert clip is not None and clip.proc is not None and clip.layout is not None  # runs come only then
        proc = clip.proc
        rows, n = run.rows, run.count
        self.records += n - 1  # handle counted one
        (shape_at, pixels_at), (_, nbytes) = clip.layout.offsets, clip.layout.fixed
        same = (rows[:, shape_at : shape_at + FRAME_SHAPE.size] == clip.shape_row).all(axis=1)
        k = n if same.all() else int(same.argmin())  # frames of the clip's shape (same size, other shape: breaks it)
        pixels = rows[:k, pixels_at : pixels_at + nbytes]  # a record may end in padding
        taken, failed = self.feed.send_run(proc, position, rows.shape[1], pixels, self.release_now) if k else (0, None)
        if taken:
            steps = rows[[0, taken - 1], REC_STEP_AT : REC_STEP_AT + 8].copy().view("<u8").ravel()
            self._count_frames(clip, int(steps[0]), int(steps[1]), taken)
            self._pace(clip, taken * nbytes)
        if failed is None and k < n:
            shape = FRAME_SHAPE.unpack(rows[k, shape_at : shape_at + FRAME_SHAPE.size].tobytes())
            failed = f"frame {clip.frames} has shape {shape}, the clip started with {clip.shape}"
        if failed is not None:
            self._break(failed)
            self._drop(clip, n - taken)

    def _pace(self, clip: _Clip, nbytes: int) -> None:
        """Frames of ``nbytes`` went to the clip's ffmpeg: the end of the encoder's probation renices it
        (``ffmpeg_nice``)."""
        if self.nice_choice.handed(self.ring, nbytes) and clip.proc is not None:
            clip.proc.renice(self.nice_choice.nice)
            clip.extra["ffmpeg_nice"] = nice_of(clip.proc.pid)

    def release_point(self, cursor: int) -> int:
        """How far the worker loop may release the ring (``cursor``: all it has read): up to the oldest
        frame whose pages ffmpeg has not read yet (``VideoSettings.zero_copy`` hands it the ring's pages)."""
        point = self.feed.release_point(self.clip.proc if self.clip is not None else None, cursor)
        for ending in self._endings:
            if ending.hold is not None and not ending.exited.is_set():
                point = min(point, ending.hold)
        return point

    def idle_in(self) -> float | None:
        """A clip that finished encoding has its metadata due now; one still finishing, soon."""
        if not self._endings:
            return None
        encoded = self._endings[0].encoded
        return 0.0 if encoded is None or encoded.done() else ENDING_POLL_S

    def on_idle(self, cursor: int) -> None:
        self._complete_endings(wait=False)

    def _start_ffmpeg(self, clip: _Clip, shape: tuple) -> None:
        h, w, c = shape
        clip.shape = shape
        clip.layout = frame_layout(shape)
        clip.template = clip.layout.run_template()
        clip.shape_row = np.frombuffer(FRAME_SHAPE.pack(*shape), np.uint8)
        name = self._video_name(clip)
        # the metadata shows the path a user would type; ffmpeg writes through a descriptor of this worker
        clip.cmdline = encode_command(self.cfg.ffmpeg, w, h, c, clip.fps, os.path.join(self.cfg.folder, name), self.cfg.settings)
        problem = self._clear_video_name(clip)
        if problem is not None:
            self._break(problem)
            return
        command = tuple(clip.cmdline[:-1])
        nice = self.nice_choice.now(self.ring)
        proc = self._take_standby(command, nice)
        if proc is None:
            try:
                proc = self._spawn(command, nice)
            except OSError as exc:
                self._break(f"could not start {self.cfg.ffmpeg}: {exc}")
                return
        try:
            self._open_output(clip, proc, name)
        except BaseException as exc:
            proc.dismiss()
            if not isinstance(exc, (OSError, RecordError)):
                raise
            self._break(f"could not open {name} in {self.cfg.folder} for the video: {exc}")
            return
        clip.proc = proc
        clip.extra["ffmpeg_nice"] = nice_of(proc.pid)
        self._ask_version()
        self._status(Status.ENCODER_PID, proc.pid)
        self._start_standby(command, nice)

    def _spawn(self, command: tuple[str, ...], nice: int) -> FfmpegProcess:
        """An ffmpeg of ``command`` (the encode command less its output) at niceness ``nice`` (``ffmpeg_nice``),
        writing to a slot of its own."""
        settings = self.cfg.settings
        slot = OutputSlot(self.own.fd)
        try:
            return FfmpegProcess([*command, slot.path], slot, nice, settings.stall_timeout_s, settings.zero_copy)
        except BaseException:
            slot.close()
            raise

    def _open_output(self, clip: _Clip, proc: FfmpegProcess, name: str) -> None:
        """Point ``proc``'s output at the clip's video, before its first frame (see ``ffmpeg_output``). An open
        that fails is tried once more (a one-off EIO costs nothing; ``video_open_retried`` keeps the error)."""
        try:
            fd = self.own.open_fd(name, os.O_WRONLY | os.O_CREAT)
        except OSError as exc:
            clip.extra["video_open_retried"] = f"{type(exc).__name__}: {exc}"
            fd = self.own.open_fd(name, os.O_WRONLY | os.O_CREAT)
        try:
            proc.output.point_at(fd)
        finally:
            os.close(fd)
        self.faults.point("clip:open")

    def _start_standby(self, command: tuple[str, ...], nice: int) -> None:
        """Start an ffmpeg for a next clip of the same command now, at niceness ``nice``, so that it is ready at
        that clip's first frame; without one (it could not start), the next clip starts its own."""
        try:
            proc = self._spawn(command, nice)
        except OSError as exc:
            logger.debug("no ffmpeg started ahead for the next clip: %s", exc)
            return
        self._standby = proc
        self._status(Status.STANDBY_PID, proc.pid)

    def _take_standby(self, command: tuple[str, ...], nice: int) -> FfmpegProcess | None:
        """The ffmpeg started ahead, if it runs ``command``, is still waiting and can run at niceness ``nice`` (one
        started at a higher niceness cannot be lowered to it: ``ffmpeg_nice``); any other is dismissed."""
        proc, self._standby = self._standby, None
        if proc is None:
            return None
        self._status(Status.STANDBY_PID, 0)
        if tuple(proc.cmd[:-1]) == command and proc.nice <= nice and proc.proc.poll() is None:
            proc.renice(nice)
            return proc
        proc.dismiss()
        return None

    def _dismiss_standby(self) -> None:
        if self._standby is not None:
            self._standby.dismiss()
            self._standby = None
            self._status(Status.STANDBY_PID, 0)

    def _on_text(self, rec) -> None:
        clip = self.clip
        if clip is None or clip.broken is not None or clip.kind != "ansi":
            if clip is not None:
                self._drop(clip)
            return
        assert clip.cast is not None  # an ansi clip has its cast
        clip.cast.add(bytes(rec.sections[0]).decode("utf-8", "replace"))
        self._count_frames(clip, rec.step, rec.step)

    def _break(self, reason: str) -> None:
        clip = self.clip
        assert clip is not None  # called for the open clip only
        if clip.broken is None:
            clip.broken = reason
            logger.debug("clip %s is broken: %s", clip.name, reason)  # the env process reports it
        if clip.proc is not None:
            proc, clip.proc = clip.proc, None
            proc.finish(BROKEN_FINISH_GRACE_S)  # keep what it encoded so far (one that exited: freed)
            self.feed.clear()  # it read all it will ever read
            clip.exit_status = signal_name(proc.proc.returncode)
            clip.stderr_tail = list(proc.tail)
            self._status(Status.ENCODER_PID, 0)

    # -- clip end ------------------------------------------------------------
    def _end_clip(self, env_side: dict) -> None:
        """The open clip ended: its ffmpeg finishes in the ending thread, the next clip may start now."""
        clip = self.clip  # stays current until its ffmpeg is handed over: _break works on it
        assert clip is not None
        if "env_process" in env_side:
            clip.extra["env_process"] = env_side["env_process"]
        clip.extra.update(env_side.get("extra") or {})  # keys known only at the clip's end (end_clip(extra=...))
        if clip.started_at is not None and clip.frames:
            clip.extra["encode_wall_s"] = time.monotonic() - clip.started_at
        ending = _Ending(clip, self._video_name(clip), env_side)
        self.faults.point("clip:end")
        if clip.cast is not None:
            clip.cast.finish()
        elif clip.proc is not None:
            proc, clip.proc = clip.proc, None
            facts = process_facts(proc.pid)  # its CPU for this clip, before it exits
            if facts:
                clip.extra["ffmpeg_cpu_s"] = facts["cpu_s"]
            unread = self.feed.release_point(proc, sys.maxsize)  # with zero copy, its pipe still holds these
            ending.hold = unread if unread != sys.maxsize else None
            self.feed.clear()
            self._status(Status.ENCODER_PID, 0)
            if self._ending_thread is None:
                self._ending_thread = ThreadPoolExecutor(1, thread_name_prefix="envrec-clip-ending")
            ending.encoded = self._ending_thread.submit(self._finish_encoding, ending, proc)
        self.clip = None
        self._endings.append(ending)
        self._complete_endings(wait=False)

    def _finish_encoding(self, ending: _Ending, proc: FfmpegProcess) -> None:
        """In the ending thread: ffmpeg finishes the clip (``ending.exited`` set once it is gone: it reads no
        more of the ring), then remuxes it into a temporary file. Its files are committed in the main thread."""
        clip = ending.clip
        try:
            rc = proc.finish()
        finally:
            ending.exited.set()
        clip.exit_status = signal_name(rc)
        clip.stderr_tail = list(proc.tail)
        if rc != 0:
            clip.broken = clip.broken or proc.describe(proc.killed_reason or "ffmpeg failed")
            return
        clip.extra["fragmented"] = True  # until a remuxed video is committed over it
        if self.cfg.settings.faststart:
            ending.remuxed = self._remux(clip, ending.path)

    def _complete_endings(self, wait: bool) -> None:
        """Write the metadata of the clips that finished encoding, in the order they ended (``wait``: all of
        them, waiting for those still finishing). An error of the ending thread is raised here."""
        endings = self._endings
        while endings:
            encoded = endings[0].encoded
            if encoded is not None and not wait and not encoded.done():
                return
            ending = endings.popleft()
            if encoded is not None:
                encoded.result()
            self._complete(ending)

    def _complete(self, ending: _Ending) -> None:
        clip, path, env_side = ending.clip, ending.path, ending.env_side
        if ending.remuxed is not None:
            self._commit_remux(clip, path, ending.remuxed)
        if not env_side.get("keep", True):
            self._discard(clip, path)
            return
        empty = clip.frames == 0
        if empty and self.own.is_regular(path):
            self.own.unlink(path)
        if clip.broken is not None:
            self.clips_broken += 1
            self._status(Status.CLIPS_BROKEN, self.clips_broken)
        self.faults.point("clip:meta")
        meta = self._write_meta(clip, path, empty, int(env_side.get("frames_dropped", 0)), env_side.get("frames_sent"))
        self.clips += 1
        if self.budget.active:
            self.budget.add(clip.name + META_SUFFIX, meta["path"])
            self.faults.point("clip:evict")
            if self.budget.enforce()[0]:
                self._status(Status.EVICTED, self.budget.evicted)
                self._status(Status.BYTES_EVICTED, self.budget.bytes_evicted)
        self._status(Status.CLIPS, self.clips)

    def _discard(self, clip: _Clip, path: str) -> None:
        """keep_if said no: delete what was encoded (a file of its name; nothing else planted there); the clip
        counts as finished (the env side waits for it)."""
        for leftover in (path, clip.name + META_SUFFIX):
            if self.own.is_regular(leftover):
                self.own.unlink(leftover)
        self.clips_discarded += 1
        self.clips += 1
        self._status(Status.CLIPS_DISCARDED, self.clips_discarded)
        self._status(Status.CLIPS, self.clips)

    def _remux(self, clip: _Clip, path: str) -> str | None:
        """Remux the clip's fragmented video into a standard one: the temporary file's name, or None (the
        reason in ``remux_error``; the fragmented file stays: it plays in most players)."""
        own = self.own
        tmp = own.tmp_name(path)
        try:
            own.unlink(tmp)  # one of this pid's name left by an earlier process
            if self._faststart(path, tmp):
                return tmp
            cmd = remux_command(self.cfg.ffmpeg, own.proc_path(path), own.proc_path(tmp))
            out = run_own_group(cmd, REMUX_TIMEOUT_S, pass_fds=(own.fd,))
            if out.returncode == 0:
                return tmp
            clip.extra["remux_error"] = out.stderr.decode("utf-8", "replace").strip()[-500:]
        except (OSError, subprocess.SubprocessError, RecordError) as exc:
            clip.extra["remux_error"] = str(exc)
        with contextlib.suppress(OSError):
            own.unlink(tmp)
        return None

    def _faststart(self, path: str, tmp: str) -> bool:
        """The remux in this process (``envrec.formats.mp4_faststart``): False, with nothing left at ``tmp``,
        where the video is not what it rewrites (ffmpeg remuxes it then). An OSError is the remux's error."""
        with self.own.open_read(path) as src, self.own.open_new(tmp, "wb", buffering=0) as dst:
            try:
                faststart(src.fileno(), dst.fileno())
                return True
            except Mp4Unsupported as exc:
                logger.info("envrec encoder: %s is remuxed by ffmpeg: %s", path, exc)
        self.own.unlink(tmp)
        return False

    def _commit_remux(self, clip: _Clip, path: str, tmp: str) -> None:
        """In the main thread, where every file of the folder is committed in the order clips ended: the
        remuxed video made durable and put over the fragmented one."""
        own = self.own
        try:
            with own.open_read(tmp) as f:
                os.fsync(f.fileno())
            own.replace(tmp, path)
            clip.extra["fragmented"] = False
            return
        except (OSError, RecordError) as exc:
            clip.extra["remux_error"] = str(exc)
        with contextlib.suppress(OSError):
            own.unlink(tmp)  # the fragmented file stays

    def _write_meta(self, clip: _Clip, path: str, empty: bool, dropped_env: int, frames_sent: int | None) -> ClipMeta:
        meta: ClipMeta = {
            "written_by": "encoder",
            "content_type": "application/x-asciicast" if clip.kind == "ansi" else "video/mp4",
            "name": clip.name,
            "path": None if empty or not self.own.is_regular(path) else path,
            "env_id": self.cfg.env_id,
            "episode_id": clip.episode_id,
            "step_range": [clip.first_step, clip.last_step],
            "frames_sent": frames_sent if frames_sent is not None else clip.frames + clip.dropped + dropped_env,
            "frames_written": clip.frames,
            "frames_dropped": clip.dropped + dropped_env,
            "fps": clip.fps,
            "empty": empty,
            "broken": clip.broken is not None,
            "reason": clip.broken,
            "recorder": self.cfg.recorder,
            "finished_seq": time.time_ns(),  # orders the recorder's clips for its disk budget
        }
        if clip.kind == "video":
            meta["encoder_version"] = {"backend": self.cfg.backend, "version": self.version(), "cmdline": clip.cmdline}
            if clip.shape is not None:
                h, w, c = clip.shape
                ew, eh = encoded_size(w, h, self.cfg.settings.pix_fmt)
                meta["frame_size"] = {"width": w, "height": h, "channels": c}
                meta["encoded_size"] = {"width": ew, "height": eh}
            meta["exit_status"] = clip.exit_status
            if clip.broken is not None:
                meta["stderr_tail"] = clip.stderr_tail
        else:
            meta["encoder_version"] = {"backend": "asciicast", "version": 2}
        meta.update(cast(ClipMeta, clip.extra))
        commit_clip_meta(self.own, clip.name, meta, path)
        return meta

    # -- ending --------------------------------------------------------------
    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        if self.clip is not None:
            if not clean:
                self.clip.extra["ended_by"] = f"terminated by {terminated_by}" if terminated_by else "env process died"
                self.clip.extra["terminated_by"] = terminated_by
                if self.records_not_drained:
                    self.clip.extra["records_not_drained"] = self.records_not_drained  # frames the deadline cut off
            self._end_clip({})
        self._dismiss_standby()
        self._complete_endings(wait=True)
        self._stop_ending_thread()

    def abort(self, error: str) -> None:
        self.error = error
        if self.clip is not None:
            self._break(f"the encoder failed: {error}")
            try:
                self._end_clip({})
            except Exception:  # already failing: keep the first error
                logger.exception("envrec: could not finalize clip after a failure")
        self._dismiss_standby()
        while self._endings:  # each failure takes its clip out of the queue
            try:
                self._complete_endings(wait=True)
            except Exception:
                logger.exception("envrec: could not finalize clip after a failure")
        self._stop_ending_thread()

    def _stop_ending_thread(self) -> None:
        """Wait for the encoder's threads (and so for their child processes) before the worker exits."""
        if self._ending_thread is not None:
            self._ending_thread.shutdown(wait=True)
            self._ending_thread = None
        if self._version_asked is not None:
            self._version_asked.join()

    def summary(self) -> dict:
        return {
            "clips": self.clips,
            "clips_broken": self.clips_broken,
            "clips_discarded": self.clips_discarded,
            "frames_written": self.frames_written,
            "frames_dropped": self.frames_dropped,
            "records": self.records,
            "clips_evicted": self.budget.evicted,
            "bytes_evicted": self.budget.bytes_evicted,
            "records_not_drained": self.records_not_drained,
            "error": self.error,
        }
