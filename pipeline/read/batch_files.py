"""One batch of a trace on disk: its files checked, its episodes decoded.

``BatchFiles`` is the part of reading that needs no manifest index: given a
batch entry it checks the batch's files against the sizes and CRC-32s the
manifest names, parses the batch's ``.json`` (a ``.json.zst`` decompressed
first, at most ``MAX_BATCH_JSON_BYTES`` of it, and no more than parsing it may cost:
``json_docs.JsonBudget``), memory-maps the ``.bin``
(arrays handed out are read-only views, no copy) and decompresses compressed
arrays when their episode is read, keeping a small cache of decoded arrays.
``TraceReader`` indexes recordings on top of it; exporters (Arrow, Minari, a
Ray read task) use it to read one batch without indexing a whole recording.

Nothing in a batch is trusted: its files are opened inside the folder only
(``envrec.formats.inside``), its JSON is checked against the manifest's spaces
(``envrec.formats.trace_checks``) before any field is used, every array's bytes must
lie inside its file, and an info that does not decode names itself. Every
failure is a ``TraceError`` naming the batch and the field.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TraceError
from ..formats.compression import JSON_ZST_SUFFIX, decompress_frames, decompress_into
from ..formats.infos import decode_json
from ..formats.inside import open_inside
from ..formats.part_checks import check_parts, part_of
from ..formats.replay_fields import EPISODE_KEYS
from ..formats.trace_checks import MAX_BATCH_JSON_BYTES, MAX_RATIO, JsonBudget, check_batch, check_sizes, parse_json
from ..formats.trace_format import BatchEntry, Manifest

__all__ = ["BatchFiles", "Episode", "Part", "SavedState", "TraceError"]

DECODED_CACHE_BYTES = 256 << 20  # decompressed arrays kept for episodes read again
BLOCK_BYTES = 8 << 20  # rows handed out at once by blocks(): two default compression chunks

_KNOWN_KEYS = frozenset({
    "observations", "actions", "rewards", "terminations", "truncations", "infos", "episode_id",
    "seed", "options", "length", "return", "ended_by", "complete", "part", *EPISODE_KEYS,
})
_WHERE = "__where"  # the batch and episode a raw record came from, for messages
_FROM = "__from"  # (batch .json, record number): the record's Part
_ARRAY_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")
# what the info decoder raises on a tagged object it cannot decode (a bad tag's fields)
_DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError, struct.error)


@dataclass(frozen=True)
class SavedState:
    """A simulator's state recorded mid-episode (``RecordTrace(snapshot=..., snapshot_every=N)``).

    Attributes:
        step: the steps taken when it was taken: it is the state of observation ``step`` (after
            action ``step - 1``), counted from the episode's reset.
        rng: the state of ``env.unwrapped.np_random``'s bit generator then (None when the env had none).
        state: what the snapshot hook's ``take`` returned.
    """

    step: int
    rng: dict | None
    state: np.ndarray


@dataclass(frozen=True)
class Part:
    """Where one part of an episode lies: ``Episode.parts`` holds one per part it was read from.

    Attributes:
        batch: the batch's JSON file (``.json``, or ``.json.zst`` when compressed: the manifest entry's
            ``fn``), relative to the reader's folder.
        record: the record's position in the batch's ``episodes`` list.
        index: the part's number in its episode (0 for the first part, and for an episode written whole).
        first_step: the episode step number of the part's first action.
        length: the part's steps.
        continues: the part is continued by the next one (in the next batch).
    """

    batch: str
    record: int
    index: int
    first_step: int
    length: int
    continues: bool


@dataclass
class Episode:
    """One recorded episode, as ``TraceReader`` returns it. ``observations`` has one row more than ``actions``.

    An episode written in parts (a long one, committed while it ran) is stitched into one ``Episode``
    (``parts`` tells from what); its step numbers start at ``first_step``, which is 0 unless the oldest
    parts were evicted by a disk budget (``max_bytes``).

    Attributes:
        index: its position across the reader (0, 1, ...).
        episode_id: its number in its recording (the recorder's count of resets).
        observations: N+1 rows, the observation before step ``first_step`` first (the reset observation
            when ``first_step`` is 0; a dict or tuple of arrays for Dict/Tuple spaces).
        actions: N rows (a dict or tuple of arrays for Dict/Tuple spaces): row i is step ``first_step + i``.
        rewards, terminations, truncations: N rows each.
        infos: N+1 dicts, the reset info (or the info of step ``first_step - 1``) first.
        seed, options: what ``reset`` was given (None when nothing).
        rng: the state of ``env.unwrapped.np_random``'s bit generator just before an unseeded reset (None:
            seeded, or recorded by an older envrec); replay starts the episode from it.
        rng_inferred: ``rng`` was read after the previous episode's reset, not just before this one (a
            same-step autoreset: SB3's VecEnvs, Gymnasium's ``SAME_STEP``); it holds when the env draws no
            random numbers while stepping.
        reset_snapshot: a snapshot hook's state taken just before the reset (None: no hook).
        snapshots: the states taken mid-episode every ``snapshot_every`` steps (``SavedState``), oldest first.
        length: N, the number of steps read.
        total_reward: the sum of ``rewards``; None when it is not finite.
        ended_by: "terminated", "truncated", or why the recording stopped inside it: "reset" (reset
            before it ended), "close", "crash" (the env process died); None while it continues: its last
            part read says so and nothing came after it yet (a recording still running), or the next part
            is damaged.
        complete: True when the episode ended by itself (terminated or truncated); False while it continues.
        first_step: the episode step number of ``actions[0]``: 0, or where its oldest kept part starts.
        parts: one ``Part`` per part it was stitched from, in order (one for an episode
            written whole): the batch file and record each came from, its part index, first step and length.
        extra: fields of the episode record this envrec does not know (written by a newer one).
    """

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
    ended_by: str | None
    complete: bool
    first_step: int = 0
    parts: tuple[Part, ...] = ()
    extra: dict = field(default_factory=dict)
    rng: dict | None = None
    rng_inferred: bool = False
    reset_snapshot: np.ndarray | None = None
    snapshots: tuple[SavedState, ...] = ()


@dataclass(frozen=True)
class _Packed:
    """A compressed array's descriptor, decompressed when its episode is read."""

    desc: dict
    where: str  # the batch and field, for messages


