"""What readers rely on in a trace's JSON documents, checked before anything relies on it.

A folder may come from anywhere (a download, a colleague, a damaged disk),
so every document a reader parses passes through here first: a manifest
(``check_manifest``), a batch's ``{"episodes": [...]}`` (``check_batch``),
their space specs and array descriptors. Each check either returns or
raises ``TraceError`` naming the file and the field (``x.ep000000000.json:
episodes[2].observations.shape: ...``); after it, the reader, the exporters
and the viewer may index and convert without guarding each access.

Bounds, each larger than anything envrec writes:

* JSON nesting: ``MAX_JSON_DEPTH`` levels, and what parsing a document
  costs: ``MAX_PARSED_JSON_BYTES`` (``envrec.formats.json_docs``, whose
  ``parse_json`` every document goes through, re-exported here);
* arrays: ``MAX_DIMS`` dimensions, dtypes numpy can map without objects
  (bool, integers, floats, complex, bytes, str), little-endian;
* a compressed chunk decompresses to at most ``MAX_RATIO`` times its stored
  bytes (zstd's own ceiling, an RLE block, is about 43,690x; lz4's 255x);
  a compressed array's ``filter`` is one of ``FILTERS`` (``"xor"``);
* a compressed batch JSON (``.json.zst``) decompresses to at most
  ``MAX_BATCH_JSON_BYTES`` and at most ``MAX_RATIO`` times its stored bytes;
* a batch's records hold the steps its manifest entry says and at most its
  ``array_bytes`` of arrays (``check_sizes``), before any is allocated.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import TraceError
from .compression import CODECS, FILTERS
from .inside import name_parts, safe_prefix
from .json_docs import MAX_JSON_DEPTH, MAX_PARSED_JSON_BYTES, JsonBudget, json_cost, parse_json
from .part_checks import check_entry_parts
from .replay_fields import check_env, check_episode_keys

__all__ = [
    "MAX_BATCH_JSON_BYTES", "MAX_JSON_DEPTH", "MAX_PARSED_JSON_BYTES", "MAX_RATIO", "JsonBudget", "check_array",
    "check_batch", "check_manifest", "check_sizes", "check_space", "check_types", "json_cost", "parse_json",
    "safe_prefix", "spec_dtype",
]

MAX_DIMS = 32  # numpy allows 64
MAX_RATIO = 1 << 17  # decompressed bytes per stored byte, above any codec's physical ceiling
MAX_BATCH_JSON_BYTES = 1 << 30  # a batch's JSON decompressed (envrec's are about batch_bytes at most)
MAX_LEAF_ELEMENTS = 1 << 28  # elements of one space leaf (a 720p RGB frame has 2.8 M)
INT64 = 1 << 63
MAX_SEGMENTS = 1 << 24  # closed manifest segments a head may count (each holds 256 batches)
ARRAY_KINDS = "biufcSU"
SPACE_TYPES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Text", "Dict", "Tuple")


# -- small checks -------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(doc: Mapping, key: str, where: str, lo: int = 0, hi: int | None = None, required: bool = True) -> None:
    if key not in doc:
        if required:
            raise TraceError(f"{where}.{key}: missing")
        return
    v = doc[key]
    if not _is_int(v) or v < lo or (hi is not None and v > hi):
        bound = f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")
        raise TraceError(f"{where}.{key}: {_short(v)} is not {bound}")


def _typed(doc: Mapping, key: str, where: str, types: tuple[type, ...], required: bool = False) -> None:
    if key not in doc:
        if required:
            raise TraceError(f"{where}.{key}: missing")
        return
    if not isinstance(doc[key], types) or (isinstance(doc[key], bool) and bool not in types):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        raise TraceError(f"{where}.{key}: {_short(doc[key])} is not {names}")


def check_types(doc: Any, what: str, fields: Mapping[str, tuple[type, ...]], required: tuple[str, ...] = ()) -> dict:
    """``doc`` is an object whose ``fields`` present have one of their types (``bool`` is not an ``int``).

    Args:
        doc: a parsed JSON document.
        what: the file, for messages.
        fields: each key's accepted types (``type(None)`` for null).
        required: keys that must be present.
    """
    _dict(doc, what)
    for key, types in fields.items():
        _typed(doc, key, what, types, required=key in required)
    return doc


def _dict(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise TraceError(f"{where}: {_short(v)} is not an object")
    return v


def _list(v: Any, where: str) -> list:
    if not isinstance(v, list):
        raise TraceError(f"{where}: {_short(v)} is not a list")
    return v


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def spec_dtype(value: Any, where: str) -> np.dtype:
    """A dtype a reader may map: numeric, bytes or str, little-endian, no objects or fields.

    Args:
        value: the dtype string a document gives.
        where: the file and field holding it, for messages.
    """
    if not isinstance(value, str) or len(value) > 16:
        raise TraceError(f"{where}: {_short(value)} is not a dtype")
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError, OverflowError, SyntaxError):
        raise TraceError(f"{where}: {_short(value)} is not a numpy dtype") from None
    if dt.kind not in ARRAY_KINDS or dt.hasobject or dt.byteorder == ">" or dt.itemsize == 0:
        raise TraceError(f"{where}: {value!r} is not a dtype of trace arrays (numeric, bytes or str, little-endian)")
    return dt


def _shape(value: Any, where: str) -> tuple[int, ...]:
    shape = _list(value, where)
    if len(shape) > MAX_DIMS or not all(_is_int(n) and n >= 0 for n in shape):
        raise TraceError(f"{where}: {_short(value)} is not a shape (at most {MAX_DIMS} non-negative integers)")
    return tuple(shape)


# -- manifests ---------------------------------------------------------------------------
def _check_entry(entry: Any, where: str) -> None:
    _dict(entry, where)
    for key in ("first", "len"):
        _int(entry, key, where)
    name_parts(entry.get("fn"), f"{where}.fn")
    if "bin" in entry:
        name_parts(entry["bin"], f"{where}.bin")
    for key in ("steps", "json_bytes", "bin_bytes", "array_bytes"):
        _int(entry, key, where, required=False)
    for key in ("json_crc32", "bin_crc32"):
        _int(entry, key, where, hi=0xFFFFFFFF, required=False)
    check_entry_parts(entry, where)


def check_manifest(doc: Any, what: str) -> dict:
    """A parsed manifest or segment, checked as far as readers rely on it (its batch entries, spaces, counters).

    Args:
        doc: the parsed document.
        what: its file name, for messages.
    """
    _dict(doc, what)
    for i, entry in enumerate(_list(doc.get("batches"), f"{what}: batches")):
        _check_entry(entry, f"{what}: batches[{i}]")
    _int(doc, "version", what, required=False)
    for key in ("env_id", "error", "prefix"):
        _typed(doc, key, what, (str, type(None)))
    if isinstance(doc.get("prefix"), str) and not safe_prefix(doc["prefix"]):  # segments' names are built from it
        raise TraceError(f"{what}: prefix: {_short(doc['prefix'])} is not a name prefix envrec writes (letters, digits, "
                         "'.', '_', '-'; no path separator, no '..'): it would name files outside the folder")
    if doc.get("segments") is not None:
        seg = _dict(doc["segments"], f"{what}: segments")
        _int(seg, "first", f"{what}: segments")
        _int(seg, "next", f"{what}: segments", lo=seg["first"], hi=seg["first"] + MAX_SEGMENTS)
        if seg["next"] > seg["first"]:
            _typed(doc, "prefix", what, (str,), required=True)
    for key in ("counters", "evicted"):
        if doc.get(key) is not None:
            counts = _dict(doc[key], f"{what}: {key}")
            for k in {*counts, *(("batches", "episodes", "steps", "bytes") if key == "evicted" else ())}:
                _int(counts, k, f"{what}: {key}")
    if doc.get("settings") is not None:
        settings = _dict(doc["settings"], f"{what}: settings")
        if settings.get("compression") is not None:
            c = _dict(settings["compression"], f"{what}: settings.compression")
            _typed(c, "codec", f"{what}: settings.compression", (str,), required=True)
            _int(c, "level", f"{what}: settings.compression", lo=-(1 << 31))
    for key in ("observation_space", "action_space"):
        if key in doc:
            check_space(doc[key], f"{what}: {key}")
    if doc.get("env") is not None:
        check_env(doc["env"], what)
    return doc


def check_space(spec: Any, where: str, depth: int = 0) -> None:
    """A space spec as ``envrec.formats.schema.describe_space`` writes it.

    Args:
        spec: the parsed spec.
        where: the file and field holding it, for messages.
        depth: how deep in Dict/Tuple nesting it lies.
    """
    _dict(spec, where)
    t = spec.get("type")
    if t not in SPACE_TYPES or depth > MAX_DIMS:
        raise TraceError(f"{where}.type: {_short(t)} is not one of {', '.join(SPACE_TYPES)} (or nested too deep)")
    if t in ("Dict", "Tuple"):
        subs = _list(spec.get("spaces"), f"{where}.spaces")
        keys = []
        for i, sub in enumerate(subs):
            if t == "Dict":
                if not (isinstance(sub, list) and len(sub) == 2 and isinstance(sub[0], str)):
                    raise TraceError(f"{where}.spaces[{i}]: {_short(sub)} is not a [key, space] pair")
                keys.append(sub[0])
                sub = sub[1]
            check_space(sub, f"{where}.spaces[{i}]", depth + 1)
        if len(set(keys)) != len(keys):
            raise TraceError(f"{where}.spaces: a key appears twice")
        return
    if t == "Text":
        _int(spec, "min_length", where)
        _int(spec, "max_length", where, lo=spec["min_length"], hi=1 << 20)
        return
    dt = spec_dtype(spec.get("dtype"), f"{where}.dtype")
    shape = _shape(spec.get("shape"), f"{where}.shape")
    if dt.kind not in "biuf" or int(np.prod(shape, dtype=np.float64)) > MAX_LEAF_ELEMENTS:
        raise TraceError(f"{where}: a {t} of dtype {dt.str} and shape {list(shape)} is not a space envrec records")
    _check_space_values(spec, t, dt, shape, where)


def _check_space_values(spec: dict, t: str, dt: np.dtype, shape: tuple[int, ...], where: str) -> None:
    """The values a space rebuilt from ``spec`` needs: bounds, sizes, ``nvec``."""
    if t == "Discrete":
        _int(spec, "n", where, lo=1)
        _int(spec, "start", where, lo=-(1 << 62), hi=1 << 62)
    elif t == "MultiBinary":
        n: Any = spec.get("n")
        if not ((_is_int(n) and n > 0 and shape == (n,)) or (isinstance(n, list) and tuple(n) == shape and all(shape))):
            raise TraceError(f"{where}.n: {_short(n)} does not match the shape {list(shape)}")
    elif t == "MultiDiscrete":
        try:
            nvec = np.asarray(spec.get("nvec"), dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise TraceError(f"{where}.nvec: {_short(spec.get('nvec'))} is not an array of integers") from None
        if nvec.shape != shape or (nvec <= 0).any():
            raise TraceError(f"{where}.nvec: not {list(shape)} positive integers")
    elif "bounds" in spec:
        bounds = spec["bounds"]
        parse: Callable[[str], Any] = float if dt.kind == "f" else int
        try:
            low, high = (parse(b) for b in bounds) if isinstance(bounds, list) and len(bounds) == 2 else (None, None)
            if dt.kind in "iu":
                info = np.iinfo(dt)
                ok = low is not None and info.min <= low <= high <= info.max  # type: ignore[operator]
            else:
                ok = low is not None and all(isinstance(b, str) for b in bounds)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise TraceError(f"{where}.bounds: {_short(bounds)} are not two bounds of dtype {dt.str}")


# -- batches ---------------------------------------------------------------------------------
def check_array(desc: Any, where: str) -> None:
    """An array descriptor (``{"__type": "ndarray", ...}``): its shape, dtype, file, offset, size and chunks agree.

    Args:
        desc: the parsed descriptor.
        where: the file and field holding it, for messages.
    """
    _dict(desc, where)
    if desc.get("__type") != "ndarray":
        raise TraceError(f"{where}: {_short(desc)} is not an array descriptor")
    shape = _shape(desc.get("shape"), f"{where}.shape")
    dt = spec_dtype(desc.get("dtype"), f"{where}.dtype")
    name_parts(desc.get("npyfile"), f"{where}.npyfile")
    _int(desc, "npyoff", where)
    _int(desc, "size", where)
    nbytes = int(np.prod(shape, dtype=object)) * dt.itemsize
    if int(np.prod([n for n in shape if n], dtype=object)) * dt.itemsize >= INT64 // 2:  # numpy's limit, empty or not
        raise TraceError(f"{where}.shape: {list(shape)} of {dt.str} is larger than any array numpy can make")
    if "codec" not in desc:
        if "filter" in desc:
            raise TraceError(f"{where}.filter: a filter on an array that names no codec")
        if nbytes != desc["size"]:
            raise TraceError(f"{where}.size: {desc['size']} bytes, but shape {list(shape)} of {dt.str} is {nbytes}")
        return
    if desc["codec"] not in CODECS or not shape:
        raise TraceError(f"{where}.codec: {_short(desc['codec'])} (on shape {list(shape)}) is not a codec of trace arrays")
    if "filter" in desc and desc["filter"] not in FILTERS:
        raise TraceError(f"{where}.filter: {_short(desc['filter'])} is not a filter of trace arrays ({', '.join(FILTERS)})")
    _int(desc, "raw_size", where, required=False)
    if desc.get("raw_size", nbytes) != nbytes:
        raise TraceError(f"{where}.raw_size: {desc['raw_size']} bytes, but shape {list(shape)} of {dt.str} is {nbytes}")
    rows = stored = 0
    for i, chunk in enumerate(_list(desc.get("chunks"), f"{where}.chunks")):
        if not (isinstance(chunk, list) and len(chunk) == 2 and all(_is_int(n) and n >= 0 for n in chunk)):
            raise TraceError(f"{where}.chunks[{i}]: {_short(chunk)} is not [rows, stored bytes]")
        rows, stored = rows + chunk[0], stored + chunk[1]
    if rows != shape[0] or stored != desc["size"] or nbytes > MAX_RATIO * stored + (1 << 20):
        raise TraceError(
            f"{where}.chunks: {rows} rows in {stored} stored bytes do not make the shape {list(shape)} "
            f"({nbytes} bytes) in the size {desc['size']}"
        )


def _rows(value: Any, spec: dict | None, rows: int, where: str) -> None:
    """``value`` is a field laid out as ``spec`` with ``rows`` rows in each leaf (any layout when ``spec`` is None)."""
    t = spec["type"] if spec is not None else None
    if t == "Dict" or (t is None and isinstance(value, dict) and value.get("__type") != "ndarray"):
        _dict(value, where)
        subs = spec["spaces"] if spec is not None else [(k, None) for k in value]
        if spec is not None and set(value) != {k for k, _ in subs}:
            raise TraceError(f"{where}: keys {sorted(value)} are not the space's {sorted(k for k, _ in subs)}")
        for k, sub in subs:
            _rows(value[k], sub, rows, f"{where}.{k}")
    elif t == "Tuple" or (t is None and isinstance(value, list) and not all(isinstance(s, str) for s in value)):
        subs = spec["spaces"] if spec is not None else [None] * len(_list(value, where))
        if len(_list(value, where)) != len(subs):
            raise TraceError(f"{where}: {len(value)} items, the space has {len(subs)}")
        for i, (v, sub) in enumerate(zip(value, subs, strict=True)):
            _rows(v, sub, rows, f"{where}[{i}]")
    elif t == "Text" or t is None and isinstance(value, list):
        if len(_list(value, where)) != rows or not all(isinstance(s, str) for s in value):
            raise TraceError(f"{where}: not {rows} strings")
    else:
        check_array(value, where)
        shape = tuple(value["shape"])
        if spec is not None and (shape[1:] != tuple(spec["shape"]) or np.dtype(value["dtype"]) != np.dtype(spec["dtype"])):
            raise TraceError(f"{where}: shape {list(shape)} of {value['dtype']} does not hold rows of the space's "
                             f"{spec['shape']} of {spec['dtype']}")
        if not shape or shape[0] != rows:
            raise TraceError(f"{where}.shape: {list(shape)} does not have the {rows} rows the episode's length needs")


def _column(raw: dict, key: str, rows: int, where: str) -> None:
    """A per-step array of ``rows`` rows of scalars (rewards, terminations, truncations)."""
    check_array(raw[key], f"{where}.{key}")
    if len(raw[key]["shape"]) != 1 or raw[key]["shape"][0] != rows:
        raise TraceError(f"{where}.{key}.shape: {raw[key]['shape']} is not one value per step ({rows})")


def _check_episode(raw: Any, manifest: Mapping[str, Any], where: str) -> None:
    _dict(raw, where)
    for key in ("observations", "actions", "rewards"):
        if key not in raw:
            raise TraceError(f"{where}.{key}: missing")
    _int(raw, "episode_id", where, lo=-INT64, hi=INT64 - 1, required=False)  # numpy's int64 column holds it
    _typed(raw, "seed", where, (int, type(None)))
    _typed(raw, "return", where, (int, float, type(None)))
    if _is_int(raw.get("return")) and abs(raw["return"]) >= INT64:
        raise TraceError(f"{where}.return: {_short(raw['return'])} is not a float64 envrec writes")
    _typed(raw, "ended_by", where, (str, type(None)))  # null: a part that continues (part_checks)
    _typed(raw, "complete", where, (bool,))
    _typed(raw, "infos", where, (list,))
    check_array(raw["rewards"], f"{where}.rewards")
    n = raw["rewards"]["shape"][0] if len(raw["rewards"]["shape"]) == 1 else -1
    _column(raw, "rewards", n, where)
    _int(raw, "length", where, lo=n, hi=n, required=False)
    for key in ("terminations", "truncations"):
        if raw.get(key) is not None:
            _column(raw, key, n, where)
        elif "observation_space" in manifest:  # envrec writes both (gym-recording's traces, without spaces, neither)
            raise TraceError(f"{where}.{key}: missing")
    _rows(raw["actions"], manifest.get("action_space"), n, f"{where}.actions")
    _rows(raw["observations"], manifest.get("observation_space"), n + 1, f"{where}.observations")
    for i, info in enumerate(raw.get("infos", [])):
        if not isinstance(info, dict):
            raise TraceError(f"{where}.infos[{i}]: {_short(info)} is not an info (a JSON object)")
    check_episode_keys(raw, where)


@functools.lru_cache(maxsize=64)
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def _nbytes(value: Any) -> int:
    """The bytes a checked field's arrays take decompressed (text leaves take none)."""
    if isinstance(value, dict) and value.get("__type") == "ndarray":
        return math.prod(value["shape"]) * _itemsize(value["dtype"])
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    return 0


