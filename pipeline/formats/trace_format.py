"""The trace format: file names, manifest and batch layout (``docs/format.md`` describes it for readers).

A superset of openai/gym-recording's, so that its playback module reads
envrec traces unchanged when the default prefix is kept:

* ``PREFIX.manifest.json``: ``{"batches": [{"first", "len", "fn"}, ...]}``
  plus envrec's keys: ``format``, ``version``, ``env_id``, the spaces, the
  recorder ``settings``, ``counters`` and ``complete``. Each batch entry also
  names its ``bin`` file and both files' sizes, so a reader can tell a
  complete batch from a damaged one.
* ``PREFIX.mNNNNNN.manifest.json``: closed manifest *segments*. The head
  manifest lists the batches of the segment being filled; once it holds
  ``SEGMENT_BATCHES`` of them they move to a segment file of their own, which
  is never rewritten again (except to drop evicted batches), and the head
  counts the segments (``segments: {"first", "next"}``). A commit therefore
  rewrites at most one segment's worth of entries however long the recording.
  Readers take the segments ``first..next-1`` in order, then the head's.
* ``PREFIX.epNNNNNNNNN.json``: ``{"episodes": [...]}`` where every array is
  ``{"__type": "ndarray", "shape", "order", "dtype", "npyfile", "npyoff",
  "size"}`` pointing into ``PREFIX.epNNNNNNNNN.bin`` (little-endian, offsets
  aligned to 8 bytes). A recording that compresses any array writes it as
  ``PREFIX.epNNNNNNNNN.json.zst`` (zstd; see ``envrec.formats.compression``).

Per episode: ``observations`` (reset observation first, N+1 rows),
``actions``, ``rewards``, ``terminations``, ``truncations`` (N rows),
``infos`` (N+1, reset info first, see ``envrec.formats.infos`` for the encoding),
and ``episode_id``, ``seed``, ``options``, ``length``, ``return``,
``ended_by`` ("terminated", "truncated", "reset" or "close": the recording
stopped inside it) and ``complete``.

Dict observations are JSON objects of their leaves, Tuple observations JSON
lists; Text leaves are JSON lists of strings.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from ..errors import ConfigError, TraceError
from ..option_checks import Accepts
from .atomic import write_atomic
from .inside import open_inside
from .ownfolder import OwnFolder
from .trace_checks import check_manifest, parse_json, safe_prefix

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SEGMENT_BATCHES",
    "BatchEntry",
    "Manifest",
    "Segment",
    "batch_names",
    "batch_position",
    "check_prefix",
    "checkpoint_names",
    "default_prefix",
    "is_segment",
    "manifest_document",
    "manifest_name",
    "ndarray_descriptor",
    "position_after",
    "read_manifest",
    "read_manifest_in",
    "segment_document",
    "segment_name",
    "trace_file_names",
    "unnamed_batch_files",
    "write_manifest",
    "write_manifest_into",
]

FORMAT_NAME = "envrec.trace"
FORMAT_VERSION = 1
MANIFEST_SUFFIX = ".manifest.json"
SEGMENT_BATCHES = 256  # batch entries in a manifest segment
GYM_RECORDING_PREFIX = "openaigym.trace"



class BatchEntry(TypedDict):
    """A committed batch, as a manifest names it."""

    first: int  # index of its first episode in the recording
    len: int  # episodes in it
    fn: str  # its .json file
    bin: str  # its .bin file
    steps: int
    json_bytes: int
    bin_bytes: int
    array_bytes: int  # its arrays' bytes uncompressed (the compression ratio's numerator)
    json_crc32: int
    bin_crc32: int
    head_part: NotRequired[dict]  # {"index", "first_step"}: its first record continues an episode (docs/format.md)
    continues: NotRequired[bool]  # its last record is a part that continues in the next batch


class Manifest(TypedDict, total=False):
    """``PREFIX.manifest.json``, the head: metadata and the batches of the segment being filled (or a segment)."""

    batches: list[BatchEntry]
    format: str
    version: int
    prefix: str
    env_id: str | None
    observation_space: dict
    action_space: dict
    settings: dict
    counters: dict[str, int]  # batches, episodes, steps, bytes named by the manifest; orphan_steps
    segments: dict[str, int]  # first, next: the closed segments it counts
    evicted: dict[str, int]  # batches, episodes, steps, bytes deleted by a disk budget
    complete: bool
    closed_cleanly: bool
    stats: dict | None
    error: str | None
    terminated_by: str | None  # the signal that ended the job (SIGTERM) when one did
    poisoned: list[dict]  # records skipped as poison: kind, episode, step, reason
    writer: dict
    segment_of: str  # a closed segment: the prefix of its head
    segment: int  # and its index
    env: dict  # what replay needs to recreate the env (envrec.formats.replay_fields)


Segment = Manifest  # a closed segment is a manifest with ``segment_of``, ``segment`` and ``batches``


_prefix_counter = 0


def default_prefix() -> str:
    """gym-recording's own naming, ``openaigym.trace.<n>.<pid>``: its playback globs for it."""
    global _prefix_counter
    prefix = f"{GYM_RECORDING_PREFIX}.{_prefix_counter}.{os.getpid()}"
    _prefix_counter += 1
    return prefix


