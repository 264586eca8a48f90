"""A shipped run read batch by batch: its recordings listed from the commit documents, each batch's objects fetched
by whoever reads that batch (a Ray read task, on any node).

What is fetched and when:

* ``shipped_recordings(url)`` (once, where the dataset is made) reads what ``open_dataset`` reads: each
  recorder's ``head.json``, ``final.json``, commit documents and Parquet indexes (a few small objects per
  batch, none of the data);
* ``ShippedBatch.rows()`` (in the read task) fetches that batch's data objects through fsspec into a
  temporary folder of the node it runs on, checks them against their commit (sizes, CRC-32s), reads the rows
  as a local batch is read, and removes the folder. A batch whose first record continues a part of the batch
  before is checked to follow it from that batch's index row: nothing else is fetched.

No node needs a shared file system or the local cache (``envrec.read.shipped_cache``): a read task needs only
the store's URL and its ``storage_options`` (the credentials travel with the task, as Ray Data's own file
system arguments do).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from envrec.errors import TraceError
from envrec.formats.shipped import Commit, batch_key
from envrec.formats.store import Store
from envrec.formats.trace_format import BatchEntry
from envrec.read.batch_files import BatchFiles, Part
from envrec.read.shipped_cache import (
    RecorderCommits,
    ShippedCache,
    committed_entries,
    object_problem,
    recorder_manifest,
)
from envrec.read.stitch import chained, joins

from .batches import batch_rows
from .sources import RecordingSource

__all__ = ["ShippedBatch", "shipped_recordings"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShippedBatch:
    """One committed batch of a shipped recording, as a read task needs it: where its objects are, what they must
    be, and the part its first record continues (None when it starts anew)."""

    url: str  # the store's URL, as ``Store`` takes it
    storage_options: dict[str, Any] | None
    source: RecordingSource  # its ``directory`` the recorder's display URL, for messages
    entry: BatchEntry
    commit: Commit
    paths: tuple[str, ...]  # its data objects' paths inside the store's file system, in ``commit["objects"]``'s order
    follows: tuple[Part, int] | None

    def rows(self, schema: pa.Schema, verify: bool = True) -> pa.RecordBatch:
        """The batch's rows (``envrec.export.arrow_table``'s columns), its objects fetched here.

        Raises:
            TraceError: an object is missing or does not match its commit, or the batch is damaged.
        """
        store = Store(self.url, self.storage_options)
        blobs = store.fs.cat(list(self.paths), on_error="return")
        with tempfile.TemporaryDirectory(prefix="envrec-shipped-") as folder:
            for obj, path in zip(self.commit["objects"], self.paths, strict=True):
                local = obj["name"].split("/", 1)[1]
                data = blobs.get(path)
                data = data if isinstance(data, bytes) else None  # fsspec returns a missing object's exception
                problem = object_problem(self.commit, local, obj["size"], data)
                if problem is not None or data is None:
                    raise TraceError(f"{self.source.directory}/{obj['name']}: {problem}")
                with open(os.path.join(folder, local), "wb") as f:
                    f.write(data)
            files = BatchFiles(folder, verify)
            try:
                return batch_rows(replace(self.source, directory=folder), self.entry, schema, files, follows=self.follows)
            finally:
                files.close()


def shipped_recordings(url: str, storage_options: dict[str, Any] | None = None) -> list[list[ShippedBatch]]:
    """Every trace recorder shipped under ``url`` (a run's URL, or one recorder's) with its committed batches, oldest
    first, as far as the commits say now; ``TraceError`` when there is none.

    A recorder whose head was not shipped yet is left out (its batches cannot be read without its spaces).
    """
    cache = ShippedCache(url, storage_options)  # its folder is not written: nothing is materialized here
    cache.refresh()
    store = cache.store
    out = []
    for name in sorted(cache.recorders):
        rec = cache.recorders[name]
        if rec.kind != "trace":
            continue
        entries = chained(committed_entries(rec), f"{store.display}/{name}",
                          broken=lambda why: logger.warning("envrec: %s", why))
        manifest = recorder_manifest(rec, entries)
        if manifest is None or not entries:
            continue
        source = RecordingSource(name, f"{store.display}/{name}", manifest, entries)
        out.append([ShippedBatch(url, storage_options, source, entry, rec.commits[batch_key(entry)],
                                 tuple(store.path(name, o["name"]) for o in rec.commits[batch_key(entry)]["objects"]),
                                 _follows(rec, entries[k - 1]) if joined else None)
                    for k, (entry, joined) in enumerate(zip(entries, joins(entries), strict=True))])
    if not out:
        raise TraceError(f"no trace recording with a committed batch under {store.display}")
    return out


def _follows(rec: RecorderCommits, before: BatchEntry) -> tuple[Part, int]:
    """The last part of batch ``before`` and its episode's id, from its index row."""
    rows = rec.index_rows.get(batch_key(before)) or []
    if not rows:
        raise TraceError(f"{rec.name}: batch {before['fn']} has no index row, yet a part is said to continue from it")
    last = rows[-1]
    part = Part(before["fn"], len(rows) - 1, last["part"], last["first_step"], last["length"], last["continues"])
    return part, last["episode_id"]
