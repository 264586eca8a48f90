"""The first difference between what was recorded and what a replay gave, field by field.

``compare(step, atol=..., infos=...)`` looks at one ``ReplayStep`` (``envrec.replay.engine``): the
observation (any tree of dicts, tuples and arrays), then the reward, ``terminated``, ``truncated``
and, when asked, the info. Numbers are equal when ``|recorded - replayed| <= atol`` (NaN equals NaN,
``atol=0``: bit-for-bit values); booleans, strings and other values must be equal. The result names the
field, where in it (``"[2]"``, ``"['pos'][1]"``), both values and the largest difference in that array.
Recorded info values envrec could not store (``Unrepresentable``) are not compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats.infos import Unrepresentable

__all__ = ["UNKNOWN", "Difference", "first_difference", "jsonable"]

UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "UNKNOWN"})()  # a replayed value not known (not compared)
_MISSING = "<missing>"
_NUMERIC = "biufc"


@dataclass(frozen=True)
class Difference:
    """Where a replay first differs from its recording.

    Attributes:
        step: the episode step (0: the reset observation; s: after the s-th action).
        field: ``"observations"``, ``"rewards"``, ``"terminated"``, ``"truncated"`` or ``"infos"``.
        where: the index inside the field (``"[2]"``, ``"['pos'][1]"``), None for a scalar field.
        recorded, replayed: the values there, JSON-able (non-finite floats as ``"nan"``, ``"inf"``, ``"-inf"``;
            a shape mismatch as ``"shape (4,)"``).
        difference: the largest finite absolute difference over the field's array (where it differs), None when
            not numeric or no difference there is finite.
    """

    step: int
    field: str
    where: str | None
    recorded: Any
    replayed: Any
    difference: float | None


def first_difference(recorded: Any, replayed: Any, atol: float = 0.0) -> tuple[str, Any, Any, float | None] | None:
    """``(where, recorded value, replayed value, largest difference)`` of the first mismatch, None when equal.

    Args:
        recorded: the recorded value (a tree of dicts, tuples/lists, arrays and scalars).
        replayed: the replayed value, the same shape of tree.
        atol: the absolute tolerance for numbers.
    """
    return _diff(recorded, replayed, atol, "")


def _diff(rec: Any, rep: Any, atol: float, path: str) -> tuple[str, Any, Any, float | None] | None:
    if isinstance(rec, Unrepresentable) or rep is UNKNOWN:
        return None
    if isinstance(rec, Mapping) or isinstance(rep, Mapping):
        return _diff_mapping(rec, rep, atol, path)
    if isinstance(rec, (tuple, list)) or isinstance(rep, (tuple, list)):
        if not isinstance(rec, (tuple, list)) or not isinstance(rep, (tuple, list)) or len(rec) != len(rep):
            return path, _summary(rec), _summary(rep), None
        for i, (a, b) in enumerate(zip(rec, rep, strict=True)):
            found = _diff(a, b, atol, f"{path}[{i}]")
            if found:
                return found
        return None
    return _diff_array(rec, rep, atol, path)


def _diff_mapping(rec: Any, rep: Any, atol: float, path: str) -> tuple[str, Any, Any, float | None] | None:
    if not isinstance(rec, Mapping) or not isinstance(rep, Mapping):
        return path, _summary(rec), _summary(rep), None
    for key in [*rec, *(k for k in rep if k not in rec)]:
        where = f"{path}[{key!r}]"
        if key not in rep or key not in rec:
            return where, jsonable(rec.get(key, _MISSING)), jsonable(rep.get(key, _MISSING)), None
        found = _diff(rec[key], rep[key], atol, where)
        if found:
            return found
    return None


def _diff_array(rec: Any, rep: Any, atol: float, path: str) -> tuple[str, Any, Any, float | None] | None:
    try:
        a, b = np.asarray(rec), np.asarray(rep)
    except Exception:  # noqa: BLE001  (a value numpy cannot hold: compare it as it is)
        return None if _equal(rec, rep) else (path, _summary(rec), _summary(rep), None)
    if a.shape != b.shape:
        return path, f"shape {a.shape}", f"shape {b.shape}", None
    numeric = a.dtype.kind in _NUMERIC and b.dtype.kind in _NUMERIC
    if numeric:
        mismatch = _numeric_mismatch(a, b, atol)
    else:
        mismatch = np.asarray(np.vectorize(lambda x, y: not _equal(x, y), otypes=[bool])(a, b))
    if not mismatch.any():
        return None
    at = tuple(int(i) for i in np.argwhere(mismatch)[0])
    where = path + (f"[{', '.join(map(str, at))}]" if at else "")
    largest = None
    if numeric:  # the largest finite gap (NaN against a number, or infinities, have none)
        gaps = _gaps(a[mismatch], b[mismatch])
        finite = gaps[np.isfinite(gaps)]
        largest = float(finite.max()) if finite.size else None
    return where, jsonable(a[at] if at else a[()]), jsonable(b[at] if at else b[()]), largest


def _numeric_mismatch(a: np.ndarray, b: np.ndarray, atol: float) -> np.ndarray:
    """Where ``a`` and ``b`` differ by more than ``atol`` (NaN equals NaN; integers exactly when ``atol`` is 0)."""
    if a.dtype.kind in "biu" and b.dtype.kind in "biu" and atol == 0:  # exact, also beyond float64's integers
        return np.asarray(a != b)
    complex_ = a.dtype.kind == "c" or b.dtype.kind == "c"
    x = a.astype(np.complex128 if complex_ else np.float64)
    y = b.astype(np.complex128 if complex_ else np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (x == y) | (np.isnan(x) & np.isnan(y))  # equal infinities have a NaN gap
        return np.asarray(~same & ~(np.abs(x - y) <= atol))


def _gaps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|a - b|`` as float64, integers subtracted exactly first (only the values that differ come here)."""
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        return np.array([float(abs(int(x) - int(y))) for x, y in zip(a.tolist(), b.tolist(), strict=True)], np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(a.astype(np.complex128) - b.astype(np.complex128)).astype(np.float64)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (== of arbitrary objects may raise or give an array)
        return False


def _summary(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, Mapping):
        return f"dict of {len(value)}"
    return jsonable(value)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON: numpy scalars as numbers, non-finite floats as ``"nan"``/``"inf"``/``"-inf"``,
    small arrays as lists, anything else as a bounded repr.

    Args:
        value: a recorded or replayed value.
    """
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()] if value.size <= 16 else f"array {value.shape} {value.dtype}"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value if not isinstance(value, str) or len(value) <= 200 else value[:200] + "..."
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, (list, tuple)) and len(value) <= 16:
        return [jsonable(v) for v in value]
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."
