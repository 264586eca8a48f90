"""A ``ray.data.Datasource`` of traces: one read task per committed batch, the rows of ``envrec.export``.

Local folders are read where they lie (a read task opens the batch's files: the folders must be on a file
system the task's node sees). A shipped run's URL is listed from its commit documents and each read task
fetches its own batch's objects from the store (``envrec.export.shipped_source``): the tasks run on any node,
with no shared file system and no local cache.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

from envrec.formats.trace_format import BatchEntry
from envrec.read.shipped_cache import is_shipped
from envrec.read.stitch import joins

from .batches import batch_rows, common_schema
from .shipped_source import ShippedBatch, shipped_recordings
from .sources import PathsLike, RecordingSource, find_recordings

__all__ = ["TraceDatasource"]

ROW_OVERHEAD = 64  # bytes per row besides its arrays: ids, reward, flags, info text


def _estimate(entry: BatchEntry) -> int | None:
    arrays = entry.get("array_bytes")
    steps = entry.get("steps")
    if arrays is None or steps is None:
        return None
    return 2 * int(arrays) + ROW_OVERHEAD * int(steps)  # observations appear twice: observation, next_observation


class TraceDatasource(Datasource):
    """The committed batches of every recording under ``paths``, listed when the datasource is made.

    Args:
        paths: folders (searched recursively), globs, a list of them, or one shipped run's URL (``ship_to``; a
            recorder's URL under it): its batches are those committed when the datasource is made.
        verify: check each batch's CRC-32 when it is read.
        storage_options: fsspec's options for a URL (credentials, endpoint). Default None: the store's environment.
    """

    def __init__(self, paths: PathsLike, verify: bool = True, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._shipped: list[list[ShippedBatch]] = []
        if isinstance(paths, str | os.PathLike) and is_shipped(paths):
            self._shipped = shipped_recordings(os.fspath(paths), storage_options)
            self._sources = [batches[0].source for batches in self._shipped]
        else:
            self._sources = find_recordings(paths, verify=verify)
        self._schema = common_schema(self._sources)
        self._verify = verify

    def get_name(self) -> str:
        return "EnvrecTraces"

    def estimate_inmemory_data_size(self) -> int | None:
        sizes = [_estimate(e) for s in self._sources for e in s.batches]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        """One task per committed batch (``parallelism`` is a hint a batch-sized task already meets)."""
        if self._shipped:
            return [ReadTask(_shipped_reader(b, self._schema, self._verify), _metadata(b.entry, b.paths), schema=self._schema,
                             per_task_row_limit=per_task_row_limit) for batches in self._shipped for b in batches]
        tasks = []
        for src in self._sources:
            for k, (entry, joined) in enumerate(zip(src.batches, joins(src.batches), strict=True)):
                meta = _metadata(entry, (f"{src.directory}/{entry['fn']}", f"{src.directory}/{entry['bin']}"))
                continued = src.batches[k - 1] if joined else None  # checked to be continued right (batch_rows)
                tasks.append(ReadTask(_reader(src, entry, self._schema, continued), meta, schema=self._schema,
                                      per_task_row_limit=per_task_row_limit))
        return tasks


def _metadata(entry: BatchEntry, files: tuple[str, ...]) -> BlockMetadata:
    return BlockMetadata(num_rows=entry.get("steps"), size_bytes=_estimate(entry), input_files=files, exec_stats=None)


def _shipped_reader(batch: ShippedBatch, schema: pa.Schema, verify: bool):
    def read() -> list[pa.Table]:
        return [pa.Table.from_batches([batch.rows(schema, verify)], schema=schema)]

    return read


def _reader(src: RecordingSource, entry: BatchEntry, schema: pa.Schema, continued: BatchEntry | None):
    def read() -> list[pa.Table]:
        return [pa.Table.from_batches([batch_rows(src, entry, schema, continued=continued)], schema=schema)]

    return read
