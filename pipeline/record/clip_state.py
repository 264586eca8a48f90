"""Env side: what the video recorder knows of the clip it records, the metadata of a clip whose
encoder failed before writing it, and the deletion of a clip discarded after it was kept (``envrec.keep``)."""

from __future__ import annotations

import logging
import stat
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, RecordError
from ..formats.clip_meta import META_SUFFIX, ClipMeta, meta_path, read_clip_meta, write_clip_meta
from ..formats.ownfolder import OwnFolder
from ..formats.trace_format import check_prefix
from .packer import RecordPacker

__all__ = ["ClipState", "delete_clip_files", "mark_discarded", "renamed_method", "write_broken_meta"]

logger = logging.getLogger(__name__)


@dataclass
class ClipState:
    """One clip as the env side sees it: sent to the encoder, not yet known finished."""

    name: str
    kind: str
    episode_id: int | None
    fps: float
    shape: tuple | None = None
    frames: int = 0
    dropped: int = 0
    broken: str | None = None
    keep: bool = True
    discarded: bool = False  # kept when it ended, discarded since by a keeper: its files go once the encoder has finished it
    blocked_at_start: float = 0.0
    calls_at_start: tuple[int, int] = (0, 0)
    packer: RecordPacker | None = None  # once a frame went through: the fast path for frames like it
    raw_shape: tuple = ()  # that frame's shape as given (2-D or 3-D)


def write_broken_meta(folder: OwnFolder, clip: ClipState, reason: str | None) -> None:
    """The metadata of a clip whose worker failed before writing it, in the recorder's folder opened once; a file
    with no frame in it goes (a regular file of the clip's name only). Never raises."""
    video = clip.name + (".cast" if clip.kind == "ansi" else ".mp4")
    try:
        st = folder.lstat(video)
    except (OSError, RecordError):
        st = None
    regular = st is not None and stat.S_ISREG(st.st_mode)
    meta: ClipMeta = {
        "content_type": "application/x-asciicast" if clip.kind == "ansi" else "video/mp4",
        "name": clip.name,
        "path": video if regular and st is not None and st.st_size else None,
        "episode_id": clip.episode_id,
        "frames_sent": clip.frames,
        "frames_written": None,  # unknown: the encoder died before saying
        "frames_dropped": clip.dropped,
        "fps": clip.fps,
        "empty": clip.frames == 0,
        "broken": True,
        "reason": reason,
        "error": reason,
        "written_by": "env process",  # the encoder died before finishing this clip
    }
    try:
        if meta["path"] is None and regular:
            folder.unlink(video)
        write_clip_meta(folder, clip.name, meta)
    except (OSError, RecordError) as exc:  # never into the env's step; the stream is already reported broken
        logger.error("envrec: could not write the metadata of broken clip %s: %s", clip.name, exc)


def mark_discarded(clips: Iterable[ClipState], name: str) -> bool:
    """Mark the newest of ``clips`` (sent, not yet reported finished) named ``name`` discarded; False if none is."""
    pending = next((c for c in reversed(list(clips)) if c.name == name), None)
    if pending is not None:
        pending.discarded = True
    return pending is not None


def delete_clip_files(folder: OwnFolder, name: str, recorder: str) -> bool:
    """Delete finished clip ``name``'s ``NAME.meta.json`` and the video it names; True if they were there.

    Only those two files in ``folder``, and only when the metadata is this
    clip's: it names ``name`` and ``recorder`` (the env process's own
    metadata of a broken clip names no recorder), and its video is
    ``NAME.mp4`` or ``NAME.cast``, a regular file. The metadata goes first,
    as disk budgets do: no reader sees metadata naming a missing video.
    Removed relative to the folder opened once. Never raises.

    Args:
        folder: the recorder's folder, opened once.
        name: the clip's name (a plain file name, ``check_prefix``'s; any other deletes nothing).
        recorder: the recorder's id (``VideoRecorder.recorder_id``).
    """
    try:
        check_prefix(name)
    except ConfigError:
        logger.warning("envrec: %r is not a clip name (it could leave the folder): nothing deleted", name)
        return False
    path = meta_path(folder.path, name)
    try:
        if not folder.is_regular(name + META_SUFFIX):
            return False
        meta = read_clip_meta(path)
    except (OSError, ValueError):
        return False  # gone already (a disk budget took it), or not a clip's metadata: nothing of this clip's
    if meta.get("name") != name or meta.get("recorder", recorder) != recorder:
        logger.warning("envrec: %s is not the metadata of this recorder's clip %s: left in place", path, name)
        return False
    video = meta.get("path")
    try:
        folder.unlink(name + META_SUFFIX)
        if video in (name + ".mp4", name + ".cast") and folder.is_regular(video):
            folder.unlink(video)
    except (OSError, RecordError) as exc:
        logger.error("envrec: could not delete discarded clip %s: %s", name, exc)
        return False
    return True


def renamed_method(new: str, old: str) -> Callable[..., Any]:
    """A method's old name ``old``, kept for one release: it warns (``DeprecationWarning``), then calls ``new``."""

    def alias(self: Any, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{old} is now {new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)(*args, **kwargs)

    alias.__doc__ = f"Deprecated name of ``{new}``, kept for one release."
    return alias