class BatchFiles:
    """Reads batches of the recordings in ``directory``; ``verify`` checks each batch's CRC-32 as it is loaded."""

    def __init__(self, directory: str, verify: bool = True) -> None:
        self.directory = directory
        self.verify = verify
        self._maps: dict[str, Any] = {}
        self._decoded: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._decoded_bytes = 0

    def check(self, entry: Mapping[str, Any], checksums: bool = True) -> list[str]:
        """Problems with a batch's files (missing, outside the folder, wrong size, wrong CRC-32); empty when complete."""
        problems = []
        for key, size_key, crc_key in (("fn", "json_bytes", "json_crc32"), ("bin", "bin_bytes", "bin_crc32")):
            name = entry.get(key)
            if name is None:
                continue
            try:
                f = open_inside(self.directory, name, f"a batch's {key}")
            except FileNotFoundError:
                problems.append(f"{name}: missing")
                continue
            except TraceError as exc:
                problems.append(str(exc))
                continue
            with f:
                size = os.fstat(f.fileno()).st_size
                if size_key in entry and size != entry[size_key]:
                    problems.append(f"{name}: {size} bytes, the manifest says {entry[size_key]}")
                elif checksums and crc_key in entry and _crc32(f, size) != entry[crc_key]:
                    problems.append(f"{name}: its CRC-32 differs from the manifest's (the file was changed or damaged)")
        return problems

    def load(self, entry: BatchEntry, manifest: Mapping[str, Any] | None = None) -> list:
        """The batch's raw episode records (arrays mapped, compressed ones still packed), checked against the
        spaces ``manifest`` names; ``TraceError`` naming the batch when it is damaged."""
        problems = self.check(entry, checksums=self.verify)
        if problems:
            raise TraceError(f"batch {entry['fn']} in {self.directory} is damaged: {'; '.join(problems)}")
        what = entry["fn"]
        try:
            with open_inside(self.directory, what, what) as f:
                data = f.read()
        except FileNotFoundError:
            raise TraceError(f"batch {what} in {self.directory} is damaged: {what}: missing") from None
        if what.endswith(JSON_ZST_SUFFIX):
            try:
                data = decompress_frames(data, min(MAX_BATCH_JSON_BYTES, MAX_RATIO * len(data)), JsonBudget(what))
            except TraceError as exc:  # JsonBudget's, naming the file already
                raise TraceError(f"batch {what} in {self.directory} is damaged: {exc}") from None
            except ValueError as exc:
                raise TraceError(f"batch {what} in {self.directory} is damaged: {what}: {exc}") from None
        episodes = check_batch(parse_json(data, what), manifest or {}, what, entry["len"])
        check_sizes(episodes, entry, what)
        check_parts(episodes, entry, what)
        return [self._arrays(raw, f"{what}: episodes[{i}]", (what, i)) for i, raw in enumerate(episodes)]

    def episodes(self, manifest: Manifest, entry: BatchEntry, first_index: int | None = None) -> list[Episode]:
        """Every episode of one batch; indices count from ``first_index`` (default: the entry's ``first``)."""
        start = entry["first"] if first_index is None else first_index
        return [self.episode(manifest, start + i, raw) for i, raw in enumerate(self.load(entry, manifest))]

    def episode(self, manifest: Manifest, index: int, raw: dict) -> Episode:
        """One raw episode record (from ``load``) as an ``Episode`` (Dict/Tuple nesting rebuilt, arrays decompressed);
        a part of an episode is one ``Episode`` of its own here (``envrec.read.stitch`` joins them)."""
        rewards = self._unpack(raw["rewards"])
        part, first_step, continues = part_of(raw)
        length = raw.get("length", len(rewards))
        batch, record = raw.get(_FROM, ("", 0))
        return Episode(
            index=index,
            episode_id=raw.get("episode_id", index),
            observations=_shape(self._unpack(raw["observations"]), manifest.get("observation_space")),
            actions=_shape(self._unpack(raw["actions"]), manifest.get("action_space")),
            rewards=rewards,
            terminations=self._unpack(raw.get("terminations")),
            truncations=self._unpack(raw.get("truncations")),
            infos=[_decode(i, raw, f"infos[{n}]") for n, i in enumerate(raw.get("infos", []))],
            seed=raw.get("seed"),
            options=_decode(raw.get("options"), raw, "options"),
            length=length,
            total_reward=raw.get("return"),
            ended_by=raw.get("ended_by", "unknown"),
            complete=raw.get("complete", True),
            first_step=first_step,
            parts=(Part(batch, record, part, first_step, length, continues),),
            extra={k: v for k, v in raw.items() if k not in _KNOWN_KEYS and k not in (_WHERE, _FROM)},
            rng=raw.get("rng"),
            rng_inferred=bool(raw.get("rng_inferred")),
            reset_snapshot=_decode_array(raw.get("reset_snapshot"), raw, "reset_snapshot"),
            snapshots=tuple(
                SavedState(s["step"], s.get("rng"), _state(s["state"], raw, f"snapshots[{i}].state"))
                for i, s in enumerate(raw.get("snapshots") or ())
            ),
        )

    def last_part(self, entry: BatchEntry, manifest: Mapping[str, Any] | None = None) -> tuple[Part, int]:
        """The ``Part`` of the batch's last record and its episode's id, read without its arrays: what the first
        record of the batch after it is checked to follow (``stitch.check_part_follows``).

        Raises:
            TraceError: the batch is damaged or holds no record.
        """
        raws = self.load(entry, manifest)
        if not raws:
            raise TraceError(f"{entry['fn']}: holds no record, yet a part is said to continue from it")
        raw = raws[-1]
        index, first_step, continues = part_of(raw)
        batch, record = raw[_FROM]
        return Part(batch, record, index, first_step, _length(raw), continues), raw.get("episode_id", entry["first"] + record)

    def array_codecs(self, entry: BatchEntry, manifest: Mapping[str, Any] | None = None) -> dict[str, str]:
        """How each array of the batch's first episode is stored: ``{"observations": "zstd+xor", "actions": "raw", ...}``
        (Dict/Tuple leaves as ``observations.key``, ``observations[0]``); empty for a batch of no episode."""
        raws = self.load(entry, manifest)
        out: dict[str, str] = {}
        if raws:
            for key in _ARRAY_FIELDS:
                _codecs(raws[0].get(key), key, out)
        return out

    # -- a long record read a few rows at a time (envrec.viewer) ---------------------------------------
    def fields(self, manifest: Manifest, raw: dict) -> dict[str, Any]:
        """The array fields of a raw record (``load``), Dict/Tuple nesting rebuilt as ``episode`` rebuilds it, but
        nothing decompressed: each leaf a read-only view of its file or a compressed array, which ``rows`` and
        ``blocks`` read a few rows at a time (``leaf_shape`` gives its shape). Keys: ``observations``, ``actions``,
        ``rewards``, ``terminations``, ``truncations`` (None when the record has none)."""
        return {
            "observations": _shape(raw["observations"], manifest.get("observation_space")),
            "actions": _shape(raw["actions"], manifest.get("action_space")),
            "rewards": raw["rewards"], "terminations": raw.get("terminations"), "truncations": raw.get("truncations"),
        }

    @staticmethod
    def leaf_shape(leaf: Any) -> tuple[int, ...]:
        """The shape of a leaf of ``fields``: its rows first."""
        return tuple(leaf.desc["shape"]) if isinstance(leaf, _Packed) else tuple(np.shape(leaf))

    def rows(self, leaf: Any, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a leaf of ``fields`` (clipped to its rows): a view of a raw array, or of a
        compressed one only the chunks that hold them, decompressed; ``TraceError`` naming it when they do not."""
        if not isinstance(leaf, _Packed):
            return np.asarray(leaf)[max(0, start):max(0, stop)]
        o, where = leaf.desc, leaf.where
        shape, dtype = tuple(o["shape"]), np.dtype(o["dtype"])
        start, stop = max(0, start), min(stop, shape[0])
        if stop <= start:
            return np.empty((0, *shape[1:]), dtype)
        row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        first_row = stored_at = 0
        picked: list = []
        for rows, nbytes in o["chunks"]:
            if first_row + rows > start and first_row < stop:
                if not picked:
                    run_row, run_at = first_row, stored_at
                picked.append((rows, nbytes))
            elif picked:
                break
            first_row += rows
            stored_at += nbytes
        out = np.empty((sum(r for r, _ in picked), *shape[1:]), dtype)
        begin = o["npyoff"] + run_at
        with memoryview(self._map(o["npyfile"], where)) as whole, whole[begin:begin + sum(n for _, n in picked)] as stored:
            try:
                decompress_into(out.data.cast("B"), stored, o["codec"], picked, row_bytes, o.get("filter"))
            except Exception as exc:  # the codecs' errors have no common base class
                raise TraceError(f"{where}: a {o['codec']} array at offset {o['npyoff']} of {o['npyfile']} does not "
                                 f"decompress: {exc}") from exc
        out.flags.writeable = False
        return out[start - run_row:stop - run_row]

    def blocks(self, leaf: Any, max_bytes: int | None = None) -> Iterator[np.ndarray]:
        """A leaf of ``fields`` in consecutive blocks of rows, about ``max_bytes`` each (default ``BLOCK_BYTES``; a
        compressed one: whole chunks, at least one): a long part read without holding it."""
        max_bytes = BLOCK_BYTES if max_bytes is None else max_bytes
        shape = self.leaf_shape(leaf)
        n = shape[0] if shape else 0
        if isinstance(leaf, _Packed):
            spans, start, size = [], 0, 0
            row_bytes = np.dtype(leaf.desc["dtype"]).itemsize * int(np.prod(shape[1:], dtype=np.int64))
            for rows, _ in leaf.desc["chunks"]:
                size += rows
                if size * row_bytes >= max_bytes:
                    spans.append((start, start + size))
                    start, size = start + size, 0
            if size:
                spans.append((start, start + size))
        else:
            row_bytes = np.asarray(leaf).dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
            step = max(1, max_bytes // max(1, row_bytes))
            spans = [(a, min(n, a + step)) for a in range(0, n, step)]
        for a, b in spans:
            yield self.rows(leaf, a, b)

    def chunk_of(self, leaf: Any, i: int) -> tuple[int, int]:
        """(first, end) rows of the stored chunk of a leaf of ``fields`` that holds row ``i`` (a raw array's row is
        its own chunk): what ``rows`` decompresses for row ``i`` anyway, to be kept by a reader that moves row by row."""
        if not isinstance(leaf, _Packed):
            return i, i + 1
        first = 0
        for rows, _ in leaf.desc["chunks"]:
            if i < first + rows:
                return first, first + rows
            first += rows
        return i, i + 1  # past the end: rows() gives nothing there

    def info(self, raw: dict, i: int) -> Any:
        """Info ``i`` of a raw record (``load``) decoded, alone; ``{}`` when the record has no such info."""
        infos = raw.get("infos") or []
        return _decode(infos[i], raw, f"infos[{i}]") if 0 <= i < len(infos) else {}

    def close(self) -> None:
        """Forget the memory maps and decoded arrays (arrays handed out keep theirs alive)."""
        self._maps.clear()
        self._decoded.clear()
        self._decoded_bytes = 0

    def _arrays(self, raw: dict, where: str, origin: tuple[str, int]) -> dict:
        """A checked episode record with its array descriptors made arrays (compressed ones packed)."""
        out = dict(raw)
        out[_WHERE], out[_FROM] = where, origin
        for key in _ARRAY_FIELDS:
            if out.get(key) is not None:
                out[key] = self._tree(out[key], f"{where}.{key}")
        return out

    def _tree(self, value: Any, where: str) -> Any:
        if isinstance(value, dict) and value.get("__type") == "ndarray":
            return self._array(value, where)
        if isinstance(value, dict):
            return {k: self._tree(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            return [self._tree(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value  # a text leaf

    def _array(self, o: dict, where: str) -> Any:
        """A checked descriptor (``trace_checks.check_array``) as a read-only view of its file, or packed."""
        shape, dtype = tuple(o["shape"]), np.dtype(o["dtype"])
        buf = self._map(o["npyfile"], where)
        if o["npyoff"] + o["size"] > len(buf):
            raise TraceError(f"{where}: bytes {o['npyoff']}..{o['npyoff'] + o['size']} lie beyond the end of "
                             f"{o['npyfile']} ({len(buf)} bytes)")
        if "codec" in o:
            return _Packed(o, where)
        if o["size"] == 0:
            return np.empty(shape, dtype)
        return np.ndarray(shape, dtype=dtype, buffer=buf, offset=o["npyoff"], order="C")

    def _unpack(self, value: Any) -> Any:
        """``value`` with every compressed array in it decompressed."""
        if isinstance(value, _Packed):
            return self._decompress(value.desc, value.where)
        if isinstance(value, dict):
            return {k: self._unpack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._unpack(v) for v in value]
        return value

    def _decompress(self, o: dict, where: str) -> np.ndarray:
        key = (o["npyfile"], o["npyoff"])
        arr = self._decoded.get(key)
        if arr is not None and arr.shape == tuple(o["shape"]) and arr.dtype == np.dtype(o["dtype"]):
            self._decoded.move_to_end(key)
            return arr
        shape, dtype = tuple(o["shape"]), np.dtype(o["dtype"])
        try:
            arr = np.empty(shape, dtype)
        except (MemoryError, ValueError) as exc:
            raise TraceError(f"{where}: {shape} of {dtype.str} is too large to decompress here ({exc})") from None
        row_bytes = arr.nbytes // shape[0] if shape[0] else 0
        with memoryview(self._map(o["npyfile"], where)) as whole, whole[o["npyoff"] : o["npyoff"] + o["size"]] as stored:
            try:
                decompress_into(arr.data.cast("B"), stored, o["codec"], o["chunks"], row_bytes, o.get("filter"))
            except MemoryError:
                raise TraceError(f"{where}: {shape} of {dtype.str} is too large to decompress in the memory left") from None
            except Exception as exc:  # the codecs' errors have no common base class
                raise TraceError(
                    f"{where}: a {o['codec']} array at offset {o['npyoff']} of {o['npyfile']} does not decompress: {exc}"
                ) from exc
        arr.flags.writeable = False  # as read-only as the memory-mapped ones
        self._decoded[key] = arr
        self._decoded_bytes += arr.nbytes
        while self._decoded_bytes > DECODED_CACHE_BYTES and len(self._decoded) > 1:
            _, old = self._decoded.popitem(last=False)
            self._decoded_bytes -= old.nbytes
        return arr

    def _map(self, name: str, where: str) -> Any:
        """The file's bytes, memory-mapped (``b""`` for an empty file, which cannot be mapped)."""
        mm = self._maps.get(name)
        if mm is None:
            try:
                with open_inside(self.directory, name, f"{where}.npyfile") as f:
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""
            except FileNotFoundError:
                raise TraceError(f"{where}.npyfile: {name} is missing") from None
            self._maps[name] = mm
        return mm


def _length(raw: dict) -> int:
    """A loaded record's steps: its ``length``, else its rewards' rows (compressed ones not decompressed)."""
    rewards = raw["rewards"]
    return raw.get("length", rewards.desc["shape"][0] if isinstance(rewards, _Packed) else len(rewards))


def _codecs(value: Any, where: str, out: dict[str, str]) -> None:
    if isinstance(value, _Packed):
        out[where] = value.desc["codec"] + (f"+{value.desc['filter']}" if "filter" in value.desc else "")
    elif isinstance(value, np.ndarray):
        out[where] = "raw"
    elif isinstance(value, dict):
        for k, v in value.items():
            _codecs(v, f"{where}.{k}", out)
    elif isinstance(value, list) and not all(isinstance(v, str) for v in value):
        for i, v in enumerate(value):
            _codecs(v, f"{where}[{i}]", out)


def _crc32(f: Any, size: int) -> int:
    """CRC-32 of an open file's bytes (zlib's polynomial, as ``envrec.formats.atomic.file_crc32``)."""
    if not size:
        return 0
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as whole:
        return zlib.crc32(whole)


def _decode(value: Any, raw: dict, field: str) -> Any:
    """An info (or reset options) decoded from its JSON tags; ``TraceError`` naming it when a tag is malformed."""
    try:
        return decode_json(value)
    except _DECODE_ERRORS as exc:
        raise TraceError(f"{raw.get(_WHERE, 'an episode')}.{field}: not an envrec info ({type(exc).__name__}: {exc})") from None


def _decode_array(value: Any, raw: dict, field: str) -> np.ndarray | None:
    """A recorded snapshot state, decoded (None stays None); ``TraceError`` naming it when it is not an array."""
    if value is None:
        return None
    array = _decode(value, raw, field)
    if not isinstance(array, np.ndarray):
        raise TraceError(f"{raw.get(_WHERE, 'an episode')}.{field}: not an array")
    return array


def _state(value: Any, raw: dict, field: str) -> np.ndarray:
    array = _decode_array(value, raw, field)
    assert array is not None  # check_episode_keys: a snapshot has a state
    return array


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
