"""The consuming end of a ring (see ``envrec.ring`` for the layout both ends share): lives in a worker."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

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
    _Segment,
)
from .shm import map_segment
from .wakeup import Wakeup

__all__ = ["RecordView", "RingReader"]


@functools.lru_cache(maxsize=64)
def _sizes_struct(nparts: int) -> struct.Struct:
    """The u32 part sizes of a record header with ``nparts`` parts (compiled once per count)."""
    return struct.Struct(f"<{nparts}I")


@dataclass(slots=True)
class RecordView:
    """One record as the consumer sees it; its parts are views into the ring."""

    kind: int
    episode: int
    step: int
    parts: list[memoryview]


class RingReader:
    """The consuming side of a ring; lives in a worker process and never unlinks."""

    def __init__(self, spec: RingSpec) -> None:
        self._map = map_segment(spec.segment_fd)
        self._seg = _Segment(memoryview(self._map))
        if bytes(self._seg.buf[:8]) != MAGIC:
            raise RuntimeError(f"shared-memory segment {spec.name} is not an envrec ring")
        self.capacity = self._seg.words[_W_CAPACITY]
        self._data = self._seg.buf[HEADER_BYTES:]
        self._items = Wakeup(spec.items_fd)
        self._space = Wakeup(spec.space_fd)
        self._cursor = self._seg.words[_W_READ_POS]
        self._views: list[memoryview] = []
        self._unreleased = 0

    def _available(self) -> bool:
        return self._seg.words[_W_WRITE_POS] > self._cursor

    def next(self, timeout_s: float = WAIT_SLICE_S) -> RecordView | None:
        """The next unread record, or None if none arrived within ``timeout_s``.

        A record is there when ``write_pos`` is past the cursor (so a consumer
        that replaces a dead one finds the records it had read but not
        released); the eventfd is only the wake-up.
        """
        if self._available():
            return self._parse()
        words = self._seg.words
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

    @property
    def cursor(self) -> int:
        """Ring position just past the last record read."""
        return self._cursor

    def held_bytes(self) -> int:
        """Bytes read but not yet released."""
        return self._cursor - self._seg.words[_W_READ_POS]

    def release_to(self, pos: int) -> None:
        """Give back the room before ring position ``pos`` (at most the cursor): a checkpoint covers it."""
        words = self._seg.words
        if words[_W_READ_POS] < pos <= self._cursor:
            words[_W_READ_POS] = pos
            self._wake_producer(words)

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
        length, kind, nparts, episode, step = REC_HEAD.unpack_from(data, off)
        if kind == KIND_PAD:
            self._cursor += length
            off = 0
            length, kind, nparts, episode, step = REC_HEAD.unpack_from(data, off)
        sizes = _sizes_struct(nparts).unpack_from(data, off + REC_HEAD_BYTES)
        pos = off + ((REC_HEAD_BYTES + 4 * nparts + 7) & ~7)
        parts = []
        for s in sizes:
            parts.append(data[pos : pos + s])
            pos += (s + 7) & ~7
        self._views.extend(parts)
        self._unreleased += 1
        self._cursor += length
        return RecordView(kind, episode, step, parts)

    def release(self) -> None:
        """Give back the room of every record read so far."""
        for v in self._views:
            v.release()
        self._views.clear()
        words = self._seg.words
        words[_W_READ_POS] = self._cursor
        words[_W_RELEASED] += self._unreleased
        self._unreleased = 0
        self._wake_producer(words)

    def _wake_producer(self, words) -> None:
        """Post ``space`` when a waiting producer now has the room it waits for."""
        need = words[_W_WAITING]
        if need and self.capacity - (words[_W_WRITE_POS] - words[_W_READ_POS]) >= need:
            self._space.post()

    def set_status(self, index: int, value: int) -> None:
        self._seg.words[_W_STATUS + index] = value

    def close(self) -> None:
        for v in self._views:
            v.release()
        self._views.clear()
        self._data.release()
        buf = self._seg.buf
        self._seg.release_views()
        buf.release()
        self._map.close()
