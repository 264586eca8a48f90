"""What ``envrec inspect`` reports about a folder of traces.

The folder is read with ``TraceReader(on_damaged="skip")``: a damaged
manifest or batch is listed in ``damaged`` (and in ``problems``) while the
figures count every intact batch. Episodes written in parts count once,
stitched (``TraceReader``): ``parts`` and ``first_steps`` say, per episode,
how many parts it was read from and the step number of its first step kept.
Each recording's ``arrays`` says how its newest batch stores each array
(``"zstd+xor"``, ``"lz4"``, ``"raw"``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..formats.clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from ..formats.inside import open_inside
from .batch_files import BatchFiles
from .reader import Damaged, Recording, TraceError, TraceReader
from .stitch import joins

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
    parts: list[int] = field(default_factory=list)  # per episode: the parts it was stitched from
    first_steps: list[int] = field(default_factory=list)  # per episode: its first step kept (0 unless evicted)
    continuing: list[bool] = field(default_factory=list)  # per episode: it continues (still being recorded)
    problems: list[str] = field(default_factory=list)
    clips: list[ClipMeta] = field(default_factory=list)
    damaged: list[Damaged] = field(default_factory=list)  # manifests and batches left out of the figures

    @property
    def compression_ratio(self) -> float | None:
        return self.raw_bytes / self.bytes if self.bytes else None

    @property
    def ok(self) -> bool:
        return not self.problems


def summarize(directory: str) -> TraceSummary:
    """Read every manifest in ``directory``, check each batch's files, gather episode figures.

    Args:
        directory: the folder to inspect.
    """
    s = TraceSummary(os.path.abspath(directory))
    try:
        reader: TraceReader | None = TraceReader(directory, on_damaged="skip")
    except TraceError as exc:
        if not os.path.isdir(directory) or not any(n.endswith(META_SUFFIX) for n in os.listdir(directory)):
            raise
        reader = None  # a folder of clips only, or a trace that never started: the clips still tell
        s.problems.append(str(exc))
    if reader is not None:
        with reader:
            _add_recordings(s, reader)
            for ep in reader:  # the intact batches; one that fails to decompress joins reader.damaged
                s.episodes += 1
                s.steps += ep.length
                s.lengths.append(ep.length)
                s.returns.append(float(np.sum(ep.rewards, dtype=np.float64)))
                s.parts.append(len(ep.parts))
                s.first_steps.append(ep.first_step)
                s.continuing.append(ep.ended_by is None)
            s.damaged = list(reader.damaged)
            s.problems.extend(f"{d.file}: damaged: {d.reason}" for d in s.damaged)
    _add_clips(s, directory)
    return s


def _array_codecs(files: BatchFiles, rec: Recording) -> dict[str, str]:
    for entry in reversed(rec.batches):  # the newest intact batch says how the recording stores its arrays now
        try:
            return files.array_codecs(entry, rec.manifest)
        except TraceError:
            continue  # damaged: the reader lists it
    return {}


def _add_recordings(s: TraceSummary, reader: TraceReader) -> None:
    files = BatchFiles(reader.directory, verify=False)
    for rec in reader.recordings:
        m = rec.manifest
        s.recordings.append(
            {
                "prefix": m.get("prefix"),
                "env_id": m.get("env_id"),
                "complete": m.get("complete"),
                "closed_cleanly": m.get("closed_cleanly"),
                "error": m.get("error"),
                "batches": len(rec.batches),
                "episodes": sum(b["len"] for b in rec.batches) - sum(joins(rec.batches)),  # parts stitched count once
                "parts": sum(b["len"] for b in rec.batches),  # episode records, parts included
                "compression": (m.get("settings") or {}).get("compression"),
                "arrays": _array_codecs(files, rec),
                "evicted": m.get("evicted"),
                "bytes": sum(b.get("json_bytes", 0) + b.get("bin_bytes", 0) for b in rec.batches),
                "raw_bytes": sum(b.get("array_bytes", b.get("bin_bytes", 0)) + b.get("json_bytes", 0) for b in rec.batches),
            }
        )
        s.bytes += s.recordings[-1]["bytes"]
        s.raw_bytes += s.recordings[-1]["raw_bytes"]
        s.batches += len(rec.batches)
        if m.get("error"):
            s.problems.append(f"{m.get('prefix')}: the recorder reported an error: {m['error']}")
    files.close()


def _add_clips(s: TraceSummary, directory: str) -> None:
    for name in sorted(os.listdir(directory)):
        if name.endswith(META_SUFFIX) and not name.startswith(".") and ".manifest" not in name:
            try:
                s.clips.append(read_clip_meta(os.path.join(directory, name)))
            except (OSError, ValueError) as exc:
                s.problems.append(f"{name}: unreadable clip metadata ({exc})")
    for clip in s.clips:
        path = clip.get("path")
        if not path:
            continue
        try:
            open_inside(directory, path, f"{clip.get('name')}{META_SUFFIX}: path").close()
        except FileNotFoundError:
            s.problems.append(f"{path}: missing (named by {clip.get('name')}{META_SUFFIX})")
        except TraceError as exc:
            s.problems.append(str(exc))
