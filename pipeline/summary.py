"""What ``envrec inspect`` reports about a folder of traces."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from .reader import TraceError, TraceReader

__all__ = ["TraceSummary", "summarize"]


@dataclass
class TraceSummary:
    directory: str
    recordings: list[dict] = field(default_factory=list)
    episodes: int = 0
    steps: int = 0
    batches: int = 0
    bytes: int = 0
    raw_bytes: int = 0  # the same data uncompressed
    lengths: list[int] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    clips: list[ClipMeta] = field(default_factory=list)

    @property
    def compression_ratio(self) -> float | None:
        return self.raw_bytes / self.bytes if self.bytes else None

    @property
    def ok(self) -> bool:
        return not self.problems


def summarize(directory: str) -> TraceSummary:
    """Read every manifest in ``directory``, check each batch's files, gather episode figures."""
    s = TraceSummary(os.path.abspath(directory))
    try:
        reader = TraceReader(directory)
    except TraceError as exc:
        if not os.path.isdir(directory) or not any(n.endswith(META_SUFFIX) for n in os.listdir(directory)):
            raise
        reader = None  # a folder of clips only, or a trace that never started: the clips still tell
        s.problems.append(str(exc))
    damaged = set()
    for rec in reader.recordings if reader is not None else []:
        assert reader is not None
        m = rec.manifest
        s.recordings.append(
            {
                "prefix": m.get("prefix"),
                "env_id": m.get("env_id"),
                "complete": m.get("complete"),
                "closed_cleanly": m.get("closed_cleanly"),
                "error": m.get("error"),
                "batches": len(rec.batches),
                "episodes": sum(b["len"] for b in rec.batches),
                "compression": (m.get("settings") or {}).get("compression"),
                "evicted": m.get("evicted"),
                "bytes": sum(b.get("json_bytes", 0) + b.get("bin_bytes", 0) for b in rec.batches),
                "raw_bytes": sum(b.get("array_bytes", b.get("bin_bytes", 0)) + b.get("json_bytes", 0) for b in rec.batches),
            }
        )
        s.bytes += s.recordings[-1]["bytes"]
        s.raw_bytes += s.recordings[-1]["raw_bytes"]
        for entry in rec.batches:
            s.batches += 1
            problems = reader.check_batch(entry)
            s.problems.extend(problems)
            if problems:
                damaged.add(entry["fn"])
        if m.get("error"):
            s.problems.append(f"{m.get('prefix')}: the recorder reported an error: {m['error']}")
    for name in sorted(os.listdir(directory)):
        if name.endswith(META_SUFFIX) and not name.startswith("."):
            try:
                s.clips.append(read_clip_meta(os.path.join(directory, name)))
            except (OSError, ValueError) as exc:
                s.problems.append(f"{name}: unreadable clip metadata ({exc})")
    for clip in s.clips:
        path = clip.get("path")
        if path and not os.path.exists(os.path.join(directory, path)):
            s.problems.append(f"{path}: missing (named by {clip.get('name')}.meta.json)")
    if reader is not None and not damaged:
        for ep in reader:
            s.episodes += 1
            s.steps += ep.length
            s.lengths.append(ep.length)
            s.returns.append(float(np.sum(ep.rewards, dtype=np.float64)))
    return s
