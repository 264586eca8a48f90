"""A shipper's figures, in a small shared memory file both the shipper and the env process map.

The shipper writes, the env process reads (``stats()["shipping"]``): eight-byte
words, one per ``ShipCounter``, each written by one process only, so no lock
is needed. ``envrec ship`` keeps them in plain memory.
"""

from __future__ import annotations

import mmap
import os
from enum import IntEnum

__all__ = ["ShipCounter", "ShipCounters"]


class ShipCounter(IntEnum):
    BATCHES_SHIPPED = 0  # batches whose commit is in the store: written by this shipper or found written before
    CLIPS_SHIPPED = 1
    BYTES_SHIPPED = 2  # data and index bytes this shipper sent
    PENDING = 3  # batches and clips committed locally, not shipped yet (at the last pass)
    RETRIES = 4  # passes that failed on a store that did not answer, and were tried again later
    FAILURES = 5  # passes that failed otherwise (the store refused): logged, tried again later
    STORE_UNREACHABLE = 6  # 1 while the last pass could not reach the store
    CONFLICTS = 7  # recordings or clips left unshipped: another recording ships under their id
    DAMAGED = 8  # local batches or clips not shipped because their files failed their checks
    READY = 9  # 1 once the shipper checked the store (claimed its id)
    DONE = 10  # 1 once the shipper ended with everything shipped
    LAST_SHIPPED_NS = 11  # time.time_ns() of the last commit it wrote


_WORDS = 16


class ShipCounters:
    """The counters, in a memfd (``fd``, for the env process to pass down) or in memory (``shared=False``).

    Args:
        fd: an existing memfd to map (the shipper's side); None: make one.
        shared: False: plain memory, nothing to pass down (``envrec ship``).
    """

    def __init__(self, fd: int | None = None, shared: bool = True) -> None:
        self.fd = -1
        if shared and fd is None:
            fd = os.memfd_create("envrec-ship-counters", os.MFD_CLOEXEC)
            os.ftruncate(fd, _WORDS * 8)
        if fd is not None:
            self.fd = fd
            self._map: mmap.mmap | bytearray = mmap.mmap(fd, _WORDS * 8)
        else:
            self._map = bytearray(_WORDS * 8)
        self._words = memoryview(self._map).cast("Q")

    def __getitem__(self, c: ShipCounter) -> int:
        return int(self._words[c])

    def __setitem__(self, c: ShipCounter, value: int) -> None:
        self._words[c] = max(0, int(value))

    def add(self, c: ShipCounter, n: int = 1) -> None:
        self._words[c] += n

    def snapshot(self) -> dict[str, int]:
        return {c.name.lower(): int(self._words[c]) for c in ShipCounter}

    def close(self) -> None:
        """Unmap (and close the memfd); harmless when repeated."""
        self._words.release()
        if isinstance(self._map, mmap.mmap):
            self._map.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
