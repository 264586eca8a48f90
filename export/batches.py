"""Streaming a set of recordings as Arrow record batches, one per committed trace batch."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from envrec.formats.trace_format import BatchEntry
from envrec.read.batch_files import BatchFiles, Part, TraceError
from envrec.read.stitch import check_part_follows, joins

from .arrow_table import episodes_to_batch, step_schema
from .sources import PathsLike, RecordingSource, find_recordings

__all__ = ["batch_rows", "common_schema", "iter_record_batches"]


def common_schema(sources: list[RecordingSource]) -> pa.Schema:
    """The row schema every recording shares; ``TraceError`` naming two recordings whose spaces differ."""
    first = sources[0]
    schema = _schema_of(first)
    for src in sources[1:]:
        other = _schema_of(src)
        if not other.equals(schema):
            raise TraceError(
                f"recordings {first.name} and {src.name} have different spaces "
                f"(observation {schema.field('observation').type} vs {other.field('observation').type}, "
                f"action {schema.field('action').type} vs {other.field('action').type}): export them separately"
            )
    return schema


def _schema_of(src: RecordingSource) -> pa.Schema:
    missing = [k for k in ("observation_space", "action_space") if k not in src.manifest]
    if missing:
        raise TraceError(f"{src.name}: its manifest has no {' or '.join(missing)} (not written by envrec): "
                         "rows need the spaces; read it with TraceReader")
    return step_schema(src.manifest)


def batch_rows(src: RecordingSource, entry: BatchEntry, schema: pa.Schema, files: BatchFiles | None = None,
               continued: BatchEntry | None = None, follows: tuple[Part, int] | None = None) -> pa.RecordBatch:
    """The rows of one committed batch of ``src``.

    Args:
        src: the recording.
        entry: one of its (chained) batch entries.
        schema: the rows' schema (``common_schema``).
        files: the recording's open ``BatchFiles`` (default: opened and closed here).
        continued: the entry before ``entry`` when ``entry``'s first record continues its last part
            (``stitch.joins``): that part is read (without its arrays) and the first record checked to follow
            it (``stitch.check_part_follows``), as ``TraceReader`` checks it.
        follows: instead of ``continued``, that part and its episode's id when they are known without reading the
            batch before (a shipped batch's index: ``envrec.export.shipped_source``).
    """
    own = files is None
    files = files or BatchFiles(src.directory)
    try:
        episodes = files.episodes(src.manifest, entry)
        if continued is not None and episodes:
            follows = files.last_part(continued, src.manifest)
        if follows is not None and episodes:
            check_part_follows(*follows, episodes[0].parts[0], episodes[0].episode_id)
        return _to_batch(src, entry, episodes, schema)
    finally:
        if own:
            files.close()


def _to_batch(src: RecordingSource, entry: BatchEntry, episodes: list, schema: pa.Schema) -> pa.RecordBatch:
    """``episodes_to_batch``, a ``MemoryError`` (Python's or Arrow's) a ``TraceError`` naming the batch."""
    try:
        return episodes_to_batch(src.name, src.manifest, episodes, schema)
    except MemoryError:  # pyarrow's ArrowMemoryError is one
        raise TraceError(f"{src.name}: batch {entry['fn']}: its rows are too large for the memory left") from None


def iter_record_batches(paths: PathsLike, verify: bool = True) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The shared schema and a lazy stream of every committed batch's rows (one batch in memory at a time).

    Each recording's batches are read along their chain (``find_recordings``: ``stitch.chained``), and a part
    continued from the batch before is checked to follow it, as ``TraceReader`` does: ``TraceError`` otherwise.
    """
    sources = find_recordings(paths, verify=verify)
    schema = common_schema(sources)

    def stream() -> Iterator[pa.RecordBatch]:
        for src in sources:
            files = BatchFiles(src.directory, verify)
            before: tuple[Part, int] | None = None  # the last part read, and its episode's id
            try:
                for entry, joined in zip(src.batches, joins(src.batches), strict=True):
                    episodes = files.episodes(src.manifest, entry)
                    if joined and before is not None and episodes:
                        check_part_follows(*before, episodes[0].parts[0], episodes[0].episode_id)
                    before = (episodes[-1].parts[-1], episodes[-1].episode_id) if episodes else None
                    batch = _to_batch(src, entry, episodes, schema)
                    del episodes
                    files.close()  # the batch's arrays now live in Arrow buffers
                    if batch.num_rows:
                        yield batch
            finally:
                files.close()

    return schema, stream()
