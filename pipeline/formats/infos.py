"""Step infos: how they cross to the worker and how they are stored as JSON.

The env side checks an info before it pickles it (an empty one costs
nothing). One walk over its dicts, lists and tuples decides: an info made
only of plain values (str, numbers, bools, None, bytes, numpy scalars and
arrays) nested at most ``MAX_INFO_DEPTH`` levels, with no container inside
itself, goes to the C pickler as it is. Anything else is copied first with
what cannot travel replaced by an ``Unrepresentable`` (its type name and a
bounded repr): a container nested deeper than ``MAX_INFO_DEPTH`` or holding
itself, an object the worker could not import (user classes, functions), and
one that cannot be pickled at all (generators, open files, locks). So the
worker never has to import user code, never recurses without bound, and a
strange info never breaks a step.

In the trace, infos are strict JSON (no bare NaN). The JSON-safe part is
stored as is; everything else is a tagged object::

    {"__type": "float", "bits": "7ff8000000000000"}          non-finite float (exact bits)
    {"__type": "numpy", "dtype": "<f4", "shape": [2], "b64": "...", "scalar": false}
    {"__type": "tuple", "items": [...]}
    {"__type": "dict", "items": [[key, value], ...]}         non-str keys, or a "__type" key
    {"__type": "bytes", "b64": "..."}
    {"__type": "repr", "type": "module.Class", "repr": "..."}  anything else (not decodable)

``decode_json`` turns the tagged objects back into floats, numpy scalars and
arrays, tuples, dicts and bytes; ``repr`` objects come back as
``Unrepresentable``.
"""

from __future__ import annotations

import base64
import io
import logging
import math
import pickle
import reprlib
import struct
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MAX_INFO_DEPTH", "Unrepresentable", "decode_json", "encode_json", "pack_info", "unpack_info"]

logger = logging.getLogger(__name__)

_EMPTY = b""
MAX_INFO_DEPTH = 64  # containers nested deeper are stored as their repr (far below the worker's recursion limit)
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxstring, _SHORT_REPR.maxother = 3, 200, 200


@dataclass(frozen=True)
class Unrepresentable:
    """Stands for an info value envrec could not store: what ``TraceReader`` returns in its place.

    An object the worker could not import (a user class, a function), one that
    cannot be pickled (a generator, an open file, a lock), or a container
    nested too deep or holding itself is recorded as its type and repr
    instead; the rest of the info is recorded as usual.

    Args:
        type: the value's type, ``"module.QualifiedName"``.
        repr: its repr (bounded in length for values the env side replaced; after
            ``<why>`` when it says why it was replaced).
    """

    type: str
    repr: str


def _unrepresentable(type_name: str, text: str) -> Unrepresentable:
    return Unrepresentable(type_name, text)


_PLAIN = (dict, list, tuple, str, bytes, int, float, bool, type(None), np.ndarray, np.generic, Unrepresentable)


# Modules whose objects (and classes and functions, pickled by reference) the worker can always load.
_LOADABLE_MODULES = frozenset({"builtins", "numpy", "copyreg", "envrec", "collections", "datetime", "_codecs"})


def _module_of(obj) -> str:
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return getattr(obj, "__module__", None) or ""
    return type(obj).__module__ or ""


class _InfoPickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, _PLAIN) or _module_of(obj).split(".", 1)[0] in _LOADABLE_MODULES:  # object arrays too: their items come back through this pickler
            return NotImplemented
        u = _stand_in(obj, full=True)
        return _unrepresentable, (u.type, u.repr)


# Exact types that pickle as they are and that the worker always loads: builtins' and numpy's scalars.
_LEAVES = frozenset(
    {str, int, float, bool, type(None), bytes}
    | {t for t in np.sctypeDict.values() if t.__module__ == "numpy" and t not in (np.object_, np.void)}
)


_COPY, _FOREIGN, _PLAIN_ONLY = 0, 1, 2  # what _plain finds, worst first


