"""Time series for plots: a field's dimensions numbered (``Layout``), values downsampled to min/max per pixel column
as they stream in (``Downsampler``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["MAX_SERIES", "Downsampler", "Layout", "downsample"]

MAX_SERIES = 16  # action/observation dimensions offered per plot


def _json_numbers(a: np.ndarray) -> list[float | None]:
    """Floats for JSON: NaN and infinities become null (the plot leaves a gap)."""
    out: list[float | None] = a.astype(np.float64).tolist()
    return [v if v is not None and math.isfinite(v) else None for v in out]


def downsample(values: np.ndarray, width: int) -> dict[str, Any]:
    """``{"x": first step of each column, "min": [...], "max": [...]}``, at most ``width`` columns (``Downsampler``
    fed all of ``values`` at once)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    d = Downsampler(len(v), width)
    d.add(v)
    return d.result()


class Downsampler:
    """A series of ``n`` values downsampled to at most ``width`` columns, fed a block at a time (``add``), so a
    100,000-step episode is plotted without holding its values.

    Up to ``2 * width`` values are sent as they are (min == max); beyond, each column holds the min and max of its
    steps, so a spike of one step still shows. Values that are not finite leave a gap (null).

    Args:
        n: how many values will come (more are ignored; fewer leave the rest null).
        width: the most columns.
    """

    def __init__(self, n: int, width: int) -> None:
        self.n = max(0, int(n))
        self.at = 0
        self.size = 1 if self.n <= 2 * width else math.ceil(self.n / width)
        cols = math.ceil(self.n / self.size) if self.n else 0
        self._lo = np.full(cols, np.nan)
        self._hi = self._lo if self.size == 1 else np.full(cols, np.nan)

    def add(self, values: Any) -> None:
        """The next values of the series, in order."""
        v = np.asarray(values, dtype=np.float64).reshape(-1)[: self.n - self.at]
        if not len(v):
            return
        v = np.where(np.isfinite(v), v, np.nan)
        if self.size == 1:
            self._lo[self.at:self.at + len(v)] = v
        else:
            col = (self.at + np.arange(len(v))) // self.size
            starts = np.concatenate(([0], np.flatnonzero(np.diff(col)) + 1))
            cols = col[starts]
            with np.errstate(all="ignore"):
                self._lo[cols] = np.fmin(self._lo[cols], np.fmin.reduceat(v, starts))
                self._hi[cols] = np.fmax(self._hi[cols], np.fmax.reduceat(v, starts))
        self.at += len(v)

    def result(self) -> dict[str, Any]:
        """``{"x": first value of each column, "min": [...], "max": [...], "bucket": values per column}``."""
        lo = _json_numbers(self._lo)
        hi = lo if self.size == 1 else _json_numbers(self._hi)
        return {"x": list(range(0, len(lo) * self.size, self.size)), "min": lo, "max": hi, "bucket": self.size}


class Layout:
    """The numeric dimensions of a recorded field (Dict/Tuple leaves flattened in order, text leaves skipped),
    numbered as the plots number them, from the leaves' shapes alone: nothing is read.

    Args:
        value: the field: an array, or a dict/tuple of them (lists are text leaves); any leaf ``shape_of`` knows.
        shape_of: a leaf's shape, rows first (``BatchFiles.leaf_shape``).
    """

    def __init__(self, value: Any, shape_of: Callable[[Any], tuple[int, ...]] = np.shape) -> None:
        self.names: list[str] = []
        self.widths: list[int] = []
        for name, leaf in _leaves(value, ""):
            self.names.append(name)
            self.widths.append(int(np.prod(shape_of(leaf)[1:], dtype=np.int64)))
        self.count = sum(self.widths)

    @staticmethod
    def leaves(value: Any) -> list[Any]:
        """The numeric leaves of a field, in the order the dimensions are numbered."""
        return [leaf for _, leaf in _leaves(value, "")]

    def find(self, i: int) -> tuple[int, int]:
        """(leaf, column within it) of dimension ``i``; IndexError when there is none."""
        if not 0 <= i < self.count:
            raise IndexError(f"dimension {i} out of range: there are {self.count}")
        for k, width in enumerate(self.widths):
            if i < width:
                return k, i
            i -= width
        raise IndexError(i)  # pragma: no cover  (count is the sum of the widths)

    def label(self, i: int) -> str:
        k, j = self.find(i)
        if self.widths[k] == 1:
            return self.names[k] or "value"
        return f"{self.names[k]}[{j}]"


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}{i}.")
    elif not isinstance(value, list) and value is not None:  # a list is a text leaf
        yield prefix.rstrip("."), value
