"""A single-producer, single-consumer ring of variable-length records in shared memory.

The env process writes records (``RingWriter``); one worker process reads them
(``RingReader``). The hot path of a write is one copy of each array into the
memfd and a few word writes; it makes a system call only to wake a
consumer that is asleep.

Byte layout of a ring's memfd (all integers little-endian, words are u64)::

    offset  what                                   written by
    0       magic b"ENVRECR1"                      creator
    8       capacity: bytes in the data area       creator
    64      write_pos: bytes ever published        producer   (own cache line)
    72      producer_waiting: bytes it waits for   producer   (0 when not waiting)
    128     read_pos: bytes ever released          consumer   (own cache line)
    136     records_released                       consumer
    144     consumer_sleeping: 1 while it sleeps   consumer
    192     STATUS_WORDS words of stream status    consumer   (meaning set by the stream)
    512     data area, ``capacity`` bytes

``write_pos`` and ``read_pos`` only grow; a record starts at ``pos % capacity``.
Every record is a multiple of 8 bytes long and never wraps around the end of
the data area: when the tail is too short, the producer fills it with a PAD
record and starts the real record at offset 0, publishing both at once. A
tail shorter than a record header (8 or 16 bytes) is skipped without a PAD
record: both sides know no record can start there.

A record::

    0   u32 length   total bytes, header and padding included (multiple of 8)
    4   u16 kind     PAD (0) or a stream-defined kind
    6   u16 nsections
    8   u64 episode
    16  u64 step
    24  u32 size[nsections], then zero padding to a multiple of 8
    ..  the sections, each starting on an 8-byte boundary

Synchronisation: a record is available when ``write_pos`` (stored after
the record's bytes; x86 keeps stores in order) is past the consumer's
cursor. Wake-ups are two eventfds (``envrec.contract.wakeup``), inherited by the
worker, so nothing depends on multiprocessing's semaphores: ``items`` wakes
a consumer that raised ``consumer_sleeping`` and found nothing (the producer
posts it after a publish only while the flag is up), ``space`` wakes a
producer that set ``producer_waiting`` to the room it needs (the consumer
posts it after a release that leaves at least that much room, so a
producer waiting for a large frame is woken once, not at every release). A flag and the position it guards can be seen
out of order (x86 reorders a store with a later load), so a wake-up can be
missed: every sleep is therefore bounded (``WAIT_SLICE_S`` for the producer,
the caller's timeout for the consumer), which also notices a dead peer, and
a missed wake-up costs at most one slice, never a record. A consumer that
replaces a dead one starts at ``read_pos`` and re-reads what its predecessor
had read but not released.

Pacing (``set_pacing``, the frame ring's): past half full, each record first waits for the consumer's
next release, at most a time that grows from 0 at half full to ``pace_s`` at full. A consumer that
takes records slower than the producer writes them (one starting, an encoder that is the bound) then
makes the producer wait a little at every record, instead of not at all until the ring is full and
then for as long as the consumer is away.

Memory: every page is reserved before the producer writes into it, a
chunk at a time ahead of it (``envrec.contract.reservation``): a page a
memfd cannot allocate when it is touched would kill the process with
SIGBUS. Until the whole ring is, the producer writes no further than what is.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ClosedError, ConfigError, RecordTooLargeError
from .reservation import RESERVE_FIRST_BYTES, UNBOUNDED, PageReservation
from .shm import create_memfd
from .wakeup import Wakeup

__all__ = [
    "HEADER_BYTES",
    "KIND_PAD",
    "MAGIC",
    "PACE_FROM",
    "REC_HEAD",
    "REC_HEAD_BYTES",
    "REC_STEP_AT",
    "STATUS_WORDS",
    "WAIT_SLICE_S",
    "ConsumerGone",
    "RingSpec",
    "RingWriter",
    "align",
    "record_size",
]

MAGIC = b"ENVRECR1"
HEADER_BYTES = 512
STATUS_WORDS = 32
_W_CAPACITY = 1
_W_WRITE_POS = 8
_W_WAITING = 9
_W_READ_POS = 16
_W_RELEASED = 17
_W_SLEEPING = 18
_W_STATUS = 24  # word index of the first status word (byte 192)

KIND_PAD = 0
REC_HEAD = struct.Struct("<IHHQQ")  # length, kind, nsections, episode, step
REC_HEAD_BYTES = REC_HEAD.size  # 24
REC_STEP_AT = REC_HEAD_BYTES - 8  # where a record's step lies in its header (the last field, u64)
ALIGN = 8

WAIT_SLICE_S = 0.05  # longest sleep between checks of a peer's liveness while waiting
PACE_FROM = 0.5  # share of the ring past which a pacing ring makes each record wait (``set_pacing``)


def align(n: int) -> int:
    """``n`` rounded up to the ring's alignment (8 bytes)."""
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def record_size(section_sizes: list[int] | tuple[int, ...]) -> int:
    """Bytes a record with sections of these sizes takes in a ring."""
    n = align(REC_HEAD_BYTES + 4 * len(section_sizes))
    for s in section_sizes:
        n += align(s)
    return n


