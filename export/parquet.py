"""``envrec export --parquet``: a Parquet dataset, one hive partition per recording.

Written with ``pyarrow.dataset.write_dataset`` from a stream of record batches
(one trace batch in memory at a time) into a sibling folder that is renamed
to ``out`` only when everything is written: an interrupted export leaves no
half dataset behind, and an existing ``out`` is never overwritten. Recordings
of no step (every episode reset and closed at once) make a dataset of one
file with the schema and no row.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from envrec.errors import ConfigError

from .batches import iter_record_batches
from .sources import PathsLike

__all__ = ["ParquetSummary", "write_parquet"]


@dataclass(frozen=True)
class ParquetSummary:
    """What an export wrote."""

    path: str
    rows: int
    files: int
    bytes: int


def write_parquet(paths: PathsLike, out: str | os.PathLike, verify: bool = True) -> ParquetSummary:
    """Write every committed step under ``paths`` to a new Parquet dataset at ``out``."""
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out):
        raise ConfigError(f"{out} exists: export into a new folder (nothing is overwritten)")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise ConfigError(f"{parent} does not exist: create it first")
    schema, batches = iter_record_batches(paths, verify)
    partial = f"{out}.partial-{os.getpid()}"
    rows = 0
    failed: list[Exception] = []

    def counted():
        """The batches, counted. Arrow reads them in a thread of its own: an error of the recording (a damaged
        batch) ends the stream here and is raised again in this thread once ``write_dataset`` returned, so that
        arrow never holds the exception: released by its thread while the interpreter exits, it aborted the
        process (``terminate called without an active exception``)."""
        nonlocal rows
        try:
            for batch in batches:
                rows += batch.num_rows
                yield batch
        except Exception as exc:  # noqa: BLE001  (raised again below, in the caller's thread)
            failed.append(exc)

    try:
        ds.write_dataset(
            counted(),
            partial,
            schema=schema,
            format="parquet",
            partitioning=ds.partitioning(pa.schema([("recording", pa.string())]), flavor="hive"),
            basename_template="part-{i}.parquet",
            existing_data_behavior="error",
        )
        if failed:
            raise failed[0]
        if not rows:  # every episode has 0 steps: write_dataset wrote no folder; a dataset of no rows has its schema
            os.makedirs(partial, exist_ok=True)
            pq.write_table(schema.empty_table(), os.path.join(partial, "part-0.parquet"))
        os.rename(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    written = [os.path.join(d, n) for d, _, names in os.walk(out) for n in names]
    return ParquetSummary(out, rows, len(written), sum(os.path.getsize(p) for p in written))
