"""Cross-process wake-ups that need nothing from ``multiprocessing``: one Linux eventfd each.

A ``Wakeup`` is a hint, not a count: ``post()`` makes the next (or the
current) ``wait()`` return at once, ``clear()`` forgets hints already posted.
Whoever waits re-checks the shared state it waits for, so a spurious or
coalesced hint is harmless. The file descriptor is created close-on-exec and
non-blocking; a worker inherits it explicitly (``subprocess``'s ``pass_fds``)
and rebuilds the object around the same number with ``Wakeup(fd)``.

No semaphore file, no resource tracker, no pickling: works in daemonic
processes, without a ``__main__`` guard and from any thread.
"""

from __future__ import annotations

import contextlib
import os
import select

__all__ = ["Wakeup"]


class Wakeup:
    """An eventfd used as a level-triggered wake-up between two processes."""

    def __init__(self, fd: int | None = None) -> None:
        self.owned = fd is None  # created here: closed here
        self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK) if fd is None else fd
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)

    def fileno(self) -> int:
        return self.fd

    def post(self) -> None:
        """Wake the waiter (one system call)."""
        os.eventfd_write(self.fd, 1)

    def clear(self) -> None:
        """Forget the hints posted so far."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.fd)

    def wait(self, timeout_s: float) -> bool:
        """Sleep until a hint is posted or ``timeout_s`` passes; True if woken (the hint is consumed)."""
        if not self._poll.poll(max(timeout_s, 0.0) * 1000.0):
            return False
        self.clear()
        return True

    def close(self) -> None:
        """Close the descriptor if this object created it."""
        if self.owned and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1
