"""One batch of a trace on disk: its files checked, its episodes decoded.

``BatchFiles`` is the part of reading that needs no manifest index: given a
batch entry it checks the batch's files against the sizes and CRC-32s the
manifest names, parses the batch's ``.json``, memory-maps the ``.bin``
(arrays handed out are read-only views, no copy) and decompresses compressed
arrays when their episode is read, keeping a small cache of decoded arrays.
``TraceReader`` indexes recordings on top of it; exporters (Arrow, Minari, a
Ray read task) use it to read one batch without indexing a whole recording.
"""

from __future__ import annotations

import json
import mmap
import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .atomic import file_crc32
from .compression import decompress_into
from .errors import EnvrecError
from .infos import decode_json
from .trace_format import BatchEntry, Manifest

__all__ = ["BatchFiles", "Episode", "TraceError"]

DECODED_CACHE_BYTES = 256 << 20  # decompressed arrays kept for episodes read again

_KNOWN_KEYS = frozenset({
    "observations", "actions", "rewards", "terminations", "truncations", "infos", "episode_id",
    "seed", "options", "length", "return", "ended_by", "complete",
})


class TraceError(EnvrecError):
    """A trace on disk is missing, incomplete or not a trace."""


@dataclass
class Episode:
    """One recorded episode. ``observations`` has one row more than ``actions``."""

    index: int
    episode_id: int
    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: list
    seed: int | None
    options: Any
    length: int
    total_reward: float | None
    ended_by: str
    complete: bool
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Packed:
    """A compressed array's descriptor, decompressed when its episode is read."""

    desc: dict


