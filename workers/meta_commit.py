"""The encoder's commit point: a clip's ``.meta.json`` written, a one-off fault survived.

A failed write (EIO, ENOSPC: the disk may be fine a moment later) is tried
once more, the first error kept in the metadata (``meta_retried``), so a
one-off fault costs nothing. A disk that is still full on the second try
gets room from the clip's video: it is removed and the metadata says so
(``partial_removed``), since metadata that explains is worth more than a
video nobody can find. Any other failure is the encoder's: it raises.
"""

from __future__ import annotations

import errno
import logging

from envrec.formats.clip_meta import META_SUFFIX, ClipMeta, write_clip_meta
from envrec.formats.ownfolder import OwnFolder

__all__ = ["commit_clip_meta"]

logger = logging.getLogger(__name__)


def commit_clip_meta(folder: OwnFolder, name: str, meta: ClipMeta, video: str) -> None:
    """Write clip ``name``'s metadata ``meta`` in ``folder`` (``video``: the clip's video file name, which
    ``meta["path"]`` names or not)."""
    try:
        write_clip_meta(folder, name, meta)
        return
    except OSError as exc:
        logger.warning("envrec: writing %s failed (%s); trying once more", name + META_SUFFIX, exc)
        meta["meta_retried"] = f"{type(exc).__name__}: {exc}"
    try:
        write_clip_meta(folder, name, meta)
    except OSError as exc:
        if exc.errno != errno.ENOSPC or meta["path"] is None:
            raise
        folder.unlink(video)  # the disk is full: the clip's video gives way to the metadata saying why
        meta["path"], meta["broken"] = None, True
        meta["reason"] = meta["reason"] or f"disk full: {exc}"
        meta["partial_removed"] = "the disk was full: the partial video was removed to make room for this metadata"
        write_clip_meta(folder, name, meta)
