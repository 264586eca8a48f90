"""Mutants of real recordings for the readers' fuzz test (``test_fuzz_readers``), drawn with hypothesis.

A mutant is a copy of a recording (hard links: every mutation writes a new
file and renames it over the old one, so the original is never touched)
with one or two of these applied to one of its files:

* bytes: a byte flipped, the file truncated, bytes appended;
* JSON (a ``.json.zst`` decompressed, changed and compressed again): a
  field deleted or replaced by a value of the wrong type, a huge or
  negative number, a name leaving the folder, deep nesting, a malformed
  info tag; an array descriptor's size and chunks then made consistent
  with its new shape when the draw says so;
* escapes: a file the recording names replaced by a symlink to a copy
  outside the folder, or a name in a manifest, batch or clip metadata
  pointed at such a copy (absolute, or through ``..``).

After a change to a batch's files the manifest's sizes and CRC-32s are made
to match again (unless the draw says not to), so the readers get past the
checksums to the contents.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from dataclasses import dataclass
from typing import Any

import zstandard
from hypothesis import strategies as st

from .batch_json import batch_text, stored_bytes

DEEP = "__deep__"  # spliced in as JSON nested 5,000 levels deep
EVIL: list[Any] = [
    None, True, False, 0, -1, 1.5, 2**63, -(2**63), 10**30, "", "x", "../outside/copy", "/etc/passwd", "a/../../b",
    [], {}, [-1], [2**40, 2**40], [0, 2**40, 2**30], [1] * 40, [3, -4], "|O", "<U999999999", ">f8", "V8", "f4,i4", "(2,)f4",
    {"__type": "ndarray"}, {"__type": "float", "bits": "zz"}, {"__type": "float", "bits": "00"},
    {"__type": "numpy", "dtype": "|O", "shape": [1], "b64": ""}, {"__type": "numpy", "dtype": "<f4", "shape": [9], "b64": "AAAA"},
    {"__type": "dict", "items": [[[1], 2]]}, {"__type": "dict", "items": 3}, {"__type": "tuple", "items": 5},
    {"__type": "bytes", "b64": "!!"}, {"__type": "repr"}, {"type": "Nope"}, {"type": "Dict", "spaces": [[1, 2]]},
    {"type": "Box", "dtype": "<f4", "shape": [2**20, 2**20]}, DEEP,
    # episode parts: a record's "part", an entry's "head_part"
    {"index": 1, "first_step": 0, "continues": True}, {"index": -1, "first_step": 0, "continues": False},
    {"index": 2**62, "first_step": 2**63, "continues": "yes"}, {"index": 1, "first_step": 3},
]


@dataclass
class Mutant:
    """What was done, for the failure message and for the escape property."""

    ops: list[str]
    escaped: str | None = None  # the kind of file whose name now leads outside the folder: "trace", "meta" or "clip"


def copy_linked(src: str, dst: str) -> None:
    """``src`` copied to ``dst`` as hard links (mutations replace files, never write into them)."""
    shutil.copytree(src, dst, copy_function=os.link)


def replace(path: str, data: bytes) -> None:
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def kind_of(name: str) -> str:
    if name.endswith(".meta.json"):
        return "meta"
    if name.endswith((".mp4", ".cast")):
        return "clip"
    return "trace"


def _files(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))


def _json_paths(doc: Any, limit: int = 4000) -> list[tuple]:
    """Paths (keys and indices) to the values in ``doc``, breadth first, at most ``limit``."""
    out: list[tuple] = []
    queue: list[tuple[tuple, Any]] = [((), doc)]
    while queue and len(out) < limit:
        path, value = queue.pop(0)
        out.append(path)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        queue.extend(((*path, k), v) for k, v in items)
    return out


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def _dumps(doc: Any) -> bytes:
    text = json.dumps(doc)
    return text.replace(json.dumps(DEEP), "[" * 5000 + "]" * 5000).encode()


def _consistent(desc: Any) -> None:
    """Make a mutated array descriptor's size (and chunks) agree with its shape, so deeper checks are reached."""
    if not isinstance(desc, dict) or not isinstance(desc.get("shape"), list):
        return
    try:
        import numpy as np

        n = 1
        for d in desc["shape"]:
            n *= int(d)
        nbytes = n * np.dtype(desc["dtype"]).itemsize
    except Exception:  # noqa: BLE001  (a mutant's dtype or shape may be anything: then leave it inconsistent)
        return
    if "codec" in desc and desc["shape"] and isinstance(desc.get("chunks"), list) and desc["chunks"]:
        desc["raw_size"] = nbytes
        rows = sum(c[0] for c in desc["chunks"][:-1] if isinstance(c, list) and c)
        if isinstance(desc["chunks"][-1], list) and desc["chunks"][-1]:
            desc["chunks"][-1][0] = int(desc["shape"][0]) - rows
    elif "codec" not in desc:
        desc["size"] = nbytes