class BatchFiles:
    """Reads batches of the recordings in ``directory``; ``verify`` checks each batch's CRC-32 as it is loaded."""

    def __init__(self, directory: str, verify: bool = True) -> None:
        self.directory = directory
        self.verify = verify
        self._maps: dict[str, Any] = {}
        self._decoded: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._decoded_bytes = 0

    def check(self, entry: Mapping[str, Any], checksums: bool = True) -> list[str]:
        """Problems with a batch's files (missing, wrong size, wrong CRC-32); empty when complete."""
        problems = []
        for key, size_key, crc_key in (("fn", "json_bytes", "json_crc32"), ("bin", "bin_bytes", "bin_crc32")):
            name = entry.get(key)
            if name is None:
                continue
            path = os.path.join(self.directory, name)
            if os.path.basename(name) != name:
                problems.append(f"{name}: names a file outside the folder")
            elif not os.path.exists(path):
                problems.append(f"{name}: missing")
            elif size_key in entry and os.path.getsize(path) != entry[size_key]:
                problems.append(f"{name}: {os.path.getsize(path)} bytes, the manifest says {entry[size_key]}")
            elif checksums and crc_key in entry and file_crc32(path) != entry[crc_key]:
                problems.append(f"{name}: its CRC-32 differs from the manifest's (the file was changed or damaged)")
        return problems

    def load(self, entry: BatchEntry) -> list:
        """The batch's raw episode records (arrays mapped, compressed ones still packed); ``TraceError`` if damaged."""
        problems = self.check(entry, checksums=self.verify)
        if problems:
            raise TraceError(f"batch {entry['fn']} in {self.directory} is damaged: {'; '.join(problems)}")
        with open(os.path.join(self.directory, entry["fn"]), "rb") as f:
            return json.load(f, object_hook=self._decode_ndarray)["episodes"]

    def episodes(self, manifest: Manifest, entry: BatchEntry, first_index: int | None = None) -> list[Episode]:
        """Every episode of one batch; indices count from ``first_index`` (default: the entry's ``first``)."""
        start = entry["first"] if first_index is None else first_index
        return [self.episode(manifest, start + i, raw) for i, raw in enumerate(self.load(entry))]

    def episode(self, manifest: Manifest, index: int, raw: dict) -> Episode:
        """One raw episode record as an ``Episode`` (Dict/Tuple nesting rebuilt, arrays decompressed)."""
        rewards = self._unpack(raw["rewards"])
        return Episode(
            index=index,
            episode_id=raw.get("episode_id", index),
            observations=_shape(self._unpack(raw["observations"]), manifest.get("observation_space")),
            actions=_shape(self._unpack(raw["actions"]), manifest.get("action_space")),
            rewards=rewards,
            terminations=self._unpack(raw.get("terminations")),
            truncations=self._unpack(raw.get("truncations")),
            infos=[decode_json(i) for i in raw.get("infos", [])],
            seed=raw.get("seed"),
            options=decode_json(raw.get("options")),
            length=raw.get("length", len(rewards)),
            total_reward=raw.get("return"),
            ended_by=raw.get("ended_by", "unknown"),
            complete=raw.get("complete", True),
            extra={k: v for k, v in raw.items() if k not in _KNOWN_KEYS},
        )

    def close(self) -> None:
        """Forget the memory maps and decoded arrays (arrays handed out keep theirs alive)."""
        self._maps.clear()
        self._decoded.clear()
        self._decoded_bytes = 0

    def _decode_ndarray(self, o: dict) -> Any:
        if o.get("__type") != "ndarray":
            return o
        shape, dtype = tuple(o["shape"]), np.dtype(o["dtype"])
        if "codec" in o:
            return _Packed(o)
        if o["size"] == 0:
            return np.empty(shape, dtype)
        arr = np.ndarray(shape, dtype=dtype, buffer=self._map(o["npyfile"]), offset=o["npyoff"], order="C")
        return arr

    def _unpack(self, value: Any) -> Any:
        """``value`` with every compressed array in it decompressed."""
        if isinstance(value, _Packed):
            return self._decompress(value.desc)
        if isinstance(value, dict):
            return {k: self._unpack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._unpack(v) for v in value]
        return value

    def _decompress(self, o: dict) -> np.ndarray:
        key = (o["npyfile"], o["npyoff"])
        arr = self._decoded.get(key)
        if arr is not None:
            self._decoded.move_to_end(key)
            return arr
        shape, dtype = tuple(o["shape"]), np.dtype(o["dtype"])
        arr = np.empty(shape, dtype)
        if arr.nbytes != o.get("raw_size", arr.nbytes):
            raise TraceError(f"{o['npyfile']}: a compressed array of shape {shape} says it holds {o['raw_size']} bytes")
        row_bytes = arr.nbytes // shape[0] if shape and shape[0] else 0
        with memoryview(self._map(o["npyfile"])) as whole, whole[o["npyoff"] : o["npyoff"] + o["size"]] as stored:
            try:
                decompress_into(arr.data.cast("B"), stored, o["codec"], o["chunks"], row_bytes)
            except Exception as exc:  # the codecs' errors have no common base class
                raise TraceError(
                    f"{o['npyfile']}: a {o['codec']} array at offset {o['npyoff']} does not decompress: {exc}"
                ) from exc
        arr.flags.writeable = False  # as read-only as the memory-mapped ones
        self._decoded[key] = arr
        self._decoded_bytes += arr.nbytes
        while self._decoded_bytes > DECODED_CACHE_BYTES and len(self._decoded) > 1:
            _, old = self._decoded.popitem(last=False)
            self._decoded_bytes -= old.nbytes
        return arr

    def _map(self, name: str):
        mm = self._maps.get(name)
        if mm is None:
            if os.path.basename(name) != name:
                raise TraceError(f"a batch names {name!r}, a file outside {self.directory}")
            with open(os.path.join(self.directory, name), "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps[name] = mm
        return mm


def _shape(value: Any, spec: dict | None) -> Any:
    """Rebuild Dict/Tuple nesting from the manifest's space spec (Tuple -> tuple)."""
    if spec is None:
        return value
    t = spec["type"]
    if t == "Dict":
        return {k: _shape(value[k], sub) for k, sub in spec["spaces"]}
    if t == "Tuple":
        return tuple(_shape(v, sub) for v, sub in zip(value, spec["spaces"], strict=True))
    return value
