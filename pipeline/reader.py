"""Reading traces back: ``TraceReader`` and gym-recording's ``scan_recorded_traces``.

Arrays are memory-mapped from the ``.bin`` files (no copy, read-only);
compressed ones (see ``envrec.compression``) are decompressed when their
episode is read, each array once while it stays in a small cache. Only
batches the manifest names are read, so a recording still running is read up
to its last committed batch; ``refresh()`` picks up batches committed since.
A batch whose files are missing, not the size the manifest says, or (with
``verify=True``, the default) whose CRC-32 differs raises ``TraceError``
naming the file.
"""

from __future__ import annotations

import glob
import json
import mmap
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from .atomic import file_crc32
from .compression import decompress_into
from .errors import EnvrecError
from .infos import decode_json
from .trace_format import MANIFEST_SUFFIX, BatchEntry, Manifest, is_segment, read_manifest, recording_batches

__all__ = ["Episode", "Recording", "TraceError", "TraceReader", "scan_recorded_traces"]


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


DECODED_CACHE_BYTES = 256 << 20  # decompressed arrays kept for episodes read again


@dataclass(frozen=True)
class _Packed:
    """A compressed array's descriptor, decompressed when its episode is read."""

    desc: dict


@dataclass(frozen=True)
class Recording:
    """One recording in the folder: its head manifest and every batch entry it names, oldest first."""

    path: str
    manifest: Manifest
    batches: list[BatchEntry]


@dataclass(frozen=True)
class _BatchRef:
    manifest: Manifest
    entry: BatchEntry
    first_index: int  # index of its first episode across the reader


class TraceReader:
    """Episodes of every recording in ``directory`` (or only of ``prefix``), in order."""

    def __init__(self, directory: str | os.PathLike, prefix: str | None = None, verify: bool = True) -> None:
        self.directory = os.fspath(directory)
        self.prefix = prefix
        self.verify = verify  # check each batch's CRC-32 when it is first loaded (reads its files once)
        self._maps: dict[str, Any] = {}
        self._cache: tuple[int, list] | None = None
        self._decoded: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._decoded_bytes = 0
        self.manifests: list[Manifest] = []  # the head manifests
        self.recordings: list[Recording] = []
        self._batches: list[_BatchRef] = []
        self.refresh()

    def refresh(self) -> None:
        """Re-read the manifests (a recording may have committed batches since)."""
        for _ in range(3):  # a file named by a head we read may be evicted before we read it: read again
            try:
                self._read_manifests()
                return
            except FileNotFoundError as exc:
                missing = exc
        raise TraceError(f"a manifest segment in {self.directory} keeps vanishing while it is read: {missing}")

    def _read_manifests(self) -> None:
        pattern = f"{glob.escape(self.prefix)}{MANIFEST_SUFFIX}" if self.prefix else f"*{MANIFEST_SUFFIX}"
        paths = sorted(glob.glob(os.path.join(glob.escape(self.directory), pattern)))
        heads: list[tuple[str, Manifest]] = []
        for path in paths:
            try:
                manifest = read_manifest(path)
            except FileNotFoundError:
                raise
            except (OSError, ValueError) as exc:
                raise TraceError(f"cannot read the manifest {path}: {exc}") from exc
            if not is_segment(manifest):  # segments are read through the head that counts them
                heads.append((path, manifest))
        if not heads:
            raise TraceError(f"no trace manifest ({pattern}) in {self.directory}")
        self.manifests, self.recordings, self._batches = [], [], []
        n = 0
        for path, manifest in heads:
            try:
                entries = recording_batches(self.directory, manifest)
            except ValueError as exc:
                raise TraceError(f"cannot read a manifest segment of {path}: {exc}") from exc
            self.manifests.append(manifest)
            self.recordings.append(Recording(path, manifest, entries))
            for entry in entries:
                self._batches.append(_BatchRef(manifest, entry, n))
                n += entry["len"]
        if n == 0:
            failed = [(p, m["error"]) for p, m in heads if m.get("error")]
            if failed:
                raise TraceError(
                    "no episode was recorded: "
                    + "; ".join(f"{os.path.basename(p)} says the recording failed: {why}" for p, why in failed)
                )
        self._len = n
        self._cache = None

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Episode]:
        for b, ref in enumerate(self._batches):
            for i, raw in enumerate(self._load_batch(b)):
                yield self._episode(ref, ref.first_index + i, raw)

    def __getitem__(self, index: int) -> Episode:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"episode {index} out of range: the trace has {self._len}")
        lo, hi = 0, len(self._batches) - 1
        while lo < hi:  # the last batch whose first_index <= index
            mid = (lo + hi + 1) // 2
            if self._batches[mid].first_index <= index:
                lo = mid
            else:
                hi = mid - 1
        ref = self._batches[lo]
        return self._episode(ref, index, self._load_batch(lo)[index - ref.first_index])

    # -- files -------------------------------------------------------------
    def check_batch(self, entry: Mapping[str, Any], checksums: bool = True) -> list[str]:
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

    def _load_batch(self, b: int) -> list:
        if self._cache is not None and self._cache[0] == b:
            return self._cache[1]
        entry = self._batches[b].entry
        problems = self.check_batch(entry, checksums=self.verify)
        if problems:
            raise TraceError(f"batch {entry['fn']} in {self.directory} is damaged: {'; '.join(problems)}")
        with open(os.path.join(self.directory, entry["fn"]), "rb") as f:
            episodes = json.load(f, object_hook=self._decode_ndarray)["episodes"]
        self._cache = (b, episodes)
        return episodes

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

    def _episode(self, ref: _BatchRef, index: int, raw: dict) -> Episode:
        m = ref.manifest
        known = {
            "observations", "actions", "rewards", "terminations", "truncations", "infos", "episode_id",
            "seed", "options", "length", "return", "ended_by", "complete",
        }
        rewards = self._unpack(raw["rewards"])
        return Episode(
            index=index,
            episode_id=raw.get("episode_id", index),
            observations=_shape(self._unpack(raw["observations"]), m.get("observation_space")),
            actions=_shape(self._unpack(raw["actions"]), m.get("action_space")),
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
            extra={k: v for k, v in raw.items() if k not in known},
        )

    def close(self) -> None:
        """Forget the memory maps (arrays handed out keep theirs alive)."""
        self._maps.clear()
        self._cache = None
        self._decoded.clear()
        self._decoded_bytes = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


def scan_recorded_traces(
    directory: str | os.PathLike,
    episode_cb: Callable[[Any, Any, Any], Any],
    max_episodes: int | None = None,
) -> None:
    """gym-recording's entry point: ``episode_cb(observations, actions, rewards)`` per episode."""
    with TraceReader(directory) as reader:
        for n, ep in enumerate(reader):
            if max_episodes is not None and n >= max_episodes:
                return
            episode_cb(ep.observations, ep.actions, ep.rewards)
