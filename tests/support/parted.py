"""Recordings in episode parts made from recordings written whole, for readers' tests (and their fuzzing).

``rewrite_in_parts`` reads a recording envrec wrote and writes it again with
every episode longer than ``part_steps`` cut into parts, laid out as
``docs/format.md`` ("Episode parts") says the serializer lays them: a part
that continues ends its batch, the part after it begins the next batch, part
records carry ``part``, their entries ``head_part``/``continues``, file
names ``.pPPPPPP``, sizes and CRC-32s those of the files written. Arrays are
written raw. ``evict_oldest`` deletes the oldest batches as a disk budget
does. The real serializer's parts are tested end to end beside these.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import numpy as np

from envrec.formats.trace_format import ndarray_descriptor, read_manifest, write_manifest
from envrec.read.batch_files import BatchFiles

__all__ = ["evict_oldest", "rewrite_in_parts"]


def _records(folder: str, manifest: dict) -> list[tuple[dict, dict]]:
    """Every episode record of the recording: (its JSON record, its arrays as ``BatchFiles`` reads them)."""
    files = BatchFiles(folder)
    out = []
    for entry in manifest["batches"]:
        with open(os.path.join(folder, entry["fn"]), "rb") as f:
            doc = json.load(f)
        for raw, ep in zip(doc["episodes"], files.episodes(manifest, entry), strict=True):
            out.append((raw, {"observations": ep.observations, "actions": ep.actions, "rewards": ep.rewards,
                              "terminations": ep.terminations, "truncations": ep.truncations}))
    return out


def _rows(value: Any, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of a field (Dict leaves by key, Tuple leaves in order, Text leaves as lists)."""
    if isinstance(value, dict):
        return {k: _rows(v, lo, hi) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_rows(v, lo, hi) for v in value)
    return value[lo:hi]


def _cut(raw: dict, arrays: dict, part_steps: int, dangling: bool) -> list[tuple[dict, dict]]:
    """The part records of one episode (itself when it is not longer than ``part_steps``); ``dangling``: its
    last part too says it continues (as when it ended right after a cut)."""
    n = int(arrays["rewards"].shape[0])
    if n <= part_steps:
        return [(raw, arrays)]
    out = []
    for p, k in enumerate(range(0, n, part_steps)):
        m = min(part_steps, n - k)
        continues = k + m < n or dangling
        rec = dict(raw, length=m, infos=raw["infos"][k : k + m + 1] if raw.get("infos") else raw.get("infos"),
                   part={"index": p, "first_step": k, "continues": continues})
        rec["return"] = float(np.sum(arrays["rewards"][k : k + m], dtype=np.float64))
        if continues:
            rec["ended_by"], rec["complete"] = None, False
        out.append((rec, {"observations": _rows(arrays["observations"], k, k + m + 1),
                          **{f: _rows(arrays[f], k, k + m) for f in ("actions", "rewards", "terminations", "truncations")}}))
    return out


def _layout(records: list[tuple[dict, dict]], per_batch: int) -> list[list[tuple[dict, dict]]]:
    """Records into batches: at most ``per_batch`` each, and a batch ends after a part that continues."""
    batches: list[list] = [[]]
    for rec in records:
        if len(batches[-1]) >= per_batch:
            batches.append([])
        batches[-1].append(rec)
        if rec[0].get("part", {}).get("continues"):
            batches.append([])
    return [b for b in batches if b]


