"""Finding the recordings an export reads: folders, globs or lists of them, searched recursively.

Every recording found gets a *name*, the value of the ``recording`` column:
the path of its manifest, without ``.manifest.json``, relative to the folder
the inputs share (for one folder, just the recording's prefix). Names are
stable for the same inputs and unique even when per-node or per-runner
folders hold recordings with the same prefix.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass

from envrec.formats.trace_format import MANIFEST_SUFFIX, BatchEntry, Manifest
from envrec.read.reader import Damaged, TraceError, TraceReader

__all__ = ["PathsLike", "RecordingSource", "find_recordings"]

PathsLike = str | os.PathLike | Iterable[str | os.PathLike]


@dataclass(frozen=True)
class RecordingSource:
    """One recording to export: its name, folder, head manifest and committed batches (oldest first)."""

    name: str
    directory: str
    manifest: Manifest
    batches: list[BatchEntry]

    @property
    def steps(self) -> int:
        return sum(int(b.get("steps", 0)) for b in self.batches)


def _inputs(paths: PathsLike) -> list[str]:
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not items:
        raise TraceError("no paths given: pass a folder, a glob or a list of them")
    folders: list[str] = []
    for item in items:
        path = os.fspath(item)
        matches = sorted(glob.glob(path, recursive=True)) if glob.has_magic(path) else [path]
        if not matches:
            raise TraceError(f"nothing matches {path!r}")
        for match in matches:
            if not os.path.isdir(match):
                why = "does not exist" if not os.path.exists(match) else "is not a folder"
                raise TraceError(f"{match} {why}: pass folders that hold recordings")
            folders.append(os.path.abspath(match))
    return folders


def _folders_with_manifests(root: str) -> list[str]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        if any(n.endswith(MANIFEST_SUFFIX) for n in names):
            found.append(folder)
    return found


def find_recordings(paths: PathsLike, verify: bool = True, damaged: list[Damaged] | None = None) -> list[RecordingSource]:
    """Every recording under ``paths`` with the batches its manifests name; ``TraceError`` when there is none.

    Args:
        paths: folders (searched recursively), globs, or a list of them.
        verify: check each batch's CRC-32 when it is read.
        damaged: when given, folders are read with ``TraceReader(on_damaged="skip")``: a manifest or batch
            file that cannot be read (or a folder with no readable manifest) is appended to it, its path
            relative to the inputs' common folder, and left out instead of raising ``TraceError``.
    """
    roots = _inputs(paths)
    common = os.path.commonpath(roots) if len(roots) > 1 else roots[0]
    seen: set[str] = set()
    sources: list[RecordingSource] = []
    for root in roots:
        for folder in _folders_with_manifests(root):
            if folder in seen:
                continue  # a folder given twice, or inside another given folder
            seen.add(folder)
            try:
                reader = TraceReader(folder, verify=verify, on_damaged="raise" if damaged is None else "skip")
            except TraceError as exc:
                if damaged is None:
                    raise
                damaged.append(Damaged(os.path.relpath(folder, common), str(exc)))
                continue
            if damaged is not None:
                damaged.extend(Damaged(os.path.relpath(os.path.join(folder, d.file), common), d.reason) for d in reader.damaged)
            with reader:
                for rec in reader.recordings:
                    stem = os.path.relpath(rec.path, common)[: -len(MANIFEST_SUFFIX)]
                    sources.append(RecordingSource(stem, folder, rec.manifest, rec.batches))
    if not sources:
        raise TraceError(f"no recording (*{MANIFEST_SUFFIX}) under {', '.join(roots)}")
    return sources
