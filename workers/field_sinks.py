"""The sinks of one episode's fields in the serializer: array rows, chunked and compressed when asked, and JSON items.

Each sink writes to the spill file ``EpisodeFields`` gives it (or straight to
the batch file for the largest array); ``BatchWriter`` splices the spills into
the batch when the episode ends.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from envrec.formats.compression import Compression, compressor, decompress_into, xor_encode
from envrec.formats.trace_format import ndarray_descriptor

from .spill import Spill

__all__ = ["CHUNK_INDEX", "ArrayField", "ChunkPacker", "JsonField"]


CHUNK_INDEX = struct.Struct("<qq")  # one compressed chunk: rows, stored bytes


class ChunkPacker:
    """Rows of one array field gathered into chunks and compressed (see ``envrec.formats.compression``).

    The chunk being filled is the only buffer (its size fixed when the
    recording starts), with a scratch buffer of the same size for the delta
    filter while it is used or not yet chosen against; the index of the
    episode's chunks goes to a spill file of its own, so nothing in memory
    grows with an episode's length.

    ``filter`` is the delta filter's choice for the recording: None while
    undecided (a one-row chunk is the same filtered or not, so it decides
    nothing), then ``"xor"`` or ``""`` (none) from the first chunk of two or
    more rows on, whichever of the two compressed it smaller. A checkpoint
    keeps it, so a successor goes on with the same choice.
    """

    def __init__(self, compression: Compression, row_bytes: int, index_spill: Spill, delta: bool = False) -> None:
        self.compress = compressor(compression)
        self.row_bytes = row_bytes
        self.rows_per_chunk = compression.chunk_rows(row_bytes)
        self.buffer = bytearray(self.rows_per_chunk * row_bytes)
        self.view = memoryview(self.buffer)
        self.rows = 0  # rows waiting in the buffer
        self.index = index_spill
        self.filter: str | None = None if delta else ""
        self._scratch = np.empty((self.rows_per_chunk, row_bytes), np.uint8) if delta else None

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
        raw = self.view[: self.rows * self.row_bytes]
        if self.filter == "xor":
            data = self.compress(self._filtered())
        elif self.filter is None and self.rows > 1:
            data, filtered = self.compress(raw), self.compress(self._filtered())
            self.choose("xor" if len(filtered) < len(data) else "")
            data = filtered if self.filter else data
        else:
            data = self.compress(raw)
        self.index.write(CHUNK_INDEX.pack(self.rows, len(data)))
        self.rows = 0
        return data

    def choose(self, choice: str | None) -> None:
        """Set the delta filter's choice (``take``'s, or a checkpoint's for a successor)."""
        self.filter = choice
        if choice == "":
            self._scratch = None

    def _filtered(self):
        rows = np.frombuffer(self.buffer, np.uint8, self.rows * self.row_bytes).reshape(self.rows, self.row_bytes)
        return xor_encode(rows, self._scratch[: self.rows]).data  # type: ignore[index]  # filtering has its scratch

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
    buffered: bool = False  # the chunk buffer holds the last chunk's raw rows (not so in a successor, at first)

    def write(self, mv, sink) -> None:
        self.rows += 1
        if self.packer is not None:
            self.buffered = True
            if self.packer.add(mv):
                self._out(self.packer.take(), sink)
            return
        self._out(mv, sink)

    def write_rows(self, rows: np.ndarray, sink) -> None:
        """``write`` for many rows at once: a (n, row_bytes) uint8 array, e.g. a column of a ``RecordRun``."""
        self.rows += len(rows)
        if self.packer is not None:
            self.buffered = True
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

    def last_row(self, sink) -> bytes:
        """The last row written, read back from where it went (the next part's row 0; see ``episode_parts``):
        the chunk buffer (which keeps a compressed chunk's raw rows), the batch file or the spill; in a
        successor that wrote none of the chunk yet, the last chunk decompressed."""
        n, packer = self.row_bytes, self.packer
        if packer is None:
            return self._read_stored(sink, self.stored - n, n)
        if packer.rows:
            end = packer.rows * n
            return bytes(packer.view[end - n : end])
        rows, size = CHUNK_INDEX.unpack(packer.index.read_range(packer.index.tell() - CHUNK_INDEX.size, CHUNK_INDEX.size))
        if self.buffered:
            return bytes(packer.view[(rows - 1) * n : rows * n])
        raw = bytearray(rows * n)
        decompress_into(memoryview(raw), memoryview(self._read_stored(sink, self.stored - size, size)), self.codec, [[rows, size]], n,
                        packer.filter or None)
        return bytes(raw[len(raw) - n :])

    def _read_stored(self, sink, start: int, n: int) -> bytes:
        if self.direct:
            return sink.read_bin(self.offset + start, n)
        return self.spill.read_range(start, n)  # type: ignore[union-attr]  # as in _out

    def descriptor(self, npyfile: str) -> dict:
        d = ndarray_descriptor((self.rows, *self.shape), self.dtype, npyfile, self.offset, self.stored)
        if self.packer is not None:
            d["codec"] = self.codec
            d["raw_size"] = self.rows * self.row_bytes
            d["chunks"] = self.packer.chunk_list()
            if self.packer.filter:
                d["filter"] = self.packer.filter
        return d


@dataclass
class JsonField:
    """Items of one JSON-valued field of the current episode, spilled as JSON text."""

    key: tuple
    items: int = 0
    spill: Spill = None  # type: ignore[assignment]  # set by EpisodeFields
    last_len: int = 0  # bytes of the last item's JSON (the end of the spill)

    def write(self, obj: Any) -> None:
        self.write_json_text(json.dumps(obj, allow_nan=False, separators=(",", ":")).encode("utf-8"))

    def write_json_text(self, text: bytes) -> None:
        """Append one item already encoded as JSON."""
        if self.items:
            self.spill.write(b",")
        self.spill.write(text)
        self.items += 1
        self.last_len = len(text)

    def write_json_repeated(self, text: bytes, n: int) -> None:
        """Append the same JSON item ``n`` times (a run of empty infos)."""
        items = b"," + text
        self.spill.write(items * n if self.items else text + items * (n - 1))
        self.items += n
        self.last_len = len(text)

    def last_item(self) -> bytes:
        """The last item's JSON, read back from the spill (the next part's row 0; see ``episode_parts``)."""
        return self.spill.read_range(self.spill.tell() - self.last_len, self.last_len)
