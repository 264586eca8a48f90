"""Small files that would make a reader allocate gigabytes: the bombs the readers must refuse within seconds.

Each maker rewrites the first batch of a copy of a compressed recording
(``compression="zstd"``: its batch JSON is a ``.json.zst``) and fixes the
manifest's sizes and CRC-32s, so that only the bound under test refuses it:

* ``json_bomb``: a ``.json.zst`` of a few KB holding ``text_mib`` MiB of
  ``[],[],...`` inside ``{"episodes": [...]}`` (parsed whole, 100 MiB of it
  costs ~5 GB of Python lists);
* ``frame_bomb``: the first episode's observations stored as one zstd frame
  of zeros that declares ``content`` bytes (2 GiB: 65 KB stored) while the
  array's rows need a few hundred;
* ``rows_bomb``: the first episode made ``rows`` steps long, every array of
  it compressed zeros (2 GiB of observations in ~100 KB), the manifest's
  ``steps`` and ``array_bytes`` rewritten to match: a file that is what it
  says, only too large for the memory a reader has.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
import zstandard

from .batch_json import load_batch
from .fuzz_mutants import fix_checksums

__all__ = ["frame_bomb", "json_bomb", "rows_bomb"]

_MIB = 1 << 20


def _first_batch(folder: str) -> tuple[str, dict, dict]:
    (name,) = [n for n in os.listdir(folder) if n.endswith(".manifest.json") and ".m0" not in n]
    manifest = json.load(open(os.path.join(folder, name)))
    return os.path.join(folder, name), manifest, manifest["batches"][0]


def _zeros_frame(nbytes: int) -> bytes:
    """One zstd frame of ``nbytes`` zeros that says its size, built 1 MiB at a time (2 GiB in ~0.6 s)."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=3, write_content_size=True).stream_writer(out, size=nbytes, closefd=False) as w:
        for start in range(0, nbytes, _MIB):
            w.write(bytes(min(_MIB, nbytes - start)))
    return out.getvalue()


def json_bomb(folder: str, text_mib: int) -> str:
    """The first batch's ``.json.zst`` made ``text_mib`` MiB of empty lists; the file's name."""
    _, _, entry = _first_batch(folder)
    assert entry["fn"].endswith(".json.zst")
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(out, closefd=False) as w:
        w.write(b'{"episodes": [')
        piece = b"[]," * (_MIB // 3)
        for _ in range(text_mib):
            w.write(piece)
        w.write(b"[]]}")
    with open(os.path.join(folder, entry["fn"]), "wb") as f:
        f.write(out.getvalue())
    fix_checksums(folder)
    return entry["fn"]


def _append(folder: str, entry: dict, data: bytes) -> int:
    """``data`` appended to the batch's ``.bin`` at an 8-byte boundary; its offset."""
    path = os.path.join(folder, entry["bin"])
    with open(path, "ab") as f:
        f.seek(0, os.SEEK_END)
        pad = -f.tell() % 8
        f.write(b"\0" * pad)
        offset = f.tell()
        f.write(data)
    return offset


def _write_batch(folder: str, entry: dict, doc: dict) -> None:
    with open(os.path.join(folder, entry["fn"]), "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(json.dumps(doc).encode()))


def frame_bomb(folder: str, content: int = 2 << 30) -> str:
    """The first episode's observations made one chunk whose frame declares ``content`` bytes of zeros."""
    _, _, entry = _first_batch(folder)
    doc = load_batch(os.path.join(folder, entry["fn"]))
    obs = doc["episodes"][0]["observations"]
    frame = _zeros_frame(content)
    rows = obs["shape"][0]
    obs.update(codec="zstd", chunks=[[rows, len(frame)]], size=len(frame), npyoff=_append(folder, entry, frame))
    obs.pop("filter", None)
    _write_batch(folder, entry, doc)
    fix_checksums(folder)
    return entry["fn"]


def _zeros_array(folder: str, entry: dict, desc: dict, rows: int) -> None:
    """``desc`` made ``rows`` rows of compressed zeros, one chunk of at most 1 GiB each, in the batch's ``.bin``."""
    row_bytes = int(np.prod(desc["shape"][1:], dtype=np.int64)) * np.dtype(desc["dtype"]).itemsize
    per_chunk = max(1, (1 << 30) // max(1, row_bytes))
    chunks, stored = [], []
    for start in range(0, rows, per_chunk):
        n = min(per_chunk, rows - start)
        stored.append(_zeros_frame(n * row_bytes))
        chunks.append([n, len(stored[-1])])
    data = b"".join(stored)
    desc.update(shape=[rows, *desc["shape"][1:]], codec="zstd", chunks=chunks, size=len(data),
                npyoff=_append(folder, entry, data))
    desc.pop("filter", None)
    desc.pop("raw_size", None)


def rows_bomb(folder: str, observation_bytes: int = 2 << 30) -> str:
    """The first batch's first episode made as long as ``observation_bytes`` of observations need, every array
    of it compressed zeros, and the manifest saying so (``steps``, ``array_bytes``)."""
    manifest_path, manifest, entry = _first_batch(folder)
    doc = load_batch(os.path.join(folder, entry["fn"]))
    raw = doc["episodes"][0]
    obs = raw["observations"]
    row_bytes = int(np.prod(obs["shape"][1:], dtype=np.int64)) * np.dtype(obs["dtype"]).itemsize
    steps = observation_bytes // row_bytes
    old_steps = raw["rewards"]["shape"][0]
    added = 0
    for key, rows in (("observations", steps + 1), ("actions", steps), ("rewards", steps), ("terminations", steps),
                      ("truncations", steps)):
        desc = raw[key]
        before = int(np.prod(desc["shape"], dtype=np.int64)) * np.dtype(desc["dtype"]).itemsize
        _zeros_array(folder, entry, desc, rows)
        added += int(np.prod(desc["shape"], dtype=np.int64)) * np.dtype(desc["dtype"]).itemsize - before
    raw["length"] = steps
    raw.pop("infos", None)  # infos are one per step: left out, as a trace written without infos
    _write_batch(folder, entry, doc)
    entry["steps"] += steps - old_steps
    entry["array_bytes"] += added
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    fix_checksums(folder)
    return entry["fn"]