def _plain(obj: Any, depth: int, path: set[int]) -> int:
    """``_PLAIN_ONLY`` if ``obj`` may go to the C pickler as it is, ``_FOREIGN`` if to the info pickler as it
    is (it holds objects the worker could not import, which that pickler stands in for), ``_COPY`` if it
    needs ``_sanitized`` first (see the module docstring). Runs for every info: loops, not generators, and
    a leaf's type checked before any call."""
    t = type(obj)
    if t in _LEAVES:
        return _PLAIN_ONLY
    if t is dict or t is list or t is tuple or (t is np.ndarray and obj.dtype == object):
        if depth >= MAX_INFO_DEPTH or id(obj) in path:
            return _COPY
        path.add(id(obj))
        found = _PLAIN_ONLY
        if t is dict:
            for k, v in obj.items():
                if type(k) not in _LEAVES:
                    return _COPY  # the answer is _COPY all the way up: ``path`` no longer matters
                if type(v) not in _LEAVES and (found := min(found, _plain(v, depth + 1, path))) == _COPY:
                    return _COPY
        else:  # an object array (a vector env's final_obs) too: its items count as nested values
            for v in obj.flat if t is np.ndarray else obj:
                if type(v) not in _LEAVES and (found := min(found, _plain(v, depth + 1, path))) == _COPY:
                    return _COPY
        path.discard(id(obj))
        return found
    if t is np.ndarray:
        return _COPY if obj.dtype.hasobject else _PLAIN_ONLY  # (structured arrays with objects: copied)
    if not isinstance(obj, _PLAIN) and _module_of(obj).split(".", 1)[0] not in _LOADABLE_MODULES:
        return _FOREIGN
    return _COPY


def _stand_in(obj: Any, why: str = "", full: bool = False) -> Unrepresentable:
    """What is stored for a value that cannot travel: its type and its repr (``full``: whole, as the
    pickler keeps an object of the user's; else bounded), after ``why`` when it has one."""
    t = type(obj)
    try:
        text = repr(obj) if full else _SHORT_REPR.repr(obj)
    except Exception as exc:  # noqa: BLE001  (a broken __repr__ must not break the step)
        text = f"<repr failed: {exc!r}>"
    return Unrepresentable(f"{t.__module__}.{t.__qualname__}", f"<{why}> {text}" if why else text)


def _sanitized(obj: Any, depth: int, path: set[int]) -> Any:
    """A copy of ``obj`` that ``_InfoPickler`` can always pickle and the worker always encode."""
    t = type(obj)
    if t in _LEAVES or (id(obj) not in path and _plain(obj, depth, set()) != _COPY):
        return obj
    if isinstance(obj, (dict, list, tuple)) and (t in (dict, list, tuple) or t.__module__ == "collections"):
        if id(obj) in path:
            return _stand_in(obj, "a container that holds itself")
        if depth >= MAX_INFO_DEPTH:
            return _stand_in(obj, f"nested deeper than {MAX_INFO_DEPTH} levels")
        path.add(id(obj))
        if isinstance(obj, dict):
            out: Any = {_sanitized(k, depth + 1, path): _sanitized(v, depth + 1, path) for k, v in obj.items()}
        else:
            items = [_sanitized(v, depth + 1, path) for v in obj]
            out = tuple(items) if isinstance(obj, tuple) else items
        path.discard(id(obj))
        return out
    if t is np.ndarray and obj.dtype == object and depth < MAX_INFO_DEPTH and id(obj) not in path:
        path.add(id(obj))
        out = np.empty(obj.shape, dtype=object)
        for i, v in enumerate(obj.flat):
            out.flat[i] = _sanitized(v, depth + 1, path)
        path.discard(id(obj))
        return out
    if isinstance(obj, np.ndarray):  # structured with objects, too deep, or inside itself: its repr
        return _stand_in(obj)
    if _module_of(obj).split(".", 1)[0] not in _LOADABLE_MODULES:
        return _stand_in(obj, full=True)  # what the pickler would make of it
    try:  # anything else the pickler takes (a set, a datetime) or turns into an Unrepresentable itself
        _InfoPickler(io.BytesIO(), protocol=5).dump(obj)
    except Exception:  # noqa: BLE001  (RecursionError too: it cannot travel, whatever the reason)
        return _stand_in(obj)
    return obj


