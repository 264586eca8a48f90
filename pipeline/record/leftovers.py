"""Env side: what a trace's serializers leave behind when none will come again, and its removal.

A failed serializer hands its files over to a successor: the open batch's
temporary ``.bin`` and ``.json``, its spills, the checkpoint, and sometimes
batch files already moved into place that the manifest does not name yet (it
failed inside a commit). Once the stream is broken (``max_restarts``
failures) or closed after a failure, no successor comes: the env process,
the last to know, removes them, so a full disk gets its room back and the
folder holds only what the manifest names.

A recording killed together with its workers (the OOM killer, a scheduler
killing the job's process group) has no env process left to do so. Its
prefix is never recorded into again (its manifest is there), so the next
trace recorder that starts in the folder does it (``remove_dead_recordings``):
for every recording whose manifest is not ``complete`` and whose writer (the
last serializer) and env process, both named in the manifest's ``writer``, are
gone from this host.

Only names of the recording's own making are removed (``PREFIX.*`` and
``.PREFIX.*``, regular files), relative to the folder opened once
(``envrec.formats.ownfolder``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator

from ..errors import ConfigError, RecordError
from ..formats.atomic import process_alive, remove_stale_tmp
from ..formats.ownfolder import OwnFolder, folder_identity
from ..formats.trace_format import (
    MANIFEST_SUFFIX,
    check_prefix,
    checkpoint_names,
    manifest_name,
    read_manifest,
    recording_batches,
    trace_file_names,
    unnamed_batch_files,
)

__all__ = ["remove_checkpoints", "remove_dead_recordings", "remove_leftovers"]

logger = logging.getLogger(__name__)


def _remove_regular(own: OwnFolder, name: str) -> bool:
    """Remove ``name`` when it is a regular file (a symlink, FIFO or folder put there stays)."""
    try:
        return own.is_regular(name) and own.unlink(name)
    except (OSError, RecordError):
        return False


def remove_checkpoints(folder: str, prefix: str, own: OwnFolder | None = None) -> None:
    """Remove the recording's checkpoints (``own``: the recorder's folder opened once, see ``remove_leftovers``)."""
    with _opened(folder, prefix, own) as at:
        if at is not None:
            for name in checkpoint_names(prefix):
                _remove_regular(at, name)


def remove_leftovers(folder: str, prefix: str, finished: tuple[int, ...] = (), own: OwnFolder | None = None) -> list[str]:
    """Remove the serializers' temporary files (of dead writers, or of ``finished`` ones: failed, still
    exiting), their checkpoints and the batch files the manifest does not name; return the names removed.

    ``own``: the recorder's folder opened once (left open): what is removed is removed from it, whatever is
    at ``folder`` by now; the batch files are judged by the manifest at ``folder``, so they are left alone
    when another folder is found there (swapped for a symlink since). Without it, ``folder`` is opened here.
    """
    removed = remove_stale_tmp(folder, prefix, finished, own=own)
    remove_checkpoints(folder, prefix, own)
    with _opened(folder, prefix, own) as at:
        if at is None or (own is not None and not _still_at(own, folder)):
            return removed
        try:
            entries = recording_batches(folder, read_manifest(os.path.join(folder, manifest_name(prefix))))
        except (OSError, ValueError, KeyError):
            return removed  # no manifest to judge by (the serializer never wrote one): batch files stay
        named = {n for e in entries for n in (e["fn"], e.get("bin")) if n}
        removed += [name for name in unnamed_batch_files(folder, prefix, named) if _remove_regular(at, name)]
    return removed


@contextlib.contextmanager
def _opened(folder: str, prefix: str, own: OwnFolder | None) -> Iterator[OwnFolder | None]:
    """``own`` as it is (left open), or ``folder`` opened for the recording's names (None: it cannot be)."""
    if own is not None:
        yield own
        return
    try:
        opened = OwnFolder(folder, trace_file_names(prefix))
    except OSError:
        yield None
        return
    with opened:
        yield opened


def _still_at(own: OwnFolder, folder: str) -> bool:
    """Whether ``folder`` is still the folder ``own`` opened."""
    try:
        return folder_identity(folder) == own.identity
    except OSError:
        return False


def _dead_recording(folder: str, name: str) -> str | None:
    """The prefix of the recording whose head manifest is ``name`` when it was killed with its workers: not
    complete, its writer and env process both gone from this host; None otherwise (or when unsure)."""
    prefix = name[: -len(MANIFEST_SUFFIX)]
    try:
        check_prefix(prefix)
        doc = read_manifest(os.path.join(folder, name))
    except (OSError, ValueError, ConfigError):
        return None
    writer = doc.get("writer")
    if doc.get("prefix") != prefix or doc.get("complete") is not False or not isinstance(writer, dict):
        return None
    pids = [p for p in (writer.get("pid"), writer.get("env_pid")) if isinstance(p, int) and not isinstance(p, bool) and p > 0]
    if writer.get("host") != socket.gethostname() or len(pids) != 2:
        return None  # written elsewhere (a shared folder), or by an envrec that did not say: left alone
    return None if any(process_alive(p) for p in pids) else prefix


def remove_dead_recordings(folder: str, keep: str) -> dict[str, list[str]]:
    """Remove the leftovers (``remove_leftovers``) of every recording in ``folder`` killed with its workers,
    but ``keep``'s (the recorder starting); return the names removed, by prefix. Never raises."""
    removed: dict[str, list[str]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.endswith(MANIFEST_SUFFIX) or name.startswith(".") or name == manifest_name(keep):
            continue
        prefix = _dead_recording(folder, name)
        if prefix is None:
            continue
        try:
            gone = remove_leftovers(folder, prefix)
        except OSError as exc:
            logger.warning("envrec: could not remove what the killed recording %s left: %s", prefix, exc)
            continue
        if gone:
            removed[prefix] = gone
            logger.info("envrec: removed %d file(s) the recording %s left when it was killed with its workers: %s",
                        len(gone), prefix, ", ".join(gone))
    return removed
