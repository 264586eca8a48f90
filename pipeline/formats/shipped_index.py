"""A shipped batch's index: one row per episode record, as Parquet (``envrec.formats.shipped.INDEX_COLUMNS``); pyarrow is
imported only here, when shipping or reading a shipped dataset."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigError
from ..extras import install_hint
from .shipped import INDEX_COLUMNS

__all__ = ["index_parquet", "index_rows", "index_schema", "require_pyarrow"]


def require_pyarrow() -> Any:
    """pyarrow, or a ConfigError saying how to install it (shipping writes Parquet indexes)."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"shipping and open_dataset write and read Parquet indexes: {install_hint('s3')} (for "
                          f"file:// and mounted folders, {install_hint('arrow')})") from None
    return pyarrow


def index_schema() -> Any:
    pa = require_pyarrow()
    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
             "bool": pa.bool_(), "list<string>": pa.list_(pa.string())}
    return pa.schema([(name, types[t]) for name, t in INDEX_COLUMNS])


def index_rows(recorder: str, key: str, records: Iterable[Mapping[str, Any]], objects: list[str],
               object_bytes: int) -> list[dict[str, Any]]:
    """The index rows of a batch's episode records (as ``BatchFiles.load`` returns them)."""
    rows = []
    for raw in records:
        part = raw.get("part") or {}
        ret = raw.get("return")
        seed = raw.get("seed")
        rows.append({
            "recorder": recorder,
            "episode_id": int(raw["episode_id"]),
            "part": int(part.get("index", 0)),
            "first_step": int(part.get("first_step", 0)),
            "length": int(raw["length"]),
            "return": float(ret) if isinstance(ret, (int, float)) and math.isfinite(ret) else None,
            "ended_by": raw.get("ended_by"),
            "complete": bool(raw.get("complete")),
            "continues": bool(part.get("continues", False)),
            "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) and -(2**63) <= seed < 2**63 else None,
            "batch": key,
            "objects": list(objects),
            "object_bytes": int(object_bytes),
        })
    return rows


def index_parquet(rows: list[dict[str, Any]]) -> bytes:
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=index_schema())
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()
