"""What a Gymnasium space looks like on the wire and on disk.

A space is described once as a small JSON-safe *spec* (stored in the
manifest, so a reader needs neither Gymnasium nor the environment) and
flattened into *leaves*: fixed-shape arrays (Box, Discrete, MultiDiscrete,
MultiBinary) or variable-length text (Text). Dict and Tuple only nest.

The env side compiles, per space, a *flattener* (value -> leaf values) and a
*codec* per leaf that checks a value against the leaf's shape and dtype and
writes it in place into the ring: one copy, none when converting is not
needed. Values of
another dtype are accepted only when numpy casts them safely (no value can
change); anything else raises ``RecordError`` naming the field.
"""

from __future__ import annotations

import numbers
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, RecordError

__all__ = ["SUPPORTED_SPACES", "Leaf", "LeafCodec", "compile_flattener", "describe_space", "leaf_codecs", "leaves", "reward_value", "space_from_spec"]

SUPPORTED_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Text", "Dict", "Tuple")

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


def _le(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    return dt.newbyteorder("<") if dt.byteorder == ">" or (dt.byteorder == "=" and dt.itemsize > 1) else dt


def describe_space(space) -> dict:
    """The JSON-safe spec of a Gymnasium space; ConfigError for spaces envrec cannot record."""
    from gymnasium import spaces as S

    if isinstance(space, S.Box):
        spec = {"type": "Box", "dtype": _le(space.dtype).str, "shape": list(space.shape), "repr": repr(space)}
        low, high = np.asarray(space.low), np.asarray(space.high)
        if low.size and (low == low.flat[0]).all() and (high == high.flat[0]).all():
            spec["bounds"] = [str(low.flat[0].item()), str(high.flat[0].item())]  # "inf" is not JSON
        return spec
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


def space_from_spec(spec: dict):
    """The Gymnasium space a spec describes (the inverse of ``describe_space``).

    Exact but for two things a spec does not keep: a Box whose bounds differ
    per element gets the widest bounds of its dtype, and a Text space gets
    Gymnasium's default character set.
    """
    from gymnasium import spaces as S

    t = spec["type"]
    if t == "Dict":
        return S.Dict({k: space_from_spec(sub) for k, sub in spec["spaces"]})
    if t == "Tuple":
        return S.Tuple([space_from_spec(sub) for sub in spec["spaces"]])
    if t == "Text":
        return S.Text(max_length=spec["max_length"], min_length=spec["min_length"])
    if t == "Discrete":
        return S.Discrete(spec["n"], start=spec["start"])
    dtype = np.dtype(spec["dtype"]).newbyteorder("=")
    if t == "MultiDiscrete":
        return S.MultiDiscrete(spec["nvec"], dtype=dtype)
    if t == "MultiBinary":
        return S.MultiBinary(spec["n"])
    if "bounds" in spec:
        low, high = (dtype.type(float(b)) if dtype.kind == "f" else dtype.type(int(b)) for b in spec["bounds"])
    elif dtype.kind in "iu":
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    elif dtype.kind == "b":
        low, high = 0, 1
    else:
        low, high = -np.inf, np.inf
    return S.Box(low, high, tuple(spec["shape"]), dtype)


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


def leaf_values(x, spec: dict) -> list:
    """A value's leaves in leaf order, without checks (Dict by key, Tuple by position)."""
    t = spec["type"]
    if t == "Dict":
        return [v for k, sub in spec["spaces"] for v in leaf_values(x[k], sub)]
    if t == "Tuple":
        return [v for item, sub in zip(x, spec["spaces"], strict=True) for v in leaf_values(item, sub)]
    return [x]


def _where(root: str, path: tuple) -> str:
    return root + "".join(f"[{p!r}]" for p in path)


@dataclass(frozen=True)
class LeafCodec:
    """How one leaf's values are checked and written.

    A fixed-size leaf has ``put(value, buf, offset)``, which writes the value
    in place (one copy, into the ring). A Text leaf has ``encode(value)``,
    which returns its bytes, so the record's size is known before it is reserved.
    A Discrete leaf also has ``to_int(value)``, the check alone, for a packer
    that packs the value with other scalars in one call.
    """

    leaf: Leaf
    where: str
    size: int | None
    put: Callable[[Any, Any, int], None] | None = None
    encode: Callable[[Any], bytes] | None = None
    to_int: Callable[[Any], int] | None = None


def _array_put(leaf: Leaf, where: str) -> Callable[[Any, Any, int], None]:
    dtype = np.dtype(leaf.dtype)
    shape = leaf.shape
    n = leaf.nbytes
    small = n <= SMALL_ARRAY_BYTES

    def put(x, buf, off: int) -> None:
        a = x if type(x) is np.ndarray else np.asarray(x)
        if a.dtype is not dtype and a.dtype != dtype:  # identity first: the common case, per step
            if a.shape != shape or not np.can_cast(a.dtype, dtype, "safe"):
                raise RecordError(_mismatch(where, dtype, shape, a))
            a = a.astype(dtype)
        elif a.shape != shape:
            raise RecordError(_mismatch(where, dtype, shape, a))
        if small:
            buf[off : off + n] = a.tobytes()  # C order whatever the layout; cheapest for a few bytes
        else:
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            buf[off : off + n] = a.data.cast("B")

    return put


def _mismatch(where: str, dtype, shape, a: np.ndarray) -> str:
    return (
        f"{where}: expected a {dtype} array of shape {tuple(shape)} as its space declares, "
        f"got {a.dtype} of shape {a.shape}; envrec accepts only values that cast safely to the declared dtype"
    )


SMALL_ARRAY_BYTES = 512  # below this, bytes() plus a copy beats building a memoryview
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")


def _int_value(where: str) -> Callable[[Any], int]:
    def to_int(x) -> int:
        t = type(x)
        if t is int or t is np.int64 or isinstance(x, (int, np.integer)) or isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "iub":
            return int(x)
        raise RecordError(f"{where}: expected an integer (Discrete), got {type(x).__name__} {_short(x)}")

    return to_int


def int_out_of_range(where: str, value: int) -> RecordError:
    """The error for a Discrete value that a signed 64-bit integer cannot hold."""
    return RecordError(f"{where}: {value} does not fit in a signed 64-bit integer")


def _int_put(to_int: Callable[[Any], int], where: str) -> Callable[[Any, Any, int], None]:
    pack_into = _I64.pack_into

    def put(x, buf, off: int) -> None:
        v = to_int(x)
        try:
            pack_into(buf, off, v)
        except struct.error:
            raise int_out_of_range(where, v) from None

    return put


def _text_encode(where: str) -> Callable[[Any], bytes]:
    def encode(x) -> bytes:
        if not isinstance(x, str):
            raise RecordError(f"{where}: expected a str (Text space), got {type(x).__name__}")
        return x.encode("utf-8", "surrogatepass")

    return encode


def leaf_codecs(spec: dict, root: str) -> list[LeafCodec]:
    """One codec per leaf of ``spec``, in leaf order."""
    out = []
    for leaf, sub in zip(leaves(spec), _leaf_specs(spec), strict=True):
        where = _where(root, leaf.path)
        if leaf.kind == "text":
            out.append(LeafCodec(leaf, where, None, encode=_text_encode(where)))
        elif sub["type"] == "Discrete":
            to_int = _int_value(where)
            out.append(LeafCodec(leaf, where, 8, put=_int_put(to_int, where), to_int=to_int))
        else:
            out.append(LeafCodec(leaf, where, leaf.nbytes, put=_array_put(leaf, where)))
    return out


def _leaf_specs(spec: dict) -> list[dict]:
    t = spec["type"]
    if t == "Dict":
        return [s for _, sub in spec["spaces"] for s in _leaf_specs(sub)]
    if t == "Tuple":
        return [s for sub in spec["spaces"] for s in _leaf_specs(sub)]
    return [spec]


def compile_flattener(spec: dict, root: str, path: tuple = ()) -> Callable[[Any], list]:
    """A function mapping a value of the space to the list of its leaf values, in leaf order.

    Checks Dict keys and Tuple lengths; the leaves check themselves.
    """
    t = spec["type"]
    where = _where(root, path)
    if t == "Dict":
        keys = [k for k, _ in spec["spaces"]]
        subs = [(k, compile_flattener(sub, root, path + (k,))) for k, sub in spec["spaces"]]

        def flatten_dict(x) -> list:
            out = []
            try:
                for k, sub in subs:
                    out += sub(x[k])
            except (KeyError, TypeError, IndexError) as exc:
                raise RecordError(f"{where}: expected a dict with keys {keys}, got {_short(x)} ({exc!r})") from None
            if len(x) != len(keys):
                raise RecordError(f"{where}: unexpected keys {sorted(map(str, set(x) - set(keys)))} (space declares {keys})")
            return out

        return flatten_dict
    if t == "Tuple":
        subs_t = [compile_flattener(sub, root, path + (i,)) for i, sub in enumerate(spec["spaces"])]

        def flatten_tuple(x) -> list:
            if not isinstance(x, (tuple, list)) or len(x) != len(subs_t):
                raise RecordError(f"{where}: expected a tuple of {len(subs_t)} items, got {_short(x)}")
            out = []
            for item, sub in zip(x, subs_t, strict=True):
                out += sub(item)
            return out

        return flatten_tuple
    return _single


def _single(x) -> list:
    return [x]


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 80 else r[:77] + "..."


def reward_value(x) -> float:
    """A reward as a float (RecordError for anything that is not a real number)."""
    t = type(x)
    if t is float or t is int or t is np.float64 or t is np.float32:
        return float(x)
    if isinstance(x, (numbers.Real, np.number)) and not isinstance(x, (complex, np.complexfloating)):
        return float(x)
    if isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "iufb":
        return float(x)
    raise RecordError(f"reward: expected a real number, got {type(x).__name__} {_short(x)}")


def decode_reward(b) -> float:
    return _F64.unpack(b)[0]
