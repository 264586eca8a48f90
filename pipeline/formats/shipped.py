"""A shipped recording: what a shipper writes under a URL, and the documents readers find data through.

Every recorder has a folder of its own under the URL, named by its *recorder
id* (a trace's prefix, or a video recorder's clip prefix), which holds:

* ``recorder.json``: who claimed the id (host, pid, start time, the local
  prefix), written create-only before anything else: a second recording that
  would ship under the same id is refused, a restarted shipper of the same
  recording recognises its own claim;
* ``head.json``: the recording's manifest without its batches (spaces,
  env id, settings, what replay needs), written create-only once;
* ``data/NAME``: each batch's and clip's files, under their local names,
  immutable;
* ``index/KEY.parquet``: one row per episode record of a batch (see
  ``INDEX_COLUMNS``);
* ``commits/KEY.json``: the commit of one batch (``KEY`` = ``epNNNNNNNNN.pPPPPPP``)
  or clip (``clip.NAME``), written create-only after its objects: a retry,
  a restarted shipper or two racing shippers commit each unit exactly once;
* ``final.json``: the final manifest's fields, create-only, once the
  recording ended.

Readers find data only through commit documents, never through a listing
of ``data/``. See docs/format.md ("Shipped recordings").
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from typing import Any, NotRequired, TypedDict

from ..errors import TraceError
from .json_docs import parse_json
from .trace_format import BatchEntry, batch_position

__all__ = [
    "COMMIT_DIR",
    "FINAL_DOC",
    "HEAD_DOC",
    "INDEX_COLUMNS",
    "RECORDER_DOC",
    "SHIPPED_FORMAT",
    "Commit",
    "ShippedObject",
    "batch_key",
    "check_commit",
    "clip_key",
    "clip_recorder_id",
    "commit_name",
    "data_name",
    "document_bytes",
    "host_label",
    "index_name",
    "shipped_suffix",
    "unique_suffix",
]

SHIPPED_FORMAT = "envrec.shipped"
SHIPPED_VERSION = 1
RECORDER_DOC = "recorder.json"
HEAD_DOC = "head.json"
FINAL_DOC = "final.json"
COMMIT_DIR = "commits"
MAX_COMMIT_BYTES = 1 << 20  # a commit document names a few objects: a bigger one is not envrec's

# One row per episode record (a whole episode, or one part of it) of a shipped batch.
INDEX_COLUMNS = (
    ("recorder", "string"),
    ("episode_id", "int64"),
    ("part", "int32"),  # 0 for a whole episode
    ("first_step", "int64"),
    ("length", "int64"),
    ("return", "float64"),  # null when NaN or infinite
    ("ended_by", "string"),  # null for a part that continues
    ("complete", "bool"),
    ("continues", "bool"),
    ("seed", "int64"),  # null when unseeded
    ("batch", "string"),  # the commit key
    ("objects", "list<string>"),  # the batch's data objects
    ("object_bytes", "int64"),  # their total size
)

_KEY = re.compile(r"(ep\d{9}\.p\d{6}|clip\.[A-Za-z0-9._-]{1,250})")
_OBJECT = re.compile(r"(data|index)/[A-Za-z0-9._-]{1,250}")


class ShippedObject(TypedDict):
    name: str  # relative to the recorder's folder: data/NAME or index/KEY.parquet
    size: int


class Commit(TypedDict):
    """``commits/KEY.json``: one batch or clip, committed after its objects."""

    format: str
    version: int
    kind: str  # "batch" or "clip"
    recorder: str
    key: str
    objects: list[ShippedObject]  # its data objects (batch: .json(.zst), .bin; clip: video, .meta.json)
    index: ShippedObject | None  # a batch's index
    entry: NotRequired[BatchEntry]  # a batch's manifest entry (sizes, CRC-32s, head_part, continues)
    clip: NotRequired[dict]  # a clip's name, episode_id, path, content_type
    shipped_by: dict  # host, pid
    committed_at: float  # seconds since the epoch, the shipper's clock


def host_label() -> str:
    """This host's name as a name part: its first label, letters, digits and ``-`` only."""
    label = socket.gethostname().split(".")[0]
    return re.sub(r"[^A-Za-z0-9-]", "-", label)[:40] or "host"


