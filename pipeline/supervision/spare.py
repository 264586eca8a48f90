"""Env side: a spare worker interpreter, started ahead, that the next worker start takes instead of a new one.

A worker is a fresh interpreter (``envrec.supervision.launcher``): starting one costs its imports (numpy,
envrec: ~200 ms on the development machine), which a recorder's ``close()`` waits for when it comes early
(a notebook cell, an evaluation script, a replaced worker, a test). So after each worker start, one more
interpreter of the same kind is started the same way (``python -P -m envrec.workers --spare-fd=N``, its
signals blocked, its output drained, a child of this process) and left waiting, imports done, on its end of
a socket pair. The next ``WorkerProcess`` takes it: it sends the worker's arguments, the current
environment, ``sys.path`` and working folder in a memory file, with the descriptors the worker inherits
(``socket.send_fds``); the spare puts each descriptor at the number the worker's config names and becomes
that worker (``envrec.workers.__main__``). Everything else is as for a worker started then: it is this
process's child (its exit status, ``kill``, the process group), it started with SIGTERM and SIGINT
blocked, it watches the env process.

At most one spare per worker module waits, per process. It exits when this process closes its socket:
at exit, or when this process dies (the kernel closes it). A process forked from this one never uses its
parent's spare, and closes its copies of the parent's sockets, so a spare never waits for a forked child.
``ENVREC_SPARE_WORKER=0`` starts none.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SPARE_ENV_VAR", "Spare", "SpareWorkers", "spare_workers"]

logger = logging.getLogger(__name__)

SPARE_ENV_VAR = "ENVREC_SPARE_WORKER"
SPARE_MODULES = frozenset({"envrec.workers"})  # the modules whose mains can wait as spares


class Spare:
    """One waiting interpreter: its process (``launcher.Started``) and this side of its socket."""

    def __init__(self, started: Any, sock: socket.socket) -> None:
        self.started = started
        self.sock = sock

    def hand_over(self, fds: tuple[int, ...], payload_fd: int) -> bool:
        """Make the spare a worker: ``payload_fd`` (a memory file of ``payload``) and ``fds``, which it puts at
        their numbers here; False when it is gone."""
        try:
            socket.send_fds(self.sock, [pickle.dumps(list(fds))], [payload_fd, *fds])
        except OSError:
            return False
        finally:
            self.sock.close()
        return True

    def discard(self) -> None:
        """Let it exit (it sees its socket close)."""
        with contextlib.suppress(OSError):
            self.sock.close()


class SpareWorkers:
    """The spares of this process, one per worker module, started in a thread after each take."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[str, Spare] = {}
        self._pid = os.getpid()

    def enabled(self) -> bool:
        return os.environ.get(SPARE_ENV_VAR, "1") != "0" and hasattr(socket, "send_fds")

    def take(self, module: str, start: Callable[[str, list[str], tuple[int, ...]], Any]) -> Spare | None:
        """The waiting spare for ``module`` (None when there is none, or it died), and another started after it.

        Args:
            module: the worker module (``envrec.workers``).
            start: how an interpreter is started (``launcher.start_interpreter``).
        """
        if module not in SPARE_MODULES or not self.enabled():
            return None
        with self._lock:
            spare = self._spares.pop(module, None)
        if spare is not None and spare.started.proc.poll() is not None:
            spare.discard()
            spare = None
        threading.Thread(target=self._start, args=(module, start), name="envrec-spare", daemon=True).start()
        return spare

    def _start(self, module: str, start_interpreter: Callable[[str, list[str], tuple[int, ...]], Any]) -> None:
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            here.set_inheritable(False)
            started = start_interpreter("spare", [module, f"--spare-fd={there.fileno()}"], (there.fileno(),))
        finally:
            there.close()
        if started.start_error is not None:
            here.close()
            logger.debug("envrec: no spare worker: %s", started.start_error)
            return
        with self._lock:
            if os.getpid() == self._pid and module not in self._spares:
                self._spares[module] = Spare(started, here)
                return
        here.close()  # another thread started one first

    def forget(self) -> None:
        """In a forked child: close its copies of the parent's sockets (the spares go on waiting for the parent,
        which still holds its own) and start afresh."""
        self._lock = threading.Lock()  # the parent's may have been held by another thread at the fork
        for spare in self._spares.values():
            with contextlib.suppress(OSError):
                spare.sock.close()
        self._spares, self._pid = {}, os.getpid()

    def close(self) -> None:
        """Let every spare exit (at this process's exit)."""
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            spare.discard()


_SPARES = SpareWorkers()
atexit.register(_SPARES.close)
os.register_at_fork(after_in_child=_SPARES.forget)


def spare_workers() -> SpareWorkers:
    """This process's spares."""
    return _SPARES


def payload(argv: list[str]) -> bytes:
    """What a spare needs besides descriptors: the worker's arguments, the environment, ``sys.path``, the folder."""
    return pickle.dumps((argv, dict(os.environ), list(sys.path), os.getcwd()), protocol=pickle.HIGHEST_PROTOCOL)
