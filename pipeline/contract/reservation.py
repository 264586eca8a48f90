"""A ring's pages, reserved a chunk at a time ahead of its producer, by a thread.

A memfd allocates its pages lazily, and a page it cannot allocate when it is
first touched kills the process with SIGBUS. So every page of a ring is
reserved (``posix_fallocate``) before the producer writes into it: the
first ``RESERVE_FIRST_BYTES`` when the ring is created (a ring that cannot
be had at all is an error there), the rest by this thread, which keeps
``RESERVE_AHEAD_BYTES`` reserved past what the producer asked for and maps
each chunk into this process (so that the first lap costs no page faults in
``step()``). A recorder's start waits for none of it, and a short
recording reserves, and frees at ``close()``, only what it used: the kernel
zeroes each page it hands out and frees each one at the end (~15-30 ms per
64 MiB each way). After the first lap the whole ring is reserved and the
producer no longer asks.

Should a chunk fail (memory ran out meanwhile), the ring ends where its
reservation did (``on_end``): records wrap around there, the ring goes on
that much smaller, and a warning says so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from .shm import Memfd, format_bytes

__all__ = ["PAGE_BYTES", "RESERVE_AHEAD_BYTES", "RESERVE_CHUNK_BYTES", "RESERVE_FIRST_BYTES", "UNBOUNDED", "PageReservation"]

logger = logging.getLogger(__name__)

PAGE_BYTES = 4096
PREFAULT_CHUNK_PAGES = 256  # 1 MiB of ring mapped between two looks at other threads
RESERVE_FIRST_BYTES = 8 << 20  # of the data area, reserved before the ring's constructor returns
RESERVE_CHUNK_BYTES = 8 << 20  # reserved at a time by the thread, then mapped
RESERVE_AHEAD_BYTES = 8 << 20  # kept reserved past the position the producer asked for
UNBOUNDED = 1 << 62  # a limit that no longer binds the producer


def _touch_pages(data: memoryview) -> None:
    """Read one byte of each page of ``data``, a chunk at a time, letting other threads run between chunks (a
    page fault holds the GIL: the env's loop waits at most one chunk's faults, ~0.5 ms)."""
    pages = np.frombuffer(data, np.uint8)[::PAGE_BYTES]
    for at in range(0, len(pages), PREFAULT_CHUNK_PAGES):
        pages[at : at + PREFAULT_CHUNK_PAGES].sum()
        time.sleep(0)
    del pages


class PageReservation:
    """Reserves the pages of a ring's data area ahead of its producer (see the module docstring).

    Args:
        memfd: the ring's memory, its first ``offset + min(capacity, RESERVE_FIRST_BYTES)`` bytes reserved.
        data: the data area's view (``capacity`` bytes at ``offset`` in the memfd).
        offset: where the data area starts in the memfd.
        on_more: called (in the thread) when more is reserved or the reservation ended: wakes a producer that
            waits for it.
        on_end: called (in the thread) with the data bytes reserved when a chunk failed: the ring ends there.
    """

    def __init__(self, memfd: Memfd, data: memoryview, offset: int, on_more: Callable[[], None],
                 on_end: Callable[[int], None]) -> None:
        self._memfd, self._data, self._offset = memfd, data, offset
        self.capacity = len(data)
        self._on_more, self._on_end = on_more, on_end
        # data bytes reserved so far; UNBOUNDED once they all are (or the rest failed)
        self.reserved = UNBOUNDED if self.capacity <= RESERVE_FIRST_BYTES else RESERVE_FIRST_BYTES
        self._wanted = 0  # the furthest position the producer asked for
        self._asked = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="envrec-ring-reserve", daemon=True)
        self._thread.start()

    def limit(self, upto: int, pad_header: int) -> int:
        """How far the producer may write, which wants to write up to position ``upto`` (first lap, so a position
        is an offset): up to the next point where it asks again, or, when the thread is behind, to the end of
        what is reserved short of ``pad_header`` bytes (room for a PAD record's header if the ring ends there)."""
        reserved = self.reserved
        if reserved == UNBOUNDED:
            return UNBOUNDED
        ask_at = reserved - RESERVE_AHEAD_BYTES // 2
        if upto > ask_at:
            self._wanted = max(self._wanted, upto)
            self._asked.set()
            return reserved - pad_header
        return ask_at

    def stop(self) -> None:
        """Stop between chunks (the ring is closing: nothing writes any more) and wait for the thread: it reads
        the mapping, which must not be unmapped under it."""
        self._stopping = True
        self._asked.set()
        self._thread.join()

    def _run(self) -> None:
        cap, mapped = self.capacity, 0
        while True:
            reserved = min(self.reserved, cap)
            _touch_pages(self._data[mapped:reserved])
            mapped = reserved
            self._asked.clear()
            if self._stopping:
                return
            if reserved >= cap:
                break
            if self._wanted + RESERVE_AHEAD_BYTES <= reserved:
                self._asked.wait()  # far enough ahead: until the producer asks (or the ring closes)
                continue
            length = min(RESERVE_CHUNK_BYTES, cap - reserved)
            try:
                self._memfd.reserve(self._offset + reserved, length)
            except OSError as exc:
                self._end_at(reserved, exc)
                return
            self.reserved = reserved + length
            self._on_more()
        self.reserved = UNBOUNDED
        self._on_more()

    def _end_at(self, reserved: int, exc: OSError) -> None:
        logger.warning("envrec: could reserve only %s of a %s ring (%s); it records in that much",
                       format_bytes(reserved), format_bytes(self.capacity), exc.strerror or exc)
        self._on_end(reserved)
        self.reserved = UNBOUNDED  # only now: a producer that sees no limit sees the ring's new end
        self._on_more()
