"""Recordings as datasets: Arrow tables, Parquet datasets, Minari datasets (and Ray, in ``envrec.ray``).

Needs ``pyarrow`` (``pip install envrec[arrow]``; Minari export: ``envrec[minari]``).
See ``envrec.export.arrow_table`` for the columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sources import PathsLike, RecordingSource, find_recordings

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from .parquet import ParquetSummary

__all__ = ["PathsLike", "RecordingSource", "find_recordings", "to_arrow", "to_minari", "to_parquet"]


def _require(module: str, extra: str) -> None:
    """ImportError naming the extra that installs ``module``."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        from envrec.extras import install_hint

        raise ImportError(f"{module} is not installed: {install_hint(extra)}") from exc


def to_arrow(paths: PathsLike, verify: bool = True) -> pa.Table:
    """Every committed step of every recording under ``paths`` (folders, globs, or a list) as one table."""
    _require("pyarrow", "arrow")
    import pyarrow as pa

    from .batches import iter_record_batches

    schema, batches = iter_record_batches(paths, verify)
    return pa.Table.from_batches(list(batches), schema=schema)


def to_parquet(paths: PathsLike, out: str, verify: bool = True) -> ParquetSummary:
    """Write a Parquet dataset partitioned by recording (streamed: one trace batch in memory at a time)."""
    _require("pyarrow", "arrow")
    from .parquet import write_parquet

    return write_parquet(paths, out, verify)


def to_minari(paths: PathsLike, dataset_id: str, **metadata: Any) -> Any:
    """A Minari dataset of every episode under ``paths``; ``metadata`` goes to ``create_dataset_from_buffers``."""
    _require("minari", "minari")
    from .minari_dataset import write_minari

    return write_minari(paths, dataset_id, **metadata)
