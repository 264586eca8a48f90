"""A clip's ``NAME.meta.json``: its schema, its one writer and its one reader.

Two authors write it, with the same keys: the encoder when it finishes a clip
(``written_by: "encoder"``), and the env process for a clip whose encoder
died first (``written_by: "env process"``; ``frames_written`` is then
``None``, unknown). ``frames_sent`` is what the env side handed to the ring,
``frames_written`` what reached ffmpeg, ``frames_dropped`` what was lost
on either side.
"""

from __future__ import annotations

import json
import os
from typing import TypedDict

from ..errors import TraceError
from .inside import name_parts, open_inside, safe_prefix
from .json_docs import parse_json
from .ownfolder import OwnFolder

__all__ = ["CLIP_FILE_SUFFIXES", "CLIP_META_VERSION", "META_SUFFIX", "ClipMeta", "is_clip_file", "meta_path", "read_clip_meta",
           "write_clip_meta"]

CLIP_META_VERSION = 1
META_SUFFIX = ".meta.json"
# The files a video recorder writes for clip NAME: NAME.mp4 or NAME.cast, NAME.meta.json, and an asciicast's events
# while it is recorded (each also as a temporary ``.NAME.SUFFIX.PID.tmp``): the only names it removes or replaces.
CLIP_FILE_SUFFIXES = (".mp4", ".cast", META_SUFFIX, ".cast.events")


class ClipMeta(TypedDict, total=False):
    version: int
    written_by: str  # "encoder" or "env process"
    content_type: str  # video/mp4 or application/x-asciicast
    name: str
    path: str | None  # the video's file name in the folder; None: no video (empty clip, or nothing usable)
    env_id: str | None
    episode_id: int | None
    step_range: list[int | None]
    frames_sent: int
    frames_written: int | None
    frames_dropped: int
    fps: float
    empty: bool
    broken: bool
    reason: str | None
    error: str | None
    recorder: str  # the VideoRecorder's id (disk budgets find a recorder's clips by it)
    finished_seq: int  # orders a recorder's clips
    encoder_version: dict
    frame_size: dict
    encoded_size: dict
    exit_status: str | None
    stderr_tail: list[str]
    env_process: dict  # the env side's figures for the clip
    encode_wall_s: float
    ffmpeg_cpu_s: float
    ffmpeg_nice: int | None  # the niceness its ffmpeg had last (VideoSettings.nice, or behind_nice: workers.ffmpeg_nice)
    fragmented: bool
    remux_error: str
    ended_by: str
    partial_removed: str
    meta_retried: str  # the error of a first write of this metadata that failed (the second did not)
    video_open_retried: str  # the error of a first open of the video for its ffmpeg that failed (the second did not)


def meta_path(folder: str, name: str) -> str:
    return os.path.join(folder, name + META_SUFFIX)


def is_clip_file(name: str) -> bool:
    """Whether ``name`` is one of a clip's files (``CLIP_FILE_SUFFIXES``) with a clip name ``check_prefix`` allows:
    the ``owns`` test of a video recorder's ``OwnFolder``."""
    for suffix in CLIP_FILE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return safe_prefix(name[: -len(suffix)])
    return False


def write_clip_meta(folder: OwnFolder, name: str, meta: ClipMeta) -> None:
    """Replace ``NAME.meta.json`` in ``folder`` atomically with ``meta`` (its version added).

    Args:
        folder: the recorder's folder, opened once.
        name: the clip's name.
        meta: the metadata.
    """
    doc = {"version": CLIP_META_VERSION, **meta}
    folder.write_atomic(name + META_SUFFIX, json.dumps(doc, indent=1, allow_nan=False).encode("utf-8"))


_NUMBER = (int, float)
_OPTIONAL_INT = (int, type(None))
_OPTIONAL_STR = (str, type(None))
# the keys readers use (the viewer, inspect, disk budgets), with the types they rely on
_FIELDS: dict[str, tuple[type, ...]] = {
    "version": (int,), "name": (str,), "path": _OPTIONAL_STR, "content_type": (str,), "env_id": _OPTIONAL_STR,
    "episode_id": _OPTIONAL_INT, "step_range": (list,), "frames_sent": _OPTIONAL_INT, "frames_written": _OPTIONAL_INT,
    "frames_dropped": (int,), "fps": (*_NUMBER, type(None)), "empty": (bool,), "broken": (bool,), "reason": _OPTIONAL_STR,
    "error": _OPTIONAL_STR, "recorder": (str,), "finished_seq": (int,), "written_by": (str,),
}


def read_clip_meta(path: str) -> ClipMeta:
    """A clip's metadata; ``OSError`` when it cannot be read, ``TraceError`` (a ``ValueError``) naming the
    field when it is not clip metadata. Opened as ``envrec.formats.inside`` opens files (a symlink is not followed);
    the video it names must be a name inside its folder.

    Files written before the schema had a version get the keys it added:
    ``frames_sent``/``frames_written`` and ``written_by``.
    """
    from .trace_checks import check_types  # here: an encoder worker's start does not pay for the trace checks (~18 ms)

    folder, name = os.path.split(path)
    with open_inside(folder or ".", name, name) as f:
        doc = check_types(parse_json(f.read(), name), name, _FIELDS, required=("name",))
    if doc.get("path") is not None:
        name_parts(doc["path"], f"{name}: path")
    if doc.get("version", CLIP_META_VERSION) > CLIP_META_VERSION:
        raise TraceError(f"{name} has version {doc['version']}, newer than this envrec reads")
    doc.setdefault("frames_written", None)
    doc.setdefault("frames_sent", doc["frames_written"])
    doc.setdefault("written_by", "encoder")
    return doc  # type: ignore[return-value]  # checked above as far as readers rely on it