def check_prefix(prefix: str) -> str:
    """``prefix`` itself; ``ConfigError`` for one that could name a file outside the output folder."""
    if not isinstance(prefix, str) or not safe_prefix(prefix):
        raise ConfigError(
            f"name prefix {prefix!r} is not allowed: use letters, digits, '.', '_' and '-' "
            f"(no path separators, no '..', at most 200 characters)"
        )
    return prefix


PREFIX = Accepts(
    "a name of letters, digits, '.', '_' and '-' (path separators and '..' not allowed, at most 200 characters)",
    lambda v: bool(check_prefix(v)),  # check_prefix raises for a bad one, which Accepts takes as refused
)


def manifest_name(prefix: str) -> str:
    return prefix + MANIFEST_SUFFIX


def batch_position(entry: BatchEntry) -> tuple[int, int]:
    """Where a batch stands in its recording: its first record's episode and part (0 for an episode's start).
    Strictly increasing over a recording's batches, oldest first (an episode's parts share ``first``)."""
    head = entry.get("head_part")
    return entry["first"], int(head["index"]) if head else 0


def position_after(entry: BatchEntry) -> tuple[int, int]:
    """The ``batch_position`` of the batch that comes right after ``entry``'s."""
    if not entry.get("continues"):
        return entry["first"] + entry["len"], 0
    head = entry.get("head_part")
    last = int(head["index"]) if head is not None and entry["len"] == 1 else 0  # its last record's part
    return entry["first"] + entry["len"] - 1, last + 1


def batch_names(prefix: str, first_episode: int, part: int = 0) -> tuple[str, str]:
    """The (.json, .bin) names of a batch whose first record is ``first_episode`` (its part ``part``: a
    batch that starts with the continuation of an episode is named ``PREFIX.epNNNNNNNNN.pPPPPPP``)."""
    stem = f"{prefix}.ep{first_episode:09d}" + (f".p{part:06d}" if part else "")
    return stem + ".json", stem + ".bin"


def ndarray_descriptor(shape, dtype: str, npyfile: str, offset: int, size: int) -> dict:
    return {
        "__type": "ndarray",
        "shape": list(shape),
        "order": "C",
        "dtype": dtype,
        "npyfile": npyfile,
        "npyoff": offset,
        "size": size,
    }


def write_manifest(path: str, doc: Manifest) -> None:
    """A manifest or segment written at ``path`` (strict JSON, replaced atomically), for tools and tests; a
    recorder writes its own into its folder opened once (``write_manifest_into``)."""
    write_atomic(path, manifest_bytes(doc))


def write_manifest_into(own: OwnFolder, name: str, doc: Manifest) -> None:
    """The recorders' writer of manifests and segments: ``name`` in the folder opened once (one of the
    recording's own names, or ``RecordError``), strict JSON, replaced atomically (``OwnFolder.write_atomic``)."""
    own.write_atomic(name, manifest_bytes(doc))


def manifest_bytes(doc: Manifest) -> bytes:
    return json.dumps(doc, allow_nan=False, indent=1).encode("utf-8")


def read_manifest(path: str) -> Manifest:
    """The one reader: ``OSError`` when it cannot be read (``FileNotFoundError`` when it is not there),
    ``TraceError`` (a ``ValueError``) when it is not a manifest this envrec understands (gym-recording's
    own, with only ``batches``, are), naming the field at fault. It is opened as ``envrec.formats.inside`` opens
    files: a symlink is not followed."""
    folder, name = os.path.split(path)
    with open_inside(folder or ".", name, name) as f:
        return _manifest_of(f.read(), name)


def read_manifest_in(own: OwnFolder, name: str) -> Manifest:
    """``read_manifest`` of ``name`` in a folder opened once (a regular file, not through a symlink)."""
    with own.open_read(name) as f:
        return _manifest_of(f.read(), name)