def check_sizes(episodes: list, entry: Mapping[str, Any], what: str) -> None:
    """A checked batch's records hold the steps its manifest entry says (``steps``) and no more array bytes
    (``array_bytes``), when it names them: what reading its arrays allocates is at most what the manifest
    declares, checked before any array is mapped or decompressed.

    Args:
        episodes: the records ``check_batch`` returned.
        entry: the batch's manifest entry.
        what: the batch's file name, for messages.
    """
    if "steps" in entry:
        steps = sum(raw["rewards"]["shape"][0] for raw in episodes)
        if steps != entry["steps"]:
            raise TraceError(f"{what}: episodes hold {steps} steps, the manifest's entry says {entry['steps']}")
    if "array_bytes" in entry:
        nbytes = sum(_nbytes(raw.get(k)) for raw in episodes for k in ("observations", "actions", "rewards",
                                                                        "terminations", "truncations"))
        if nbytes > entry["array_bytes"]:
            raise TraceError(f"{what}: episodes' arrays take {nbytes} bytes decompressed, more than the manifest's "
                             f"entry says (array_bytes {entry['array_bytes']})")


def check_batch(doc: Any, manifest: Mapping[str, Any], what: str, count: int) -> list:
    """A parsed batch ``.json``, checked against the spaces its manifest names; its list of episode records.

    Args:
        doc: the parsed batch.
        manifest: the manifest naming it (its spaces, when it has them, say what the fields hold).
        what: the batch's file name, for messages.
        count: the episodes the manifest's entry says it holds.
    """
    episodes = _list(_dict(doc, what).get("episodes"), f"{what}: episodes")
    if len(episodes) != count:
        raise TraceError(f"{what}: episodes: {len(episodes)} episode(s), the manifest's entry says {count}")
    for i, raw in enumerate(episodes):
        _check_episode(raw, manifest, f"{what}: episodes[{i}]")
    return episodes
