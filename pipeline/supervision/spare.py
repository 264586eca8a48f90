"""Env side: spare worker interpreters, started ahead, that the next worker starts take instead of new ones.

A worker is a fresh interpreter (``envrec.supervision.launcher``): starting one costs its imports (numpy,
envrec: ~200 ms on the development machine), which a recorder's ``close()`` waits for when it comes early
(a notebook cell, an evaluation script, a replaced worker, a test). So when a worker is closed (and
``START_DELAY_S`` later, once its recorder's other workers are closed too), one more
interpreter is started the same way (``python -P -m envrec.workers --spare-fd=N``, its signals blocked,
its output drained, a child of this process) and left waiting, imports done, on its end of a socket pair,
up to ``MAX_SPARES``. The next ``WorkerProcess`` takes one: it sends the worker's arguments, the current
environment, ``sys.path`` and working folder in a memory file, with the descriptors the worker inherits
(``socket.send_fds``); the spare puts each descriptor at the number the worker's config names and becomes
that worker (``envrec.workers.__main__``). Everything else is as for a worker started then: it is this
process's child (its exit status, ``kill``, the process group), it started with SIGTERM and SIGINT
blocked, it watches the env process.

A spare exits when this process closes its socket: at exit, when a signal closes the recorders, or when
this process dies (the kernel closes it). A process forked from this one never uses its parent's spares
and closes its copies of their sockets, so a spare never waits for a forked child.
``ENVREC_SPARE_WORKER=0`` starts none, and none is started for an interpreter ``ENVREC_PYTHON`` names.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_SPARES", "SPARE_ENV_VAR", "Spare", "SpareWorkers", "payload", "spare_workers"]

logger = logging.getLogger(__name__)

SPARE_ENV_VAR = "ENVREC_SPARE_WORKER"
SPARE_MODULES = frozenset({"envrec.workers"})  # the modules whose mains can wait as spares
MAX_SPARES = 2  # per module: a trace and a video recorder start two workers at once
# after a worker is closed: its recorder's other workers finish closing first, not competing with the spare's imports
START_DELAY_S = 0.25
REAP_S = 10.0  # how long a discarded spare gets to see its socket closed and exit


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
            self.discard()  # gone since it was looked at: reaped, and the worker started afresh
            return False
        self.sock.close()
        return True

    def discard(self) -> None:
        """Let it exit (it sees its socket close), and reap it in a thread once it has."""
        with contextlib.suppress(OSError):
            self.sock.close()
        proc = self.started.proc
        threading.Thread(target=_reap, args=(proc,), name="envrec-spare-reap", daemon=True).start()


def _reap(proc: subprocess.Popen) -> None:
    """Wait for a discarded spare; one that does not leave is killed (it holds nothing of a recording)."""
    try:
        proc.wait(REAP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(REAP_S)


class SpareWorkers:
    """The spares of this process: at most ``MAX_SPARES`` per worker module, started in a thread when a worker
    of that module was closed (a process that closed a recorder is likely to start another: a notebook, an
    evaluation script, a test suite; a training job that keeps its recorders never gets one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[str, list[Spare]] = {}
        self._starting: dict[str, int] = {}
        self._closed = False

    def enabled(self, module: str) -> bool:
        return (module in SPARE_MODULES and not self._closed and os.environ.get(SPARE_ENV_VAR, "1") != "0"
                and hasattr(socket, "send_fds"))

    def take(self, module: str) -> Spare | None:
        """A waiting spare for ``module``, alive; None when there is none.

        Args:
            module: the worker module (``envrec.workers``).
        """
        if not self.enabled(module):
            return None
        while True:
            with self._lock:
                waiting = self._spares.get(module) or []
                spare = waiting.pop(0) if waiting else None
            if spare is None or spare.started.proc.poll() is None:
                return spare
            spare.discard()

    def prepare(self, module: str, start: Callable[[str, list[str], tuple[int, ...]], Any]) -> None:
        """Start one more spare for ``module`` in a thread, unless ``MAX_SPARES`` wait or start already.

        Args:
            module: the worker module (``envrec.workers``).
            start: how an interpreter is started (``launcher.start_interpreter``).
        """
        if not self.enabled(module):
            return
        with self._lock:
            if len(self._spares.get(module) or []) + self._starting.get(module, 0) >= MAX_SPARES:
                return
            self._starting[module] = self._starting.get(module, 0) + 1
        timer = threading.Timer(START_DELAY_S, self._start, args=(module, start))
        timer.name, timer.daemon = "envrec-spare", True
        timer.start()

    def _start(self, module: str, start_interpreter: Callable[[str, list[str], tuple[int, ...]], Any]) -> None:
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            here.set_inheritable(False)
            started = start_interpreter("spare", [module, f"--spare-fd={there.fileno()}"], (there.fileno(),))
        finally:
            there.close()
            with self._lock:
                self._starting[module] -= 1
        if started.start_error is not None:
            here.close()
            logger.debug("envrec: no spare worker: %s", started.start_error)
            return
        with self._lock:
            if not self._closed:
                self._spares.setdefault(module, []).append(Spare(started, here))
                return
        here.close()  # closed meanwhile (the process is exiting)

    def forget(self) -> None:
        """In a forked child: close its copies of the parent's sockets (the spares go on waiting for the parent,
        which still holds its own) and start afresh."""
        self._lock = threading.Lock()  # the parent's may have been held by another thread at the fork
        for spare in (s for waiting in self._spares.values() for s in waiting):
            with contextlib.suppress(OSError):
                spare.sock.close()
        self._spares, self._starting = {}, {}

    def close(self) -> None:
        """Let every spare exit, and start no more (at exit)."""
        with self._lock:
            self._closed = True
            spares, self._spares = [s for waiting in self._spares.values() for s in waiting], {}
        for spare in spares:
            spare.discard()

    @contextlib.contextmanager
    def paused(self):
        """Let every spare exit, and start none while the block runs (when a signal closes every recorder: the
        process is about to end)."""
        closed = self._closed
        self.close()
        try:
            yield
        finally:
            self._closed = closed


_SPARES = SpareWorkers()
atexit.register(_SPARES.close)
os.register_at_fork(after_in_child=_SPARES.forget)


def spare_workers() -> SpareWorkers:
    """This process's spares."""
    return _SPARES


def payload(argv: list[str]) -> bytes:
    """What a spare needs besides descriptors: the worker's arguments, the environment, ``sys.path``, the folder."""
    try:
        folder: str | None = os.getcwd()
    except OSError:  # removed since this process went there: the spare stays where it is
        folder = None
    return pickle.dumps((argv, dict(os.environ), list(sys.path), folder), protocol=pickle.HIGHEST_PROTOCOL)
