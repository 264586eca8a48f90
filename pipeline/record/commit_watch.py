"""Telling the env process about work the workers finished: committed batches, for ``on_batch_committed``.

The serializer counts committed batches in a status word; ``CommitWatcher.poll``
compares it with what was last seen (one shared-memory read) and only when
it moved reads the manifest, then calls the callback once per new batch,
oldest first, in the env process. A batch evicted by a disk budget before
the poll saw it is skipped (its files are gone).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..formats.trace_format import BatchEntry, batch_position, position_after, read_manifest, recording_batches

__all__ = ["BatchCallback", "CommitWatcher"]

logger = logging.getLogger(__name__)

BatchCallback = Callable[[str, BatchEntry], None]


class CommitWatcher:
    """Calls ``callback(json_path, entry)`` for each batch committed since the last ``poll``."""

    def __init__(self, directory: str, manifest_path: str, callback: BatchCallback) -> None:
        self.directory = directory
        self.manifest_path = manifest_path
        self.callback = callback
        self._seen_count = 0  # batches committed, as last polled
        self._next = (0, 0)  # the batch_position of the next unseen batch

    def poll(self, committed: int) -> None:
        """``committed``: the serializer's count of committed batches."""
        if committed <= self._seen_count:
            return
        try:
            entries = self._entries_since()
        except (OSError, ValueError) as exc:  # mid-replacement, or a segment evicted under us: the next poll
            logger.debug("envrec: manifest not read for on_batch_committed (%s); trying at the next poll", exc)
            return
        self._seen_count = committed
        for entry in entries:
            self._next = position_after(entry)
            self.callback(os.path.join(self.directory, entry["fn"]), entry)

    def _entries_since(self) -> list[BatchEntry]:
        head = read_manifest(self.manifest_path)
        batches = head.get("batches", [])
        if not batches or batch_position(batches[0]) > self._next:  # new ones went into a closed segment
            batches = recording_batches(self.directory, head)
        return [b for b in batches if batch_position(b) >= self._next]
