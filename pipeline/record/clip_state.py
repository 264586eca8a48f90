"""Env side: what the video recorder knows of the clip it records, and the metadata of a clip whose
encoder failed before writing it."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ..formats.clip_meta import ClipMeta, meta_path, write_clip_meta
from .packer import RecordPacker

__all__ = ["ClipState", "write_broken_meta"]

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
    blocked_at_start: float = 0.0
    calls_at_start: tuple[int, int] = (0, 0)
    packer: RecordPacker | None = None  # once a frame went through: the fast path for frames like it
    raw_shape: tuple = ()  # that frame's shape as given (2-D or 3-D)


def write_broken_meta(folder: str, clip: ClipState, reason: str | None) -> None:
    """The metadata of a clip whose worker failed before writing it; a file with no frame in it goes. Never raises."""
    path = meta_path(folder, clip.name)
    ext = ".cast" if clip.kind == "ansi" else ".mp4"
    video = os.path.join(folder, clip.name + ext)
    meta: ClipMeta = {
        "content_type": "application/x-asciicast" if clip.kind == "ansi" else "video/mp4",
        "name": clip.name,
        "path": os.path.basename(video) if os.path.exists(video) and os.path.getsize(video) else None,
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
        if meta["path"] is None and os.path.exists(video):
            os.unlink(video)
        write_clip_meta(path, meta)
    except OSError as exc:  # never into the env's step; the stream is already reported broken
        logger.error("envrec: could not write the metadata of broken clip %s: %s", clip.name, exc)