JSON_NAMES = (".json", ".json.zst")


def _mutate_json(draw: Any, path: str, m: Mutant) -> None:
    try:
        doc = json.loads(batch_text(path))
    except (ValueError, RecursionError, zstandard.ZstdError):
        return  # already not JSON (or not zstd), or nested too deep to change (an earlier mutation)
    paths = _json_paths(doc)
    by_depth: dict[int, list[tuple]] = {}
    for p in paths:
        by_depth.setdefault(len(p), []).append(p)
    depth = draw(st.sampled_from(sorted(by_depth)))  # each depth alike: a record's own keys as often as its infos' leaves
    where = draw(st.sampled_from(by_depth[depth]))
    op = draw(st.sampled_from(["delete", "evil", "number", "wrap"])) if where else "evil"
    if not where:
        doc = draw(st.sampled_from(EVIL))
    else:
        parent, key = _get(doc, where[:-1]), where[-1]
        old = parent[key]
        if op == "delete" and isinstance(parent, dict):
            del parent[key]
        elif op == "number" and isinstance(old, int) and not isinstance(old, bool):
            parent[key] = draw(st.sampled_from([old + 1, old - 1, -old - 1, old * (1 << 20), old + (1 << 40), 0]))
        elif op == "wrap":
            parent[key] = draw(st.sampled_from([[old], {"v": old}, str(old)]))
        else:
            parent[key] = draw(st.sampled_from(EVIL))
        if draw(st.booleans()):
            for up in range(len(where) - 1, -1, -1):  # the descriptor the change is inside of
                holder = _get(doc, where[:up])
                if isinstance(holder, dict) and holder.get("__type") == "ndarray":
                    _consistent(holder)
                    break
    m.ops.append(f"json {op} {os.path.basename(path)}:{list(where)}")
    replace(path, stored_bytes(path, _dumps(doc)))


def _mutate_bytes(draw: Any, path: str, m: Mutant) -> None:
    data = open(path, "rb").read()
    op = draw(st.sampled_from(["flip", "truncate", "append"]))
    pos = draw(st.integers(0, max(0, len(data) - 1)))
    if op == "flip" and data:
        data = data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1 :]
    elif op == "truncate":
        data = data[:pos]
    else:
        data += draw(st.binary(min_size=1, max_size=64))
    m.ops.append(f"bytes {op}@{pos} {os.path.basename(path)}")
    replace(path, data)


def _escape(draw: Any, folder: str, outside: str, name: str, m: Mutant) -> None:
    """Replace ``name`` by a symlink to its copy outside, or point a name in a document at that copy."""
    copy = os.path.join(outside, name)
    shutil.copyfile(os.path.join(folder, name), copy)
    m.escaped = kind_of(name)
    if draw(st.booleans()) or not _repoint(draw, folder, name, copy, m):
        os.remove(os.path.join(folder, name))
        os.symlink(copy, os.path.join(folder, name))
        m.ops.append(f"symlink {name} -> outside")


