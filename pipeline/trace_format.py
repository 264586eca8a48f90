"""The trace format: file names, manifest and batch layout (see DESIGN.md).

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
  aligned to 8 bytes).

Per episode: ``observations`` (reset observation first, N+1 rows),
``actions``, ``rewards``, ``terminations``, ``truncations`` (N rows),
``infos`` (N+1, reset info first, see ``envrec.infos`` for the encoding),
and ``episode_id``, ``seed``, ``options``, ``length``, ``return``,
``ended_by`` ("terminated", "truncated", "reset" or "close": the recording
stopped inside it) and ``complete``.

Dict observations are JSON objects of their leaves, Tuple observations JSON
lists; Text leaves are JSON lists of strings.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SEGMENT_BATCHES",
    "batch_names",
    "check_prefix",
    "default_prefix",
    "is_segment",
    "manifest_document",
    "manifest_name",
    "ndarray_descriptor",
    "segment_document",
    "segment_name",
]

FORMAT_NAME = "envrec.trace"
FORMAT_VERSION = 1
MANIFEST_SUFFIX = ".manifest.json"
SEGMENT_BATCHES = 256  # batch entries in a manifest segment
GYM_RECORDING_PREFIX = "openaigym.trace"

_prefix_counter = 0
_SAFE_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def default_prefix() -> str:
    """gym-recording's own naming, ``openaigym.trace.<n>.<pid>``: its playback globs for it."""
    global _prefix_counter
    prefix = f"{GYM_RECORDING_PREFIX}.{_prefix_counter}.{os.getpid()}"
    _prefix_counter += 1
    return prefix


def check_prefix(prefix: str) -> str:
    """Refuse prefixes that could name a file outside the output folder."""
    if not isinstance(prefix, str) or not _SAFE_PREFIX.match(prefix) or ".." in prefix or len(prefix) > 200:
        raise ValueError(
            f"name prefix {prefix!r} is not allowed: use letters, digits, '.', '_' and '-' "
            f"(no path separators, no '..', at most 200 characters)"
        )
    return prefix


def manifest_name(prefix: str) -> str:
    return prefix + MANIFEST_SUFFIX


def batch_names(prefix: str, first_episode: int) -> tuple[str, str]:
    stem = f"{prefix}.ep{first_episode:09d}"
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


def manifest_document(
    *,
    prefix: str,
    env_id: str | None,
    observation_space: dict,
    action_space: dict,
    settings: dict,
    batches: list | None = None,
    counters: dict | None = None,
    complete: bool = False,
    closed_cleanly: bool = False,
    stats: dict | None = None,
    error: str | None = None,
    segments: dict | None = None,
    evicted: dict | None = None,
) -> dict:
    """A manifest, with every key a reader may look for (the serializer's, or the env process's own
    when its serializer never started)."""
    from envrec import __version__

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
        "counters": counters or {"batches": len(batches), "episodes": sum(b["len"] for b in batches), "steps": 0, "bytes": 0, "orphan_steps": 0},
        "segments": segments or {"first": 0, "next": 0},
        "evicted": evicted or {"batches": 0, "episodes": 0, "steps": 0, "bytes": 0},
        "complete": complete,
        "closed_cleanly": complete and closed_cleanly,
        "stats": stats,
        "error": error,
        "writer": {"envrec": __version__, "pid": os.getpid()},
    }


def segment_name(prefix: str, index: int) -> str:
    """A closed manifest segment: it still ends in ``.manifest.json`` and has a ``batches`` list, so
    gym-recording's glob-and-concatenate reader reads it as one more manifest."""
    return f"{prefix}.m{index:06d}{MANIFEST_SUFFIX}"


def is_segment(document: dict) -> bool:
    return "segment_of" in document


def segment_document(prefix: str, index: int, batches: list) -> dict:
    return {"batches": batches, "segment_of": prefix, "segment": index, "format": FORMAT_NAME, "version": FORMAT_VERSION}


def recording_batches(folder: str, manifest: dict) -> list[dict]:
    """Every batch entry a head manifest names, oldest first: its closed segments', then its own.

    ``FileNotFoundError`` when a segment it counts is gone: evicted after the
    head was read; read the head again.
    """
    import json

    seg = manifest.get("segments") or {"first": 0, "next": 0}
    out: list[dict] = []
    for k in range(seg["first"], seg["next"]):
        with open(os.path.join(folder, segment_name(manifest["prefix"], k)), "rb") as f:
            out.extend(json.load(f)["batches"])
    out.extend(manifest["batches"])
    return out


def checkpoint_name(prefix: str) -> str:
    """The serializer's checkpoint (see ``envrec.workers.checkpoint``); hidden, like temporary files."""
    return f".{prefix}.checkpoint.json"
