"""The consuming end of a ring (see ``envrec.contract.ring`` for the layout both ends share): lives in a worker."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .ring import (
    _W_CAPACITY,
    _W_READ_POS,
    _W_RELEASED,
    _W_SLEEPING,
    _W_STATUS,
    _W_WAITING,
    _W_WRITE_POS,
    HEADER_BYTES,
    KIND_PAD,
    MAGIC,
    REC_HEAD,
    REC_HEAD_BYTES,
    WAIT_SLICE_S,
    RingSpec,
    _RingBytes,
    align,
    record_size,
)
from .shm import map_memfd
from .wakeup import Wakeup

__all__ = ["RUN", "RecordRun", "RecordView", "RingReader", "run_template"]

RUN = -1  # the kind of a RecordRun (no record in a ring has it)
_RUN_MASK = np.full(64, 0xFFFFFFFFFFFFFFFF, np.uint64)  # header words a run compares: all but the step (word 2)
_RUN_MASK[2] = 0


@functools.lru_cache(maxsize=64)
def _sizes_struct(nsections: int) -> struct.Struct:
    """The u32 section sizes of a record header with ``nsections`` sections (compiled once per count)."""
    return struct.Struct(f"<{nsections}I")


@dataclass(slots=True)
class RecordView:
    """One record as the consumer sees it; its sections are views into the ring."""

    kind: int
    episode: int
    step: int
    sections: list[memoryview]
    count: ClassVar[int] = 1  # records it stands for


@dataclass(slots=True)
class RecordRun:
    """Consecutive records of one layout and one episode (see ``RingReader.poll_run``), read at once.

    ``rows`` is a (count, record length) uint8 array over the ring: column
    ranges are the sections, the same in every row. Valid until ``release()``.
    """

    episode: int
    rows: np.ndarray
    kind: ClassVar[int] = RUN

    @property
    def count(self) -> int:
        return len(self.rows)


def run_template(kind: int, sizes: list[int]) -> np.ndarray:
    """The header words every record of a run must have: length, kind, section count and sizes (the episode
    and step words are left 0: they are not compared)."""
    nsections = len(sizes)
    raw = bytearray(align(REC_HEAD_BYTES + 4 * nsections))
    REC_HEAD.pack_into(raw, 0, record_size(sizes), kind, nsections, 0, 0)
    struct.pack_into(f"<{nsections}I", raw, REC_HEAD_BYTES, *sizes)
    return np.frombuffer(bytes(raw), "<u8")


class RingReader:
    """The consuming side of a ring; lives in a worker process. ``close`` drops only its own mapping: the
    ring is a memfd, which the kernel frees when the last process holding it is gone (``envrec.contract.shm``)."""

    def __init__(self, spec: RingSpec) -> None:
        self._map = map_memfd(spec.memfd_fd)
        self._mem = _RingBytes(memoryview(self._map))
        if bytes(self._mem.buf[:8]) != MAGIC:
            raise RuntimeError(f"memfd {spec.name} is not an envrec ring")
        self.capacity = self._mem.words[_W_CAPACITY]
        self._data = self._mem.buf[HEADER_BYTES:]
        self._items = Wakeup(spec.items_fd)
        self._space = Wakeup(spec.space_fd)
        self._cursor = self._mem.words[_W_READ_POS]
        self._views: list[memoryview] = []
        self._unreleased = 0
        # numpy views of the data area, for runs of records: dropped in close() before the area's view
        self._bytes = np.frombuffer(self._data, np.uint8)
        self._words = self._bytes.view("<u8")

    def _available(self) -> bool:
        return self._mem.words[_W_WRITE_POS] > self._cursor

    def next(self, timeout_s: float = WAIT_SLICE_S) -> RecordView | None:
        """The next unread record, or None if none arrived within ``timeout_s``.

        A record is there when ``write_pos`` is past the cursor (so a consumer
        that replaces a dead one finds the records it had read but not
        released); the eventfd is only the wake-up.
        """
        if self._available():
            return self._parse()
        words = self._mem.words
        words[_W_SLEEPING] = 1
        try:
            self._items.clear()  # a system call: also orders the flag's store before the check below
            if not self._available():
                self._items.wait(timeout_s)
        finally:
            words[_W_SLEEPING] = 0
        return self._parse() if self._available() else None

    def poll(self) -> RecordView | None:
        """The next unread record if one is published, without waiting."""
        if not self._available():
            return None
        return self._parse()

    def poll_run(self, template: np.ndarray, max_records: int, max_bytes: int) -> RecordRun | None:
        """The published records from the cursor on whose header words equal ``template`` (``run_template``)
        and that belong to one episode, up to ``max_records`` and ``max_bytes``, as one ``RecordRun``; None
        when the next record is not of that layout or fewer than two are there.

        A handler then takes a column of the run where it would take a section of each record: one copy
        (or one system call) per field and run instead of several Python calls per record.
        """
        length = int(template[0]) & 0xFFFFFFFF
        cap, off = self.capacity, self._cursor % self.capacity
        n = min(max_records, max_bytes // length, (self._mem.words[_W_WRITE_POS] - self._cursor) // length, (cap - off) // length)
        first = off >> 3
        if n < 2 or self._words[first] != template[0]:  # the common way a run ends: a record of another kind
            return None
        words = self._words[first : first + n * (length >> 3)].reshape(n, length >> 3)[:, : template.size]
        expect = template.copy()
        expect[1] = words[0, 1]  # one episode; the step (word 2) is masked out
        differs = ((words ^ expect) & _RUN_MASK[: template.size]).any(axis=1)
        count = int(differs.argmax()) if differs.any() else n
        if count < 2:
            return None
        run = RecordRun(int(expect[1]), self._bytes[off : off + count * length].reshape(count, length))
        self._cursor += count * length
        self._unreleased += count
        return run

    @property
    def cursor(self) -> int:
        """Ring position just past the last record read."""
        return self._cursor

    def held_bytes(self) -> int:
        """Bytes read but not yet released."""
        return self._cursor - self._mem.words[_W_READ_POS]

    def skip_to(self, pos: int) -> None:
        """Treat everything before ring position ``pos`` as read and release it (a checkpoint covers it)."""
        if pos > self._cursor:
            self._cursor = pos
            self.release()

    def _parse(self) -> RecordView:
        data, cap = self._data, self.capacity
        off = self._cursor % cap
        if cap - off < REC_HEAD_BYTES:  # tail too short for any record: the producer skipped it
            self._cursor += cap - off
            off = 0
        length, kind, nsections, episode, step = REC_HEAD.unpack_from(data, off)
        if kind == KIND_PAD:
            self._cursor += length
            off = 0
            length, kind, nsections, episode, step = REC_HEAD.unpack_from(data, off)
        sizes = _sizes_struct(nsections).unpack_from(data, off + REC_HEAD_BYTES)
        pos = off + ((REC_HEAD_BYTES + 4 * nsections + 7) & ~7)
        sections = []
        for s in sizes:
            sections.append(data[pos : pos + s])
            pos += (s + 7) & ~7
        self._views.extend(sections)
        self._unreleased += 1
        self._cursor += length
        return RecordView(kind, episode, step, sections)

    def release(self, upto: int | None = None) -> None:
        """Give back the room of every record read so far, or of those before ring position ``upto`` (the
        records' views go either way: a handler that holds records keeps them by position, not by view)."""
        for v in self._views:
            v.release()
        self._views.clear()
        words = self._mem.words
        if upto is None or upto >= self._cursor:
            words[_W_READ_POS] = self._cursor
            words[_W_RELEASED] += self._unreleased
            self._unreleased = 0
        elif upto > words[_W_READ_POS]:
            words[_W_READ_POS] = upto
        else:
            return
        self._wake_producer(words)

    def used_fraction(self) -> float:
        """The share of the ring the env process cannot write into now: what it wrote that is not released."""
        words = self._mem.words
        return (words[_W_WRITE_POS] - words[_W_READ_POS]) / self.capacity

    def producer_waits(self) -> bool:
        """Whether the env process is waiting for room in the ring now."""
        return self._mem.words[_W_WAITING] != 0

    def _wake_producer(self, words) -> None:
        """Post ``space`` when a waiting producer now has the room it waits for."""
        need = words[_W_WAITING]
        if need and self.capacity - (words[_W_WRITE_POS] - words[_W_READ_POS]) >= need:
            self._space.post()

    def set_status(self, index: int, value: int) -> None:
        self._mem.words[_W_STATUS + index] = value

    def close(self) -> None:
        for v in self._views:
            v.release()
        self._views.clear()
        del self._words, self._bytes
        try:
            self._data.release()
            buf = self._mem.buf
            self._mem.release_views()
            buf.release()
            self._map.close()
        except BufferError:  # a run's rows still referenced (by a traceback): the mapping goes with the worker
            pass
