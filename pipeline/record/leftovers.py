"""Env side: what a trace's serializers leave behind when none will come again, and its removal.

A failed serializer hands its files over to a successor: the open batch's
temporary ``.bin`` and ``.json``, its spills, the checkpoint, and sometimes
batch files already moved into place that the manifest does not name yet (it
failed inside a commit). Once the stream is broken (``max_restarts``
failures) or closed after a failure, no successor comes: the env process,
the last to know, removes them, so a full disk gets its room back and the
folder holds only what the manifest names.
"""

from __future__ import annotations

import contextlib
import os

from ..formats.atomic import remove_stale_tmp
from ..formats.trace_format import checkpoint_names, manifest_name, read_manifest, recording_batches, unnamed_batch_files

__all__ = ["remove_checkpoints", "remove_leftovers"]


def remove_checkpoints(folder: str, prefix: str) -> None:
    for name in checkpoint_names(prefix):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))


def remove_leftovers(folder: str, prefix: str, finished: tuple[int, ...] = ()) -> list[str]:
    """Remove the serializers' temporary files (of dead writers, or of ``finished`` ones: failed, still
    exiting), their checkpoints and the batch files the manifest does not name; return the names removed."""
    removed = remove_stale_tmp(folder, prefix, finished)
    remove_checkpoints(folder, prefix)
    try:
        entries = recording_batches(folder, read_manifest(os.path.join(folder, manifest_name(prefix))))
    except (OSError, ValueError, KeyError):
        return removed  # no manifest to judge by (the serializer never wrote one): batch files stay
    named = {n for e in entries for n in (e["fn"], e.get("bin")) if n}
    for name in unnamed_batch_files(folder, prefix, named):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))
            removed.append(name)
    return removed
