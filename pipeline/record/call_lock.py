"""One recorder, several threads: each record is written whole, and ``close()`` waits for the one in progress.

Every recorder holds a reentrant lock (``threading.RLock``) around each call
that records, from its checks to the publish of its record, so records
from different threads never interleave in the ring: each is whole, and the
records are in the order in which the calls took the lock (that order
numbers the steps). Pairs of calls are *not* kept together: an
``add_reset`` of one thread may land between two ``add_step`` calls of
another, and those steps then belong to the new episode (one recorder
records one stream of episodes; record separate envs with separate
recorders). An uncontended lock costs well under a microsecond a call
(``scripts/bench/bench_threads.py``).

``close()`` from another thread (``take_for_close``):

1. it raises its recorder's ``closing`` flag: a call that takes the lock
   after that raises ``ClosedError`` (so a thread stepping in a tight loop
   cannot keep close waiting);
2. it waits ``CLOSE_GRACE_S`` for the call in progress, which normally ends
   in microseconds;
3. a call still waiting for room in a full ring then has that wait refused
   (``RingWriter.refuse_waits``): it raises ``ClosedError`` in its thread,
   nothing of its record published; then close takes the lock and closes
   within ``close_timeout_s`` as usual.

The lock is reentrant because the thread that holds it may call the
recorder again: an ``on_batch_committed`` or ``on_clip_closed`` callback
runs inside the call that polled it, and a signal handler (not
``close_on_signals``'s, which waits until the main thread is outside
envrec) may close the recorder between two bytecodes of a call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from ..contract.ring import RingWriter

if TYPE_CHECKING:
    from ..supervision.stream import Stream

__all__ = ["CLOSE_GRACE_S", "close_once", "held_for_close", "take_for_close"]

logger = logging.getLogger(__name__)

CLOSE_GRACE_S = 1.0  # how long close() lets another thread's call wait for ring room before refusing that wait


class _Closable(Protocol):
    _lock: threading.RLock
    _closing: bool


def take_for_close(recorder: _Closable, ring: RingWriter) -> None:
    """Raise ``recorder._closing`` and acquire ``recorder._lock`` for close (the steps above); the caller releases it.

    Args:
        recorder: the recorder being closed (its ``_lock`` and ``_closing``).
        ring: its stream's ring, whose waits for room are refused after the grace.
    """
    recorder._closing = True
    if recorder._lock.acquire(timeout=CLOSE_GRACE_S):
        return
    started = time.monotonic()
    ring.refuse_waits(True)  # a call blocked on a full ring raises ClosedError within one wait slice
    try:
        recorder._lock.acquire()  # bounded by what the call in progress does under the stream's own timeouts
    finally:
        ring.refuse_waits(False)  # close's own CLOSE record may wait for room
    waited = time.monotonic() - started + CLOSE_GRACE_S
    logger.warning("envrec: close() waited %.1f s for another thread's call in progress to give up its wait", waited)


@contextmanager
def held_for_close(recorder: _Closable, ring: RingWriter) -> Iterator[None]:
    """``take_for_close``, then the body (the recorder's own closing), then the lock released.

    Args:
        recorder: the recorder being closed (its ``_lock`` and ``_closing``).
        ring: its stream's ring, whose waits for room are refused after the grace.
    """
    take_for_close(recorder, ring)
    try:
        yield
    finally:
        recorder._lock.release()


def close_once(recorder: _Closable, stream: Stream, close: Callable[[], dict | None]) -> dict | None:
    """A recorder's ``close()``: ``close`` run once, under the lock (``held_for_close``); harmless when repeated,
    from another thread, or in a forked child (the stream's summary then).

    Args:
        recorder: the recorder being closed (its ``_lock`` and ``_closing``).
        stream: its stream.
        close: the recorder's own closing, run when the stream is still open once the lock is held.
    """
    if stream.closed or stream.left_behind_by_fork:
        return stream.worker.summary
    with held_for_close(recorder, stream.ring):
        if stream.closed:
            return stream.worker.summary  # closed by another thread while this one waited
        return close()