class ConsumerGone(Exception):
    """Raised by a blocking write when the consumer is found dead (internal)."""


@dataclass(frozen=True)
class RingSpec:
    """Everything a worker process needs to use a ring: the memfd's descriptor and the wake-up fds.

    The fds are valid in the worker because the launcher passes them down
    (``pass_fds``) at the same numbers. The memory is a memfd, mapped
    through its descriptor (it has no file to open by ``name``, which only
    names it in messages and in ``/proc/<pid>/fd``): a worker maps it even
    when its owner died before the worker started.
    """

    name: str
    capacity: int
    memfd_fd: int
    items_fd: int
    space_fd: int


class _RingBytes:
    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.words = buf[:HEADER_BYTES].cast("Q")

    def release_views(self) -> None:
        self.words.release()
        del self.buf  # the caller releases it


class RingWriter:
    """The producing side of a ring; lives in the env process, which owns the memfd.

    ``write(kind, episode, step, sections)`` copies ``sections`` into the ring;
    ``reserve``/``publish`` let a caller write a record in place. When the
    ring is full, the policy set by ``set_policy`` applies: wait for room
    (``block``, bounded by ``timeout_s`` if given) or give up at once; a
    record given up on is not written and the call returns False / -1.
    ``alive`` is polled while waiting; when it returns False the wait raises
    ``ConsumerGone`` instead of waiting forever.
    """

    def __init__(self, capacity: int) -> None:
        capacity = align(int(capacity))
        if capacity < 4096:
            raise ConfigError(f"a ring needs at least 4096 bytes, not {capacity}")
        self.capacity = capacity
        self._shm = create_memfd(HEADER_BYTES + capacity, HEADER_BYTES + min(capacity, RESERVE_FIRST_BYTES))
        assert self._shm.buf is not None  # just created
        self._mem = _RingBytes(self._shm.buf)
        self._mem.buf[:8] = MAGIC
        self._mem.words[_W_CAPACITY] = capacity
        self._items = Wakeup()
        self._space = Wakeup()
        self._data = self._mem.buf[HEADER_BYTES:]
        self.data = self._data  # the data area, for callers that write a reserved record in place
        self._words = self._mem.words  # read and written per record: one attribute, not two
        self._write_pos = 0
        self._read_pos = 0  # last value seen; the consumer's copy only grows
        self._end = capacity  # records end before this offset (less if the reservation failed: _end_at)
        self._room_until = 0  # the producer may write up to here without looking again (_refresh_room)
        self.block = True
        self.timeout_s: float | None = None
        self.alive: Callable[[], bool] | None = None
        self._refuse_waits = False  # set by close() in another thread: a wait for room raises ClosedError
        self._pace_s = 0.0
        self._pace_from = capacity  # bytes in use past which a record is paced (all of them: none is)
        self._pending = 0
        self.high_water = 0
        self.blocked_s = 0.0
        self.records = 0
        self.closed = False
        self._reservation = PageReservation(self._shm, self._data, HEADER_BYTES, self._wake_producer, self._end_at)
        self._refresh_room(0)

    def _end_at(self, reserved: int) -> None:
        """The ring's pages past ``reserved`` could not be had: records wrap around before them from now on,
        a PAD record's header still in what is reserved (the producer wrote no further than that)."""
        self._end = reserved - REC_HEAD_BYTES

    def _wake_producer(self) -> None:
        if not self.closed and self._words[_W_WAITING]:
            self._space.post()

    def _refresh_room(self, upto: int) -> None:
        """Look at the consumer's position again, for a record that ends at ``upto``: the producer may write up
        to a capacity past it and, until the whole ring is reserved, as far as the reservation lets it."""
        read = self._read_pos = self._words[_W_READ_POS]
        room = min(read + self.capacity, self._reservation.limit(upto, REC_HEAD_BYTES))
        self._room_until = min(room, max(read + self._pace_from, upto))  # paced: the next record looks again

    def set_policy(self, block: bool = True, timeout_s: float | None = None, alive: Callable[[], bool] | None = None) -> None:
        """What ``reserve`` does when the ring is full (see the class docstring)."""
        self.block, self.timeout_s, self.alive = block, timeout_s, alive

    def set_pacing(self, pace_s: float) -> None:
        """Pace the producer past half full (see the module docstring); 0 turns pacing off.

        Args:
            pace_s: the longest a record waits for the consumer's next release while the ring has room: the wait
                grows from 0 at half full to ``pace_s`` at full. Only a blocking ring paces (``set_policy``).
        """
        if pace_s < 0:
            raise ConfigError(f"pace_s must be >= 0, not {pace_s!r}")
        self._pace_s = float(pace_s)
        self._pace_from = int(self.capacity * PACE_FROM) if pace_s else self.capacity
        self._room_until = min(self._room_until, self._read_pos + self._pace_from)

    def refuse_waits(self, refuse: bool) -> None:
        """While ``refuse`` holds, a write that has to wait for room raises ``ClosedError`` instead (at once if
        it waits now): how ``close()`` in one thread ends another thread's wait (``envrec.record.call_lock``)."""
        self._refuse_waits = refuse
        if refuse and not self.closed:
            self._space.post()

    @property
    def spec(self) -> RingSpec:
        return RingSpec(self._shm.name, self.capacity, self._shm.fd, self._items.fd, self._space.fd)

    @property
    def fds(self) -> tuple[int, int, int]:
        """The descriptors a worker process must inherit: the memfd's and the wake-ups'."""
        spec = self.spec
        return spec.memfd_fd, spec.items_fd, spec.space_fd

    @property
    def name(self) -> str:
        return self._shm.name

    @property
    def all_reserved(self) -> bool:
        """Whether every page of the ring is reserved and mapped (after its first lap, or from the start for a
        small ring), or its reservation ended short of that (the ring then ends there)."""
        return self._reservation.reserved == UNBOUNDED

    def used(self) -> int:
        """Bytes published that no consumer has released yet (0 once the worker has caught up)."""
        return self._write_pos - self._mem.words[_W_READ_POS] if not self.closed else 0

    def status(self, index: int) -> int:
        """Read one of the consumer's status words."""
        return self._mem.words[_W_STATUS + index]

    def clear_status(self) -> None:
        """Zero the consumer's status words, before a new consumer takes over this ring."""
        for i in range(STATUS_WORDS):
            self._mem.words[_W_STATUS + i] = 0

    def unreleased(self) -> int:
        """Records published that no consumer has released (still in the ring), counted by walking them."""
        cap, data = self.capacity, self._data
        pos, end, n = self._mem.words[_W_READ_POS], self._write_pos, 0
        while pos < end:
            off = pos % cap
            if cap - off < REC_HEAD_BYTES:
                pos += cap - off
                continue
            length, kind = REC_HEAD.unpack_from(data, off)[:2]
            pos += length
            n += kind != KIND_PAD
        return n

    def write(self, kind: int, episode: int, step: int, sections: list | tuple) -> bool:
        """Copy a record of ``sections`` (bytes or 1-D byte views) into the ring; False if dropped."""
        sizes = [len(p) for p in sections]
        n = record_size(sizes)
        off = self.reserve(n)
        if off < 0:
            return False
        data = self._data
        REC_HEAD.pack_into(data, off, n, kind, len(sections), episode, step)
        struct.pack_into(f"<{len(sizes)}I", data, off + REC_HEAD_BYTES, *sizes)
        pos = off + align(REC_HEAD_BYTES + 4 * len(sizes))
        for p, s in zip(sections, sizes, strict=True):
            if s:
                data[pos : pos + s] = p
            pos += align(s)
        self.publish()
        return True


    def reserve(self, n: int) -> int:
        """Room for a record of ``n`` bytes (a multiple of 8): its offset in ``data``, or -1 if dropped.

        Nothing is visible to the consumer until ``publish()``; a reservation
        that is not published is simply forgotten by the next one.
        """
        cap = self.capacity
        if n > self._end:
            raise RecordTooLargeError(
                f"a record of {n} bytes cannot fit in a ring of {self._end} bytes; "
                f"create the recorder with ring_bytes >= {2 * n}",
                record_bytes=n,
                ring_bytes=self._end,
            )
        while True:
            w = self._write_pos
            off = w % cap
            pad = cap - off if off + n > self._end else 0
            need = pad + n
            if w + need <= self._room_until:
                break
            self._refresh_room(w + need)  # then the end is computed again: a failed reservation moves it
            if w + need > self._room_until:
                if not self._wait_for_room(need):
                    return -1
            elif w + need - self._read_pos > self._pace_from:
                self._pace(need, w + need - self._read_pos)
        if pad:
            if pad >= REC_HEAD_BYTES:  # a shorter tail is skipped by the consumer without a PAD record
                REC_HEAD.pack_into(self._data, off, pad, KIND_PAD, 0, 0, 0)
            off = 0
        self._pending = need
        return off

    def publish(self) -> None:
        """Make the record written at the last reservation visible, and wake the consumer."""
        words = self._words
        w = self._write_pos = self._write_pos + self._pending
        words[_W_WRITE_POS] = w
        used = w - self._read_pos
        if used > self.high_water:  # noqa: PLR1730  (a compare, not a call: this runs per record)
            self.high_water = used
        self.records += 1
        if words[_W_SLEEPING]:
            self._items.post()

    def _wait_for_room(self, need: int) -> bool:
        if not self.block:
            return False
        timeout_s, alive = self.timeout_s, self.alive
        words, space = self._mem.words, self._space
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        words[_W_WAITING] = need
        try:
            while True:
                space.clear()  # drop stale wake-ups
                self._refresh_room(self._write_pos + need)
                if self._write_pos + need <= self._room_until:
                    return True
                if self._refuse_waits:
                    raise ClosedError("the recorder is being closed by another thread: this record was not written")
                if alive is not None and not alive():
                    raise ConsumerGone()
                slice_s = WAIT_SLICE_S
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    slice_s = min(slice_s, left)
                space.wait(slice_s)
        finally:
            words[_W_WAITING] = 0
            self.blocked_s += time.monotonic() - start

    def _pace(self, need: int, used: int) -> None:
        """Wait for the consumer's next release, at most the pace's share for a ring ``used`` bytes full."""
        if not self.block or self._refuse_waits:
            return
        share = (used / self.capacity - PACE_FROM) / (1 - PACE_FROM)
        words, space = self._words, self._space
        start = time.monotonic()
        deadline = start + self._pace_s * min(share, 1.0)
        words[_W_WAITING] = need  # the consumer's next release leaves that much room: it posts ``space``
        try:
            space.clear()
            while words[_W_READ_POS] == self._read_pos and not self._refuse_waits:  # not released since looked at
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                space.wait(left)  # a post may also come from the reservation, or be stale
        finally:
            words[_W_WAITING] = 0
            self.blocked_s += time.monotonic() - start

    def close(self) -> None:
        """Detach from the memfd (the kernel frees it once no worker holds it either)."""
        if self.closed:
            return
        self._reservation.stop()  # it reads the mapping: unmapped under it, it would crash the process
        self.closed = True
        self._data.release()
        self._mem.release_views()
        self._shm.close()
        self._items.close()
        self._space.close()