_suffixes: dict[int, str] = {}


def unique_suffix() -> str:
    """``HOST.PID.YYYYmmddTHHMMSS.RAND``: appended to a recorder's prefix when it ships, so that recorders of
    many nodes and runs never share an id under one URL (host and pid, the second its first recorder started,
    32 random bits). One per process: a process's trace and clip recorders share it (the viewer pairs a trace's
    episodes with the clips of its own process by it); their prefixes tell them apart."""
    pid = os.getpid()
    if pid not in _suffixes:  # keyed by pid: a forked child makes its own
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        _suffixes[pid] = f"{host_label()}.{pid}.{stamp}.{secrets.token_hex(4)}"
    return _suffixes[pid]


_SUFFIX = re.compile(r"\.([A-Za-z0-9-]+\.\d+\.\d{8}T\d{6}\.[0-9a-f]{8})(\.env\d+)?$")


def shipped_suffix(prefix: str) -> str | None:
    """The ``unique_suffix`` a shipping recorder's prefix ends with (before a sub-env's ``.envI``), or None."""
    m = _SUFFIX.search(prefix)
    return m.group(1) if m else None


def clip_recorder_id(recorder: str) -> str:
    """The id under a store of the clips of video recorder ``recorder`` (their metadata's ``recorder``), shipped
    from this host: ``clips.HOST.ID``."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "-", recorder)[:120]
    return f"clips.{host_label()}.{safe}"


def batch_key(entry: BatchEntry) -> str:
    first, part = batch_position(entry)
    return f"ep{first:09d}.p{part:06d}"


def clip_key(name: str) -> str:
    return f"clip.{name}"


def data_name(file: str) -> str:
    return f"data/{file}"


def index_name(key: str) -> str:
    return f"index/{key}.parquet"


def commit_name(key: str) -> str:
    return f"{COMMIT_DIR}/{key}.json"


def document_bytes(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def check_commit(data: bytes, where: str, recorder: str) -> Commit:
    """A commit document read back, checked: envrec's, of ``recorder``, naming only objects inside its folder.

    Raises:
        TraceError: it is not a commit document of this recorder, or names something outside its folder.
    """
    if len(data) > MAX_COMMIT_BYTES:
        raise TraceError(f"{where}: {len(data)} bytes, too large for a commit document")
    doc = parse_json(data, where)
    if not isinstance(doc, dict) or doc.get("format") != SHIPPED_FORMAT:
        raise TraceError(f"{where}: not an envrec commit document")
    if doc.get("version") != SHIPPED_VERSION:
        raise TraceError(f"{where}: commit version {doc.get('version')!r}: this envrec reads version {SHIPPED_VERSION}")
    if doc.get("recorder") != recorder:
        raise TraceError(f"{where}: commits for recorder {doc.get('recorder')!r}, found under {recorder!r}")
    if doc.get("kind") not in ("batch", "clip") or not isinstance(doc.get("key"), str) or not _KEY.fullmatch(doc["key"]):
        raise TraceError(f"{where}: kind or key is not a batch's or a clip's")
    objects = doc.get("objects")
    index = doc.get("index")
    if not isinstance(objects, list) or not all(_object_ok(o) for o in objects):
        raise TraceError(f"{where}.objects: must be a list of {{name: data/NAME, size}}")
    if index is not None and not _object_ok(index):
        raise TraceError(f"{where}.index: must be {{name: index/NAME, size}} or null")
    if doc["kind"] == "batch" and not isinstance(doc.get("entry"), dict):
        raise TraceError(f"{where}: a batch's commit has no entry")
    return doc  # type: ignore[return-value]


def _object_ok(o: Any) -> bool:
    return (isinstance(o, dict) and isinstance(o.get("name"), str) and bool(_OBJECT.fullmatch(o["name"]))
            and ".." not in o["name"] and isinstance(o.get("size"), int) and o["size"] >= 0)
