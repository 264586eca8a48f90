"""``Background``: one thread doing a logger's slow work off the user's loop, in order, drained at exit.

``to_tensorboard(..., background=True)`` hands each clip to it, so the
``step()`` that reports a clip returns at once while ffmpeg makes the GIF.
``close(timeout_s)`` waits for what was handed over and stops the thread;
whatever was never closed is drained when the interpreter exits
(``atexit``), for at most ``EXIT_WAIT_S`` in all, and a warning counts what
was left. The thread is a daemon: a process that must exit does.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["EXIT_WAIT_S", "Background"]

logger = logging.getLogger(__name__)

EXIT_WAIT_S = 60.0  # at exit, how long the clips still queued may take, all loggers together
_STOP = object()
_open: weakref.WeakSet[Background] = weakref.WeakSet()


class Background:
    """A thread, started with the first item, running ``work(item)`` for each submitted item in turn.

    Args:
        name: the thread's name.
        work: what to do with an item; it must not raise (the loggers catch everything themselves).
    """

    def __init__(self, name: str, work: Callable[[Any], None]) -> None:
        self.name = name
        self._work = work
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.pending = 0  # items submitted and not yet done

    def submit(self, item: Any) -> bool:
        """Queue ``item``; False once closed (the caller then does the work itself)."""
        with self._lock:
            if self._closed:
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
                _open.add(self)
            self.pending += 1
            self._queue.put(item)
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self._work(item)
            finally:
                with self._lock:
                    self.pending -= 1

    def close(self, timeout_s: float | None = None) -> bool:
        """Wait up to ``timeout_s`` (None: as long as it takes) for the items submitted; True when all are done."""
        with self._lock:
            thread = self._thread
            if not self._closed and thread is not None:
                self._queue.put(_STOP)
            self._closed = True
        if thread is None or thread is threading.current_thread():
            return self.pending == 0
        thread.join(timeout_s)
        if thread.is_alive():
            return False
        _open.discard(self)
        return True


@atexit.register
def _drain_at_exit() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    for background in list(_open):
        if not background.close(max(0.0, deadline - time.monotonic())):
            logger.warning("envrec.log: %d clip(s) of %s were not logged by the time the process exited (%g s)",
                           background.pending, background.name, EXIT_WAIT_S)
