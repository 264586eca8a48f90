"""What the full index (``catalog``) and the lazy one (``listing``) share: episodes stitched from batch summaries, clips as JSON.

An episode's summary (length, return, how it ended, its first step) comes
from its batch's ``.json`` alone. A recording's episodes are *pieces*: one
per episode, or more when a damaged part split it, each with the batches of
its parts (``Where``), stitched from the kept batch entries by ``build``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np

from envrec.errors import TraceError
from envrec.export.sources import RecordingSource
from envrec.formats.clip_meta import ClipMeta
from envrec.formats.part_checks import part_of
from envrec.formats.trace_format import MANIFEST_SUFFIX, BatchEntry, read_manifest, recording_batches
from envrec.read.batch_files import BatchFiles
from envrec.read.stitch import joins, recording_ended, settled

__all__ = ["NotFound", "Where", "build", "clip_json", "evicted", "settle", "summary_of"]


class NotFound(LookupError):
    """No such recording, episode or dimension (the server answers 404)."""


@dataclass
class Where:
    """One piece of an episode: its recording, each part's batch and place in it, and its summary."""

    source: RecordingSource
    parts: list[tuple[BatchEntry, int]]  # each part's batch and place in it
    summary: dict[str, Any]
    after: BatchEntry | None = None  # the batch after its last part's (how it ended: stitch.settled)
    spans: list[dict[str, Any]] = field(default_factory=list)  # each part's own summary (length, return, first_step)


def summary_of(raw: dict) -> dict[str, Any]:
    """An episode record's summary, from the batch JSON alone."""
    ret = raw.get("return")
    _, first_step, _ = part_of(raw)
    return {
        "episode_id": raw.get("episode_id"), "length": raw.get("length", 0),
        "return": ret if isinstance(ret, int | float) and np.isfinite(ret) else None,
        "ended_by": raw.get("ended_by", "unknown"), "complete": raw.get("complete", True),
        "first_step": first_step,
    }


def _extend(piece: Where, entry: BatchEntry, s: dict[str, Any]) -> None:
    """Add the next part (``s``, the first record of ``entry``) to a piece of an episode."""
    piece.parts.append((entry, 0))
    piece.spans.append(s)
    t = piece.summary
    t["length"] += s["length"]
    total = t["return"] + s["return"] if t["return"] is not None and s["return"] is not None else None
    t["return"] = total if total is not None and np.isfinite(total) else None
    t.update(ended_by=s["ended_by"], complete=s["complete"], parts=t["parts"] + 1)


def _follows(t: dict[str, Any], s: dict[str, Any], entry: BatchEntry, broken: Callable[[BatchEntry, str], None] | None) -> bool:
    """The first record of ``entry`` (summary ``s``) continues the piece before it (``t``): the same episode, from
    the step it ended at, as ``stitch.check_part_follows`` checks records; else ``broken`` is told why."""
    if t["episode_id"] == s["episode_id"] and t["first_step"] + t["length"] == s["first_step"]:
        return True
    if broken is not None:
        broken(entry, f"{entry['fn']}: episodes[0].part: of episode {s['episode_id']} from step {s['first_step']}, but the "
                      f"part before is of episode {t['episode_id']} and ends at step {t['first_step'] + t['length']}")
    return False


def build(src: RecordingSource, kept: list[BatchEntry], summaries: Callable[[BatchEntry], list[dict]],
          broken: Callable[[BatchEntry, str], None] | None = None) -> list[Where]:
    """A recording's episodes (pieces of one, when a damaged part split it), stitched from the kept batches
    (``stitch.chained``, by ``TraceReader``); ``summaries(entry)``: the summaries of a batch's records; ``broken``:
    told of a batch whose first record should continue the piece before it but does not follow it (a piece of
    its own then)."""
    pieces: list[Where] = []
    for k, (entry, joined) in enumerate(zip(kept, joins(kept), strict=True)):
        for i, s in enumerate(summaries(entry)):
            if i == 0 and joined and pieces and _follows(pieces[-1].summary, s, entry, broken):
                _extend(pieces[-1], entry, s)
            else:
                pieces.append(Where(src, [(entry, i)], dict(s, parts=1), spans=[s]))
            pieces[-1].after = kept[k + 1] if k + 1 < len(kept) else None
    return pieces


def settle(piece: Where, files: BatchFiles) -> None:
    """How an episode whose last part continues ended, when something came after it (``stitch.settled``)."""
    entry, position = piece.parts[-1]
    if recording_ended(piece.source.manifest, entry, piece.after) is None:
        return
    try:
        last = files.episode(piece.source.manifest, 0, files.load(entry, piece.source.manifest)[position])
    except TraceError:
        return  # listed damaged when its plots are asked for
    last = settled(last, piece.source.manifest, entry, piece.after)
    piece.summary.update(ended_by=last.ended_by, complete=last.complete)


def evicted(src: RecordingSource, entry: BatchEntry) -> bool:
    """Whether a batch the index listed was evicted since by the recording's disk budget (``max_bytes``): a file of
    it is gone and the recording's head manifest, read again, no longer names it. Evicted is not damaged."""
    if all(os.path.exists(os.path.join(src.directory, entry[k])) for k in ("fn", "bin") if k in entry):
        return False
    prefix = src.manifest.get("prefix")
    if not isinstance(prefix, str):
        return False
    try:
        named = {e["fn"] for e in recording_batches(src.directory, read_manifest(os.path.join(src.directory, prefix + MANIFEST_SUFFIX)))}
    except (OSError, TraceError, KeyError, TypeError):
        return False
    return entry["fn"] not in named


def clip_json(root: str, folder: str, meta: ClipMeta) -> dict[str, Any]:
    """A clip as the pages list it (``url`` under ``/files/``, relative to ``root``)."""
    path = meta.get("path")
    return {
        "name": meta["name"], "episode_id": meta.get("episode_id"), "fps": meta.get("fps"),
        "frames": meta.get("frames_written"), "broken": bool(meta.get("broken")), "reason": meta.get("reason"),
        "kind": "ansi" if meta.get("content_type") == "application/x-asciicast" else "video",
        "url": _file_url(os.path.relpath(os.path.join(folder, path), root)) if path else None,
        "folder": os.path.relpath(folder, root),
    }


def _file_url(rel: str) -> str:
    return "/files/" + "/".join(quote(part, safe="") for part in rel.split(os.sep))
