"""Streams episodes into gym-recording-style trace batches, in bounded memory.

An episode's arrays must each be contiguous in the batch's ``.bin``, but steps
arrive interleaved. The largest array field (usually the observation) is
written straight into the batch's temporary ``.bin`` as it arrives; every
other field goes to a small spill file of its own, appended to the ``.bin``
(a kernel-side copy) when the episode ends. JSON-valued fields (infos, Text
leaves) are spilled as JSON text and spliced into the batch's ``.json`` the
same way. Nothing held in memory grows with the length of an episode.

A batch becomes visible only through ``commit()``: both files fsynced and
moved into place, the folder fsynced; the manifest (written by the caller)
is the last to name it.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from envrec.atomic import TMP_SUFFIX, commit_file, discard_file, file_crc32, fsync_dir, tmp_path_for
from envrec.compression import Compression, compressor
from envrec.fullwrite import writev_all
from envrec.trace_format import BatchEntry, batch_names, ndarray_descriptor

from .spill import Spill

if TYPE_CHECKING:
    from .episode_fields import EpisodeFields

__all__ = ["ArrayField", "BatchWriter", "JsonField"]

FILE_BUFFER_BYTES = 1 << 20  # batch files: large sequential writes
DIRECT_ROW_BYTES = 16 << 10  # rows at least this large go from the ring to the batch file without a copy in between
ALIGN = 8


CHUNK_INDEX = struct.Struct("<qq")  # one compressed chunk: rows, stored bytes


class ChunkPacker:
    """Rows of one array field gathered into chunks and compressed (see ``envrec.compression``).

    The chunk being filled is the only buffer (its size fixed when the
    recording starts); the index of the episode's chunks goes to a spill
    file of its own, so nothing in memory grows with an episode's length.
    """

    def __init__(self, compression: Compression, row_bytes: int, index_spill: Spill) -> None:
        self.compress = compressor(compression)
        self.row_bytes = row_bytes
        self.rows_per_chunk = compression.chunk_rows(row_bytes)
        self.buffer = bytearray(self.rows_per_chunk * row_bytes)
        self.view = memoryview(self.buffer)
        self.rows = 0  # rows waiting in the buffer
        self.index = index_spill

    def add(self, mv) -> bool:
        """Copy one row in; True when the chunk is full."""
        start = self.rows * self.row_bytes
        self.view[start : start + self.row_bytes] = mv
        self.rows += 1
        return self.rows == self.rows_per_chunk

    def add_rows(self, rows: np.ndarray) -> int:
        """Copy in as many of ``rows`` (a (n, row_bytes) uint8 array) as the chunk has room for; how many."""
        k = min(len(rows), self.rows_per_chunk - self.rows)
        start = self.rows * self.row_bytes
        np.frombuffer(self.view[start : start + k * self.row_bytes], np.uint8).reshape(k, self.row_bytes)[:] = rows[:k]
        self.rows += k
        return k

    def take(self) -> bytes:
        """The waiting rows compressed as one chunk (recorded in the index); the buffer is empty after."""
        data = self.compress(self.view[: self.rows * self.row_bytes])
        self.index.write(CHUNK_INDEX.pack(self.rows, len(data)))
        self.rows = 0
        return data

    def chunk_list(self) -> list[list[int]]:
        """The episode's chunks, ``[rows, stored_bytes]`` each, read back from the index spill."""
        raw = self.index.read_all()
        return [list(t) for t in CHUNK_INDEX.iter_unpack(raw)]


@dataclass
class ArrayField:
    """Rows of one fixed-shape array field of the current episode."""

    key: tuple  # ("observations", *path) etc.
    dtype: str
    shape: tuple
    row_bytes: int
    direct: bool = False
    rows: int = 0
    offset: int = 0  # where its data starts in the .bin (direct fields: set at episode start)
    stored: int = 0  # bytes of the episode's data written so far (compressed ones: once compressed)
    spill: Spill | None = None  # not direct
    packer: ChunkPacker | None = None  # compressed fields only
    codec: str = ""

    def write(self, mv, sink) -> None:
        self.rows += 1
        if self.packer is not None:
            if self.packer.add(mv):
                self._out(self.packer.take(), sink)
            return
        self._out(mv, sink)

    def write_rows(self, rows: np.ndarray, sink) -> None:
        """``write`` for many rows at once: a (n, row_bytes) uint8 array, e.g. a column of a ``RecordRun``."""
        self.rows += len(rows)
        if self.packer is not None:
            done = 0
            while done < len(rows):
                done += self.packer.add_rows(rows[done:])
                if self.packer.rows == self.packer.rows_per_chunk:
                    self._out(self.packer.take(), sink)
            return
        if self.direct:
            sink.write_bin_rows(rows)
        else:
            self.spill.write(np.ascontiguousarray(rows))  # type: ignore[union-attr]  # as in _out
        self.stored += rows.nbytes

    def _out(self, data, sink) -> None:
        if self.direct:
            sink.write_bin(data)
        else:
            self.spill.write(data)  # type: ignore[union-attr]  # a field that is not direct has its spill
        self.stored += len(data) if isinstance(data, bytes) else data.nbytes

    def flush_chunk(self, sink) -> None:
        """Compress the rows waiting in a partial chunk (before a checkpoint, at the episode's end)."""
        if self.packer is not None and self.packer.rows:
            self._out(self.packer.take(), sink)

    def start_episode(self, bin_size: int) -> None:
        self.rows = self.stored = 0
        self.offset = bin_size if self.direct else 0
        if self.packer is not None:
            self.packer.rows = 0  # its index spill was rewound with the others (EpisodeFields.rewind)

    def descriptor(self, npyfile: str) -> dict:
        d = ndarray_descriptor((self.rows, *self.shape), self.dtype, npyfile, self.offset, self.stored)
        if self.packer is not None:
            d["codec"] = self.codec
            d["raw_size"] = self.rows * self.row_bytes
            d["chunks"] = self.packer.chunk_list()
        return d


