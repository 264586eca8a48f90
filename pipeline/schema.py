"""What a Gymnasium space looks like on the wire and on disk.

A space is described once as a small JSON-safe *spec* (stored in the
manifest, so a reader needs neither Gymnasium nor the environment) and
flattened into *leaves*: fixed-shape arrays (Box, Discrete, MultiDiscrete,
MultiBinary) or variable-length text (Text). Dict and Tuple only nest.

The env side compiles an *encoder* per space that checks a value against the
space's shape and dtype and appends one buffer per leaf, without copying when
the value already has the declared dtype and is C-contiguous. Values of
another dtype are accepted only when numpy casts them safely (no value can
change); anything else raises ``RecordError`` naming the field.
"""

from __future__ import annotations

import numbers
import struct
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .errors import ConfigError, RecordError

__all__ = ["Leaf", "describe_space", "leaves", "compile_encoder", "SUPPORTED_SPACES"]

SUPPORTED_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Text", "Dict", "Tuple")

Encoder = Callable[[Any, list], None]


@dataclass(frozen=True)
class Leaf:
    """One array (or text) field of a space; ``path`` is the keys/indices leading to it."""

    path: tuple
    kind: str  # "array" or "text"
    dtype: str = ""  # numpy dtype string, little-endian ("<f4", "|u1", ...)
    shape: tuple = ()

    @property
    def nbytes(self) -> int:
        if self.kind != "array":
            return 0
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))

    def name(self, root: str) -> str:
        return root + "".join(f"[{p!r}]" for p in self.path)


def _le(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    return dt.newbyteorder("<") if dt.byteorder == ">" or (dt.byteorder == "=" and dt.itemsize > 1) else dt


def describe_space(space) -> dict:
    """The JSON-safe spec of a Gymnasium space; ConfigError for spaces envrec cannot record."""
    from gymnasium import spaces as S

    if isinstance(space, S.Box):
        return {"type": "Box", "dtype": _le(space.dtype).str, "shape": list(space.shape), "repr": repr(space)}
    if isinstance(space, S.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start), "dtype": "<i8", "shape": []}
    if isinstance(space, S.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": np.asarray(space.nvec).tolist(),
            "dtype": _le(space.dtype).str,
            "shape": list(space.shape),
        }
    if isinstance(space, S.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist(), "dtype": _le(space.dtype).str, "shape": list(space.shape)}
    if isinstance(space, S.Text):
        return {"type": "Text", "min_length": int(space.min_length), "max_length": int(space.max_length)}
    if isinstance(space, S.Dict):
        return {"type": "Dict", "spaces": [[str(k), describe_space(v)] for k, v in space.spaces.items()]}
    if isinstance(space, S.Tuple):
        return {"type": "Tuple", "spaces": [describe_space(v) for v in space.spaces]}
    raise ConfigError(
        f"envrec cannot record a {type(space).__name__} space ({space!r}); "
        f"supported: {', '.join(SUPPORTED_SPACES)} and nestings of Dict and Tuple"
    )


def leaves(spec: dict, path: tuple = ()) -> list[Leaf]:
    """The leaves of a spec, depth first, in the order the encoder emits them."""
    t = spec["type"]
    if t == "Dict":
        return [leaf for k, sub in spec["spaces"] for leaf in leaves(sub, path + (k,))]
    if t == "Tuple":
        return [leaf for i, sub in enumerate(spec["spaces"]) for leaf in leaves(sub, path + (i,))]
    if t == "Text":
        return [Leaf(path, "text")]
    return [Leaf(path, "array", spec["dtype"], tuple(spec["shape"]))]


def _where(root: str, path: tuple) -> str:
    return root + "".join(f"[{p!r}]" for p in path)


def _array_encoder(leaf: Leaf, where: str) -> Encoder:
    dtype = np.dtype(leaf.dtype)
    shape = leaf.shape

    def encode(x, out: list) -> None:
        a = x if type(x) is np.ndarray else np.asarray(x)
        if a.dtype != dtype:
            if a.shape != shape or not np.can_cast(a.dtype, dtype, "safe"):
                raise RecordError(_mismatch(where, dtype, shape, a))
            a = a.astype(dtype)
        elif a.shape != shape:
            raise RecordError(_mismatch(where, dtype, shape, a))
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        out.append(memoryview(a).cast("B"))

    return encode


def _mismatch(where: str, dtype, shape, a: np.ndarray) -> str:
    return (
        f"{where}: expected a {dtype} array of shape {tuple(shape)} as its space declares, "
        f"got {a.dtype} of shape {a.shape}; envrec accepts only values that cast safely to the declared dtype"
    )


_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")


def _int_encoder(where: str) -> Encoder:
    def encode(x, out: list) -> None:
        if isinstance(x, (int, np.integer)):
            v = int(x)
        elif isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "iub":
            v = int(x)
        else:
            raise RecordError(f"{where}: expected an integer (Discrete), got {type(x).__name__} {x!r}")
        try:
            out.append(_I64.pack(v))
        except struct.error:
            raise RecordError(f"{where}: {v} does not fit in a signed 64-bit integer") from None

    return encode


def _text_encoder(where: str) -> Encoder:
    def encode(x, out: list) -> None:
        if not isinstance(x, str):
            raise RecordError(f"{where}: expected a str (Text space), got {type(x).__name__}")
        out.append(x.encode("utf-8", "surrogatepass"))

    return encode


def compile_encoder(spec: dict, root: str, path: tuple = ()) -> Encoder:
    """A function ``encode(value, out)`` appending one buffer per leaf of ``spec`` to ``out``."""
    t = spec["type"]
    where = _where(root, path)
    if t == "Dict":
        keys = [k for k, _ in spec["spaces"]]
        subs = [(k, compile_encoder(sub, root, path + (k,))) for k, sub in spec["spaces"]]

        def encode_dict(x, out: list) -> None:
            try:
                for k, enc in subs:
                    enc(x[k], out)
            except (KeyError, TypeError) as exc:
                raise RecordError(f"{where}: expected a dict with keys {keys}, got {_short(x)} ({exc!r})") from None
            if len(x) != len(keys):
                raise RecordError(f"{where}: unexpected keys {sorted(set(x) - set(keys))} (space declares {keys})")

        return encode_dict
    if t == "Tuple":
        subs_t = [compile_encoder(sub, root, path + (i,)) for i, sub in enumerate(spec["spaces"])]

        def encode_tuple(x, out: list) -> None:
            if not isinstance(x, (tuple, list)) or len(x) != len(subs_t):
                raise RecordError(f"{where}: expected a tuple of {len(subs_t)} items, got {_short(x)}")
            for item, enc in zip(x, subs_t):
                enc(item, out)

        return encode_tuple
    if t == "Text":
        return _text_encoder(where)
    if t == "Discrete":
        return _int_encoder(where)
    return _array_encoder(leaves(spec, path)[0], where)


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 80 else r[:77] + "..."


def encode_reward(x) -> bytes:
    """A reward as 8 little-endian bytes of float64 (RecordError for non-numbers)."""
    if isinstance(x, (numbers.Real, np.number)) and not isinstance(x, (complex, np.complexfloating)):
        return _F64.pack(float(x))
    if isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "iufb":
        return _F64.pack(float(x))
    raise RecordError(f"reward: expected a real number, got {type(x).__name__} {_short(x)}")


def decode_reward(b) -> float:
    return _F64.unpack(b)[0]