class _Bin:
    def __init__(self, name: str) -> None:
        self.name, self.data = name, bytearray()
        self.array_bytes = 0  # the arrays' bytes, padding not counted (the manifest's array_bytes)

    def put(self, value: Any) -> Any:
        """A field as the batch JSON holds it (Dict: an object, Tuple: a list, Text: strings), arrays appended."""
        if isinstance(value, dict):
            return {k: self.put(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return [self.put(v) for v in value]
        if isinstance(value, list):  # a Text leaf
            return value
        a = np.ascontiguousarray(value)
        self.data += b"\0" * (-len(self.data) % 8)
        desc = ndarray_descriptor(a.shape, a.dtype.str, self.name, len(self.data), a.nbytes)
        self.data += a.tobytes()
        self.array_bytes += a.nbytes
        return desc


def _write_batch(folder: str, prefix: str, first: int, records: list[tuple[dict, dict]]) -> dict:
    head = records[0][0].get("part", {})
    stem = f"{prefix}.ep{first:09d}" + (f".p{head['index']:06d}" if head.get("index", 0) >= 1 else "")
    json_name, bin_name = stem + ".json", stem + ".bin"
    b = _Bin(bin_name)
    episodes = [dict(raw, **{k: b.put(v) for k, v in arrays.items()}) for raw, arrays in records]
    doc = json.dumps({"episodes": episodes}, allow_nan=False).encode()
    for name, data in ((json_name, doc), (bin_name, bytes(b.data))):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    entry = {"first": first, "len": len(records), "fn": json_name, "bin": bin_name,
             "steps": sum(int(a["rewards"].shape[0]) for _, a in records), "json_bytes": len(doc), "bin_bytes": len(b.data),
             "array_bytes": b.array_bytes, "json_crc32": zlib.crc32(doc), "bin_crc32": zlib.crc32(bytes(b.data))}
    if head.get("index", 0) >= 1:
        entry["head_part"] = {"index": head["index"], "first_step": head["first_step"]}
    if records[-1][0].get("part", {}).get("continues"):
        entry["continues"] = True
    return entry


def rewrite_in_parts(src: str, dst: str, part_steps: int, per_batch: int = 4, dangling: bool = False) -> dict:
    """Write the one recording in ``src`` into the new folder ``dst`` with its long episodes in parts.

    Args:
        src: a folder holding one recording written by envrec.
        dst: the folder to write (created).
        part_steps: episodes longer than this are cut into parts of this many steps (the last one shorter).
        per_batch: records per batch at most (a batch also ends after a part that continues).
        dangling: the last part of each episode cut says it continues too, and the next batch starts the next
            episode: what the serializer writes when an episode ends right after a cut made while idle.

    Returns:
        The manifest written.
    """
    (path,) = [n for n in os.listdir(src) if n.endswith(".manifest.json") and ".m0" not in n]
    manifest = read_manifest(os.path.join(src, path))
    records = [part for raw, arrays in _records(src, manifest) for part in _cut(raw, arrays, part_steps, dangling)]
    os.makedirs(dst, exist_ok=True)
    entries, episode = [], 0
    for batch in _layout(records, per_batch):
        if batch[0][0].get("part", {}).get("index", 0) >= 1:
            episode -= 1  # its first record is the episode the batch before ended with
        entries.append(_write_batch(dst, manifest["prefix"], episode, batch))
        episode += len(batch)
    manifest = dict(manifest, batches=entries)
    counters = dict(manifest.get("counters") or {})
    counters.update(batches=len(entries), episodes=sum(e["len"] - (1 if "head_part" in e else 0) for e in entries),
                    steps=sum(e["steps"] for e in entries), bytes=sum(e["json_bytes"] + e["bin_bytes"] for e in entries))
    manifest["counters"] = counters
    write_manifest(os.path.join(dst, path), manifest)
    return manifest


def evict_oldest(folder: str, batches: int) -> dict:
    """Delete the recording's ``batches`` oldest batches and drop them from its manifest, as ``max_bytes`` does."""
    (path,) = [n for n in os.listdir(folder) if n.endswith(".manifest.json") and ".m0" not in n]
    manifest = read_manifest(os.path.join(folder, path))
    gone, kept = manifest["batches"][:batches], manifest["batches"][batches:]
    evicted = dict(manifest.get("evicted") or {"batches": 0, "episodes": 0, "steps": 0, "bytes": 0})
    for e in gone:
        evicted["batches"] += 1
        evicted["episodes"] += e["len"] - (1 if "head_part" in e else 0)
        evicted["steps"] += e["steps"]
        evicted["bytes"] += e["json_bytes"] + e["bin_bytes"]
    manifest = dict(manifest, batches=kept, evicted=evicted)
    write_manifest(os.path.join(folder, path), manifest)
    for e in gone:
        for name in (e["fn"], e["bin"]):
            os.remove(os.path.join(folder, name))
    return manifest