@dataclass
class JsonField:
    """Items of one JSON-valued field of the current episode, spilled as JSON text."""

    key: tuple
    items: int = 0
    spill: Spill = None  # type: ignore[assignment]  # set by EpisodeFields

    def write(self, obj: Any) -> None:
        self.write_json_text(json.dumps(obj, allow_nan=False, separators=(",", ":")).encode("utf-8"))

    def write_json_text(self, text: bytes) -> None:
        """Append one item already encoded as JSON."""
        if self.items:
            self.spill.write(b",")
        self.spill.write(text)
        self.items += 1

    def write_json_repeated(self, text: bytes, n: int) -> None:
        """Append the same JSON item ``n`` times (a run of empty infos)."""
        items = b"," + text
        self.spill.write(items * n if self.items else text + items * (n - 1))
        self.items += n


class BatchWriter:
    """One batch being written: temporary ``.bin`` and ``.json`` in the output folder."""

    def __init__(self, folder: str, prefix: str, first_episode: int) -> None:
        self.folder = folder
        self.first = first_episode
        self.json_name, self.bin_name = batch_names(prefix, first_episode)
        self.bin_tmp = tmp_path_for(os.path.join(folder, self.bin_name))
        self.json_tmp = tmp_path_for(os.path.join(folder, self.json_name))
        self.bin = open(self.bin_tmp, "wb", buffering=FILE_BUFFER_BYTES)
        self.json = open(self.json_tmp, "wb", buffering=FILE_BUFFER_BYTES)
        self.bin_size = 0
        self.json_size = 0
        self.episodes = 0
        self.steps = 0
        self.array_bytes = 0  # the episodes' arrays uncompressed (for the compression ratio)
        self._write_json(b'{"episodes": [')

    @classmethod
    def reopen(cls, folder: str, prefix: str, state: dict) -> BatchWriter:
        """The batch a dead serializer was writing, cut back to its last checkpoint (see ``state``)."""
        self = cls.__new__(cls)
        self.folder = folder
        self.first = state["first"]
        self.json_name, self.bin_name = batch_names(prefix, self.first)
        self.bin_tmp = tmp_path_for(os.path.join(folder, self.bin_name))
        self.json_tmp = tmp_path_for(os.path.join(folder, self.json_name))
        for old, final, new in (
            (state["bin_tmp"], self.bin_name, self.bin_tmp),
            (state["json_tmp"], self.json_name, self.json_tmp),
        ):
            os.replace(_find_batch_file(folder, old, final), new)
        self.bin = open(self.bin_tmp, "r+b", buffering=FILE_BUFFER_BYTES)
        self.json = open(self.json_tmp, "r+b", buffering=FILE_BUFFER_BYTES)
        self.bin_size, self.json_size = state["bin_size"], state["json_size"]
        for f, size in ((self.bin, self.bin_size), (self.json, self.json_size)):
            f.truncate(size)
            f.seek(size)
        self.episodes, self.steps = state["episodes"], state["steps"]
        self.array_bytes = state["array_bytes"]
        return self

    def state(self) -> dict:
        """Where this batch stands, for a checkpoint (its files flushed first)."""
        self.bin.flush()
        self.json.flush()
        return {
            "first": self.first,
            "bin_tmp": self.bin_tmp,
            "json_tmp": self.json_tmp,
            "bin_size": self.bin_size,
            "json_size": self.json_size,
            "episodes": self.episodes,
            "steps": self.steps,
            "array_bytes": self.array_bytes,
        }

    # -- writing ---------------------------------------------------------
    def _write_json(self, b: bytes) -> None:
        self.json.write(b)
        self.json_size += len(b)

    def write_bin(self, mv) -> None:
        self.bin.write(mv)
        self.bin_size += len(mv) if isinstance(mv, bytes) else mv.nbytes

    def write_bin_rows(self, rows: np.ndarray) -> None:
        """Append the rows of a (n, row_bytes) array: large rows straight from where they are (the ring)
        with one ``writev``, small ones through the file's buffer as one contiguous copy."""
        if rows.shape[1] < DIRECT_ROW_BYTES:
            self.write_bin(np.ascontiguousarray(rows))
            return
        self.bin.flush()
        writev_all(self.bin.fileno(), list(rows))
        self.bin.seek(0, os.SEEK_END)
        self.bin_size += rows.nbytes

    def pad_bin(self) -> None:
        pad = -self.bin_size % ALIGN
        if pad:
            self.write_bin(b"\0" * pad)

    def append_spill(self, spill: Spill) -> None:
        self.bin_size += spill.append_to(self.bin)

    def write_episode(self, meta: dict, fields: EpisodeFields) -> None:
        """Finish the arrays of an episode in the .bin, then write its JSON.

        ``fields.structure`` maps the episode's top-level keys to nested
        dict/list shapes whose leaves are field keys; ``meta`` holds the
        scalar keys.
        """
        for f in fields.arrays:
            f.flush_chunk(self)  # the direct field's last chunk must follow its others, before any spill
        for f in fields.arrays:
            if f.spill is None:  # the direct field, already in place
                continue
            self.pad_bin()
            f.offset = self.bin_size
            if f.stored:
                self.append_spill(f.spill)
        by_key: dict[tuple, Any] = {f.key: f.descriptor(self.bin_name) for f in fields.arrays}
        self.array_bytes += sum(f.rows * f.row_bytes for f in fields.arrays)
        tokens = {}
        for i, jf in enumerate(fields.jsons):
            token = f"\0envrec-stream-{i}\0"
            tokens[json.dumps(token)] = jf
            by_key[jf.key] = token
        episode = dict(meta)
        for top, shape in fields.structure.items():
            episode[top] = _fill(shape, by_key)
        text = json.dumps(episode, allow_nan=False)
        if self.episodes:
            self._write_json(b",\n")
        self._splice(text, tokens)
        self.episodes += 1

    def _splice(self, text: str, tokens: dict) -> None:
        """Write ``text`` with each token replaced by a JSON list streamed from its spill."""
        for tok, jf in tokens.items():
            before, after = text.split(tok, 1)
            self._write_json(before.encode("utf-8") + b"[")
            self.json_size += jf.spill.append_to(self.json)
            self._write_json(b"]")
            text = after
        self._write_json(text.encode("utf-8"))

    # -- ending ----------------------------------------------------------
    @property
    def size(self) -> int:
        return self.bin_size + self.json_size

    def commit(self, fault=lambda name: None) -> BatchEntry:
        """Make the batch durable and visible; return its manifest entry (``fault``: see envrec.faults)."""
        self._write_json(b"]}\n")
        self.bin.flush()
        fault("commit:bin-written")
        commit_file(self.bin, self.bin_tmp, os.path.join(self.folder, self.bin_name), sync_dir=False)
        fault("commit:bin")
        commit_file(self.json, self.json_tmp, os.path.join(self.folder, self.json_name), sync_dir=False)
        fault("commit:json")
        fsync_dir(self.folder)
        return {
            "first": self.first,
            "len": self.episodes,
            "fn": self.json_name,
            "bin": self.bin_name,
            "steps": self.steps,
            "json_bytes": self.json_size,
            "bin_bytes": self.bin_size,
            "array_bytes": self.array_bytes,
            "json_crc32": file_crc32(os.path.join(self.folder, self.json_name)),
            "bin_crc32": file_crc32(os.path.join(self.folder, self.bin_name)),
        }

    def abort(self) -> None:
        """Drop the batch: close and remove its temporary files."""
        discard_file(self.bin, self.bin_tmp)
        discard_file(self.json, self.json_tmp)


def _find_batch_file(folder: str, tmp: str, final: str) -> str:
    """Where a checkpointed batch file is now: its temporary name, one a failed successor gave it, or its
    final name (its writer died inside a commit, before the manifest named the batch)."""
    if os.path.exists(tmp):
        return tmp
    for name in os.listdir(folder):
        if name.startswith(f".{final}.") and name.endswith(TMP_SUFFIX):
            return os.path.join(folder, name)
    return os.path.join(folder, final)


def _fill(shape: Any, by_key: dict) -> Any:
    if isinstance(shape, dict):
        return {k: _fill(v, by_key) for k, v in shape.items()}
    if isinstance(shape, list):
        return [_fill(v, by_key) for v in shape]
    return by_key[shape]