def _repoint(draw: Any, folder: str, name: str, copy: str, m: Mutant) -> bool:
    """Point every name in the folder's documents equal to ``name`` at ``copy``; False when none names it."""
    target = draw(st.sampled_from([copy, os.path.join("..", os.path.basename(os.path.dirname(copy)), name)]))
    found = False
    for doc_name in _files(folder):
        if not doc_name.endswith(JSON_NAMES):
            continue
        path = os.path.join(folder, doc_name)
        try:
            text = batch_text(path)
        except zstandard.ZstdError:
            continue  # no longer zstd (an earlier mutation)
        needle = json.dumps(name).encode()
        if needle in text:
            replace(path, stored_bytes(path, text.replace(needle, json.dumps(target).encode())))
            found = True
    if found:
        m.ops.append(f"repoint {name} -> {target}")
    return found


def fix_checksums(folder: str) -> None:
    """Make every manifest's sizes and CRC-32s match the batch files as they now are."""
    for doc_name in _files(folder):
        if not doc_name.endswith(".manifest.json"):
            continue
        path = os.path.join(folder, doc_name)
        if os.path.islink(path):
            continue  # an escape: it stays a symlink
        try:
            doc = json.loads(open(path, "rb").read())
            entries = doc["batches"]
            changed = False
            for e in entries:
                for key, size, crc in (("fn", "json_bytes", "json_crc32"), ("bin", "bin_bytes", "bin_crc32")):
                    named = os.path.join(folder, e[key])
                    if os.path.isfile(named) and not os.path.islink(named) and size in e:
                        data = open(named, "rb").read()
                        if (e[size], e.get(crc)) != (len(data), zlib.crc32(data)):
                            e[size], e[crc], changed = len(data), zlib.crc32(data), True
        except Exception:  # noqa: BLE001, S112  (a mutated manifest may be anything: leave it as it is)
            continue
        if changed:
            replace(path, _dumps(doc))


@st.composite
def mutants(draw: Any, folder: str, outside: str) -> Mutant:
    """Mutate the recording in ``folder`` in place (its copy); ``outside`` is a folder beside it."""
    m = Mutant([])
    for _ in range(draw(st.integers(1, 2))):
        names = _files(folder)
        name = draw(st.sampled_from(names))
        path = os.path.join(folder, name)
        op = draw(st.sampled_from(["json", "json", "json", "bytes", "escape"]))
        if os.path.islink(path):
            continue
        if op == "escape" and m.escaped is None:
            _escape(draw, folder, outside, name, m)
        elif op == "json" and name.endswith(JSON_NAMES):
            _mutate_json(draw, path, m)
        else:
            _mutate_bytes(draw, path, m)
    if draw(st.integers(0, 9)) > 0:  # mostly: sizes and CRC-32s made consistent again
        fix_checksums(folder)
        m.ops.append("checksums fixed")
    return m


NESTED_CONTENT = frozenset({"infos", "options", "stats", "settings", "writer", "repr", "nvec", "bounds", "chunks", "counters"})


def field_paths(doc: Any, depth: int = 5) -> list[tuple]:
    """Every field of a document a reader relies on, once per list (its first item), not inside infos and stats."""
    out: list[tuple] = []
    stack: list[tuple[tuple, Any]] = [((), doc)]
    while stack:
        path, value = stack.pop()
        if path:
            out.append(path)
        if len(path) >= depth or (path and path[-1] in NESTED_CONTENT):
            continue
        if isinstance(value, dict):
            stack.extend(((*path, k), v) for k, v in value.items())
        elif isinstance(value, list) and value and not isinstance(value[0], int | float | str):
            stack.append(((*path, 0), value[0]))
    return sorted(out, key=repr)


def wrong_values(value: Any) -> list[Any]:
    """A field's wrong stand-ins (deleting it is the caller's): another type, and for numbers a huge and a negative one."""
    if isinstance(value, bool):
        return ["yes"]
    if isinstance(value, int | float):
        return ["7", 2**62, -1]
    if isinstance(value, str):
        return [7, "../outside/x"]
    if value is None:
        return [[]]
    return [None, {} if isinstance(value, list) else []]


def set_field(path: str, where: tuple, value: Any, delete: bool) -> None:
    """Rewrite the JSON file ``path`` (or ``.json.zst``) with the field at ``where`` deleted or set to ``value``."""
    doc = json.loads(batch_text(path))
    parent = _get(doc, where[:-1])
    if delete:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    replace(path, stored_bytes(path, _dumps(doc)))
