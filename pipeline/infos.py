"""Step infos: how they cross to the worker and how they are stored as JSON.

The env side pickles an info dict (an empty one costs nothing) with a
pickler that turns any object outside the builtin and numpy types into an
``Unrepresentable`` (its type name and repr), so the worker never has to
import user code and a strange info never breaks a step.

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
import math
import pickle
import struct
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Unrepresentable", "decode_json", "encode_json", "pack_info", "unpack_info"]

_EMPTY = b""


@dataclass(frozen=True)
class Unrepresentable:
    """Stands for an info value envrec could not store (its type and repr are kept)."""

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
        t = type(obj)
        try:
            text = repr(obj)
        except Exception as exc:  # noqa: BLE001  (a broken __repr__ must not break the step)
            text = f"<repr failed: {exc!r}>"
        return _unrepresentable, (f"{t.__module__}.{t.__qualname__}", text)


def pack_info(info: dict) -> bytes:
    """Bytes for the ring; b"" for an empty info."""
    if not info:
        return _EMPTY
    f = io.BytesIO()
    _InfoPickler(f, protocol=5).dump(info)
    return f.getvalue()


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