def pack_info(info: dict) -> bytes:
    """Bytes for the ring; b"" for an empty info. Never raises for any info (see the module docstring)."""
    if not info:
        return _EMPTY
    try:
        found = _plain(info, 0, set())
        if found == _PLAIN_ONLY:
            return pickle.dumps(info, protocol=5)
        f = io.BytesIO()
        _InfoPickler(f, protocol=5).dump(info if found == _FOREIGN else _sanitized(info, 0, set()))
        return f.getvalue()
    except Exception as exc:
        logger.debug("envrec: an info could not be stored", exc_info=True)
        return pickle.dumps({"__envrec_error__": f"info could not be stored: {exc!r}"}, protocol=5)


def unpack_info(b) -> Any:
    if not len(b):
        return {}
    return pickle.loads(b)


def _float_json(x: float):
    if math.isfinite(x):
        return x
    return {"__type": "float", "bits": struct.pack(">d", x).hex()}


def _numpy_json(a: np.ndarray, scalar: bool) -> dict:
    a = a if a.flags.c_contiguous else a.copy(order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    if a.dtype.hasobject:
        return {"__type": "repr", "type": "numpy.ndarray", "repr": repr(a)}
    dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    a = a.astype(dt, copy=False)
    return {
        "__type": "numpy",
        "dtype": dt.str,
        "shape": list(a.shape),
        "b64": base64.b64encode(a.tobytes()).decode("ascii"),
        "scalar": scalar,
    }


def encode_json(obj: Any) -> Any:
    """A strict-JSON-safe form of ``obj`` (see the module docstring for the tags)."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.ndarray):
        return _numpy_json(obj, scalar=False)
    if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass
        return _numpy_json(np.asarray(obj), scalar=True)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return _float_json(float(obj))
    if isinstance(obj, dict):
        if all(type(k) is str for k in obj) and "__type" not in obj:
            return {k: encode_json(v) for k, v in obj.items()}
        return {"__type": "dict", "items": [[encode_json(k), encode_json(v)] for k, v in obj.items()]}
    if isinstance(obj, list):
        return [encode_json(v) for v in obj]
    if isinstance(obj, tuple):
        return {"__type": "tuple", "items": [encode_json(v) for v in obj]}
    if isinstance(obj, (bytes, bytearray)):
        return {"__type": "bytes", "b64": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, Unrepresentable):
        return {"__type": "repr", "type": obj.type, "repr": obj.repr}
    t = type(obj)
    return {"__type": "repr", "type": f"{t.__module__}.{t.__qualname__}", "repr": repr(obj)}


def decode_json(obj: Any) -> Any:
    """The inverse of ``encode_json``."""
    if isinstance(obj, list):
        return [decode_json(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    tag = obj.get("__type")
    if tag is None:
        return {k: decode_json(v) for k, v in obj.items()}
    if tag == "float":
        return struct.unpack(">d", bytes.fromhex(obj["bits"]))[0]
    if tag == "numpy":
        a = np.frombuffer(base64.b64decode(obj["b64"]), dtype=np.dtype(obj["dtype"])).reshape(tuple(obj["shape"])).copy()
        return a[()] if obj.get("scalar") else a
    if tag == "tuple":
        return tuple(decode_json(v) for v in obj["items"])
    if tag == "dict":
        return {_hashable(decode_json(k)): decode_json(v) for k, v in obj["items"]}
    if tag == "bytes":
        return base64.b64decode(obj["b64"])
    if tag == "repr":
        return Unrepresentable(obj["type"], obj["repr"])
    return {k: decode_json(v) for k, v in obj.items()}


def _hashable(k: Any) -> Any:
    if isinstance(k, np.ndarray):
        return k.tobytes()
    return k
