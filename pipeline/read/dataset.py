"""``open_dataset(URL)``: every recorder shipped under a URL, as one dataset, readable while it is written.

Readers find data only through the commit documents (``envrec.formats.shipped``):
a batch is in the dataset once its commit is, complete (its objects were
written before it), and exactly once (commits are written create-only).
``episodes`` is a ``pyarrow.Table`` with one row per episode, its parts
stitched, built from the batches' Parquet indexes; ``episode(recorder,
episode_id)`` fetches that episode's batches into the local cache
(``envrec.read.shipped_cache``) and reads it as ``TraceReader`` does,
bit-exact. ``refresh()`` sees what was committed since.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from ..errors import TraceError
from .batch_files import Episode
from .reader import TraceReader
from .shipped_cache import ShippedCache

__all__ = ["EPISODE_COLUMNS", "Dataset", "open_dataset"]

EPISODE_COLUMNS = ("recorder", "episode_id", "length", "return", "ended_by", "complete", "seed", "first_step", "parts",
                   "batches")


def open_dataset(url: str | os.PathLike, storage_options: dict[str, Any] | None = None,
                 cache_dir: str | None = None) -> Dataset:
    """The recordings shipped under ``url`` (``ship_to`` or ``envrec ship``), as one dataset.

    Args:
        url: the URL recorders shipped to (or one recorder's folder under it): any fsspec URL or a path.
        storage_options: fsspec's options (credentials, endpoint). Default None: the store's environment.
        cache_dir: where fetched batches are kept. Default: ``$ENVREC_CACHE_DIR`` or
            ``~/.cache/envrec/shipped/``, a folder per URL.

    Raises:
        ConfigError: a URL fsspec does not know, with credentials in it, or pyarrow missing.
    """
    return Dataset(os.fspath(url), storage_options, cache_dir)


class Dataset:
    """Recorders shipped under one URL; see ``open_dataset``."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, cache_dir: str | None = None) -> None:
        from ..formats.shipped_index import require_pyarrow

        self._pa = require_pyarrow()
        self.cache = ShippedCache(url, storage_options, cache_dir)
        self._episodes: Any = None
        self.refresh()

    @property
    def url(self) -> str:
        return self.cache.store.display

    def refresh(self) -> None:
        """See what was committed since (new recorders, batches and clips)."""
        self.cache.refresh()
        self._episodes = None

    @property
    def recorders(self) -> list[str]:
        return sorted(self.cache.recorders)

    @property
    def parts(self) -> Any:
        """One row per shipped episode record (whole episodes, and each part of long ones): the indexes, concatenated."""
        from ..formats.shipped_index import index_schema

        rows = [r for rec in self.cache.recorders.values() for key in sorted(rec.index_rows) for r in rec.index_rows[key]]
        return self._pa.Table.from_pylist(rows, schema=index_schema())

    @property
    def episodes(self) -> Any:
        """A ``pyarrow.Table``, one row per episode (parts stitched): ``EPISODE_COLUMNS``. An episode still running
        has ``ended_by`` null and its length so far."""
        if self._episodes is None:
            self._episodes = self._pa.Table.from_pylist(_stitched(self.parts.to_pylist()))
            if not len(self._episodes):
                self._episodes = self._pa.table({c: [] for c in EPISODE_COLUMNS})
        return self._episodes

    @property
    def clips(self) -> Any:
        """A ``pyarrow.Table``, one row per shipped clip: recorder, name, episode_id, video, bytes."""
        rows = [{"recorder": rec.name, "name": (c.get("clip") or {}).get("name"),
                 "episode_id": (c.get("clip") or {}).get("episode_id"), "video": (c.get("clip") or {}).get("path"),
                 "bytes": sum(o["size"] for o in c["objects"])}
                for rec in self.cache.recorders.values() for c in rec.commits.values() if c["kind"] == "clip"]
        return self._pa.Table.from_pylist(rows) if rows else self._pa.table(
            {"recorder": [], "name": [], "episode_id": [], "video": [], "bytes": []})

    def episode(self, recorder: str, episode_id: int) -> Episode:
        """One episode, stitched across its parts, as ``TraceReader`` returns it (its batches fetched if needed).

        Raises:
            KeyError: no such recorder or episode in the dataset (as far as the last refresh saw).
            TraceError: its batches are damaged.
        """
        rec = self.cache.recorders.get(recorder)
        if rec is None or rec.kind != "trace":
            raise KeyError(f"no trace recorder {recorder!r} under {self.url}")
        keys = {key for key, rows in rec.index_rows.items() if any(r["episode_id"] == episode_id for r in rows)}
        if not keys:
            raise KeyError(f"no episode {episode_id} of {recorder!r} under {self.url}")
        folder = self.cache.materialize([recorder], keys)
        with TraceReader(folder, prefix=recorder) as reader:
            for i in range(len(reader)):
                ep = reader[i]
                if ep.episode_id == episode_id:
                    return ep
        raise TraceError(f"episode {episode_id} of {recorder!r} could not be read from {folder}")

    def local(self, recorders: list[str] | None = None) -> str:
        """Fetch every batch and clip (of ``recorders``, default all) into the cache; the cache's folder, which
        every reader of a local folder reads (``TraceReader``, ``envrec verify``...)."""
        return self.cache.materialize(recorders)


def _stitched(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_episode: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_episode[(r["recorder"], r["episode_id"])].append(r)
    out = []
    for (recorder, episode_id), parts in sorted(by_episode.items()):
        parts.sort(key=lambda r: (r["part"], r["first_step"]))
        last = parts[-1]
        returns = [p["return"] for p in parts]
        out.append({
            "recorder": recorder, "episode_id": episode_id, "length": sum(p["length"] for p in parts),
            "return": None if any(r is None for r in returns) else float(sum(returns)),
            "ended_by": None if last["continues"] else last["ended_by"], "complete": bool(last["complete"]),
            "seed": parts[0]["seed"], "first_step": parts[0]["first_step"], "parts": len(parts),
            "batches": sorted({p["batch"] for p in parts}),
        })
    return out
