"""Time series for plots: flattened per-step values, downsampled to min/max per pixel column."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MAX_SERIES", "Columns", "downsample"]

MAX_SERIES = 16  # action/observation dimensions offered per plot


def _json_numbers(a: np.ndarray) -> list[float | None]:
    """Floats for JSON: NaN and infinities become null (the plot leaves a gap)."""
    out: list[float | None] = a.astype(np.float64).tolist()
    return [v if v is not None and math.isfinite(v) else None for v in out]


def downsample(values: np.ndarray, width: int) -> dict[str, Any]:
    """``{"x": first step of each column, "min": [...], "max": [...]}``, at most ``width`` columns.

    Up to ``2 * width`` values are sent as they are (min == max); beyond, each
    column holds the min and max of its steps, so a spike of one step still
    shows in a 100,000-step episode.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    n = len(v)
    if n <= 2 * width:
        same = _json_numbers(v)
        return {"x": list(range(n)), "min": same, "max": same, "bucket": 1}
    size = math.ceil(n / width)
    cols = math.ceil(n / size)
    padded = np.full(cols * size, np.nan)
    padded[:n] = np.where(np.isfinite(v), v, np.nan)
    grid = padded.reshape(cols, size)
    empty = np.all(np.isnan(grid), axis=1)
    with np.errstate(all="ignore"):
        lo = np.where(empty, np.nan, np.nanmin(np.where(np.isnan(grid), np.inf, grid), axis=1))
        hi = np.where(empty, np.nan, np.nanmax(np.where(np.isnan(grid), -np.inf, grid), axis=1))
    return {"x": list(range(0, cols * size, size)), "min": _json_numbers(lo), "max": _json_numbers(hi), "bucket": size}


class Columns:
    """The numeric dimensions of a recorded field (Dict/Tuple leaves flattened, text skipped), one value per row.

    Built without copying: dimension ``i`` is read only when asked for, so an
    image observation's 100,800 dimensions cost nothing until one is plotted.
    """

    def __init__(self, value: Any, rows: int) -> None:
        self._leaves: list[tuple[str, np.ndarray]] = []
        self._add(value, rows, "")
        self.count = sum(a.shape[1] for _, a in self._leaves)

    def _add(self, value: Any, rows: int, prefix: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                self._add(v, rows, f"{prefix}{k}.")
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                self._add(v, rows, f"{prefix}{i}.")
        elif not isinstance(value, list):  # a list is a text leaf
            a = np.asarray(value)[:rows]
            width = int(np.prod(a.shape[1:], dtype=np.int64))  # not reshape(n, -1): an episode of 0 steps has 0 rows
            self._leaves.append((prefix.rstrip("."), a.reshape(len(a), width)))

    def _find(self, i: int) -> tuple[str, np.ndarray, int]:
        if not 0 <= i < self.count:
            raise IndexError(f"dimension {i} out of range: there are {self.count}")
        for name, a in self._leaves:
            if i < a.shape[1]:
                return name, a, i
            i -= a.shape[1]
        raise IndexError(i)  # pragma: no cover  (count is the sum of the widths)

    def label(self, i: int) -> str:
        name, a, j = self._find(i)
        if a.shape[1] == 1:
            return name or "value"
        return f"{name}[{j}]"

    def column(self, i: int) -> np.ndarray:
        _, a, j = self._find(i)
        return a[:, j]