def _manifest_of(data: bytes, name: str) -> Manifest:
    doc = check_manifest(parse_json(data, name), name)
    if doc.get("format") == FORMAT_NAME and doc.get("version", FORMAT_VERSION) > FORMAT_VERSION:
        raise TraceError(f"{name} has format version {doc['version']}, newer than this envrec reads")
    return doc  # type: ignore[return-value]  # checked by check_manifest as far as readers rely on it


def manifest_document(
    *,
    prefix: str,
    env_id: str | None,
    observation_space: dict,
    action_space: dict,
    settings: dict,
    batches: list[BatchEntry] | None = None,
    counters: dict | None = None,
    complete: bool = False,
    closed_cleanly: bool = False,
    stats: dict | None = None,
    error: str | None = None,
    segments: dict | None = None,
    evicted: dict | None = None,
    terminated_by: str | None = None,
    env: dict | None = None,
) -> Manifest:
    """A manifest, with every key a reader may look for (the serializer's, or the env process's own
    when its serializer never started); ``env``: what replay needs to recreate the env (``envrec.formats.replay_fields``)."""
    from ..version import __version__

    batches = batches or []
    return {
        "batches": batches,
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "prefix": prefix,
        "env_id": env_id,
        "observation_space": observation_space,
        "action_space": action_space,
        "settings": settings,
        "counters": counters or {"batches": len(batches), "episodes": sum(b["len"] for b in batches), "steps": 0, "bytes": 0,
                                 "orphan_steps": 0, "records_poisoned": 0},
        "segments": segments or {"first": 0, "next": 0},
        "evicted": evicted or {"batches": 0, "episodes": 0, "steps": 0, "bytes": 0},
        "complete": complete,
        "closed_cleanly": complete and closed_cleanly,
        "stats": stats,
        "error": error,
        "terminated_by": terminated_by,  # the signal that ended the job (SIGTERM), if one did
        "poisoned": [],  # records skipped because they made the serializer fail every time (the serializer's)
        # env_pid and host: a recording killed with its workers is known dead by them (record/leftovers.py)
        "writer": {"envrec": __version__, "pid": os.getpid(), "env_pid": os.getpid(), "host": socket.gethostname()},
        **({"env": env} if env is not None else {}),
    }


def segment_name(prefix: str, index: int) -> str:
    """A closed manifest segment: it still ends in ``.manifest.json`` and has a ``batches`` list, so
    gym-recording's glob-and-concatenate reader reads it as one more manifest."""
    return f"{prefix}.m{index:06d}{MANIFEST_SUFFIX}"


def is_segment(document: Any) -> bool:
    return "segment_of" in document


def segment_document(prefix: str, index: int, batches: list[BatchEntry]) -> Segment:
    return {"batches": batches, "segment_of": prefix, "segment": index, "format": FORMAT_NAME, "version": FORMAT_VERSION}


def recording_batches(folder: str, manifest: Manifest) -> list[BatchEntry]:
    """Every batch entry a head manifest names, oldest first: its closed segments', then its own.

    ``FileNotFoundError`` when a segment it counts is gone: evicted after the
    head was read; read the head again.
    """
    seg = manifest.get("segments") or {"first": 0, "next": 0}
    out: list[BatchEntry] = []
    for k in range(seg["first"], seg["next"]):
        out.extend(read_manifest(os.path.join(folder, segment_name(manifest["prefix"], k)))["batches"])
    out.extend(manifest["batches"])
    return out


def trace_file_names(prefix: str) -> Callable[[str], bool]:
    """The ``owns`` test of a recording's files (``envrec.formats.ownfolder``): ``PREFIX.*`` (manifest, segments,
    batches) and the hidden ``.PREFIX.*`` (checkpoints, spills, temporary files)."""
    return lambda name: name.startswith((f"{prefix}.", f".{prefix}."))


def checkpoint_names(prefix: str) -> tuple[str, str]:
    """The serializer's two checkpoint slots (see ``envrec.workers.checkpoint``); hidden, like temporary files."""
    return f".{prefix}.checkpoint.a.json", f".{prefix}.checkpoint.b.json"


def unnamed_batch_files(folder: str, prefix: str, named: set[str]) -> list[str]:
    """Names of the batch files of ``prefix`` in ``folder`` that are not in ``named`` (the names the
    manifest and whoever still writes use): what an interrupted commit or eviction left."""
    batch_file = re.compile(re.escape(prefix) + r"\.ep\d{9}(\.p\d{6})?\.(json|json\.zst|bin)$")
    return [n for n in os.listdir(folder) if batch_file.match(n) and n not in named]
