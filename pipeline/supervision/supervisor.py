"""Env side: start, watch and stop one worker process fed by one ring.

Shutdown protocol (``WorkerSupervisor.close``, then ``Stream``), step by step:

1. The owner posts a CLOSE record into the ring (waiting for room only while
   the worker is alive: a dead worker never blocks it).
2. Wait up to ``close_timeout_s`` for the worker to finish its output, send
   ``("done", summary)`` on its pipe and exit.
3. Still running: SIGTERM, ``TERM_GRACE_S``, then SIGKILL, and a warning
   saying so. Its ffmpeg, in a process group of its own, is killed
   ``CHILD_GRACE_S`` later if it has not finished by then.
4. The owner closes its side of the ring (``RingWriter.close``): it unmaps the
   memfd and closes its descriptors. Nothing is unlinked: the
   memfd has no name in ``/dev/shm``, and the kernel frees it once the
   worker's descriptors are gone too (the worker has exited by step 3).

A worker's state (``WorkerState``, see ``envrec.supervision.lifecycle``) is
derived from what the owner has seen of it, in one place (``WorkerSupervisor.state``);
a failure reaches the owner as a fact with its cause: ``failure()`` returns
the reason (exit status named as a signal, or "failed" with the worker's
traceback as a ``RemoteTraceback``).

``WorkerSupervisor`` was called ``Worker`` before; that name stays an alias,
with a ``DeprecationWarning``, for one release.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import psutil

from ..contract.procinfo import signal_name
from ..contract.protocol import DONE, ERROR, Status
from ..contract.ring import RingWriter
from ..errors import RemoteTraceback
from .launcher import WorkerProcess, reap_later
from .lifecycle import ENDED, TRANSITIONS, WorkerFacts, WorkerState, observe

__all__ = ["WorkerState", "WorkerSupervisor", "signal_name", "worker_main"]

logger = logging.getLogger(__name__)

HUNG_REAP_S = 5.0  # a worker killed for a hang: how long its death may take to be seen (SIGKILL: the kernel's time only)
TERM_GRACE_S = 2.0  # a worker that outlived close_timeout_s: its last time to finish after SIGTERM (which it latches, not obeys)
KILL_REAP_S = 2.0  # then after SIGKILL: how long before it is left as unkillable (stuck in the kernel) and close goes on


def worker_main(role: str) -> str:
    """The worker main a role runs (a key of ``envrec.workers.loop.MAINS``): the role's name, hyphenated
    ("vector serializer" runs ``vector-serializer``)."""
    return role.replace(" ", "-")


class WorkerSupervisor:
    """The env side's hold on one worker process: starts it, watches its state, stops it.

    Args:
        role: what the worker is ("serializer", "encoder", "vector serializer"): messages call it so, and
            it names the worker main that runs (``worker_main``).
        config: what that main is started with (pickled into the child).
        ring: the ring it drains; the caller closes it after ``close``.
    """

    def __init__(self, role: str, config: Any, ring: RingWriter) -> None:
        self.role = role
        self.ring = ring
        self._proc: WorkerProcess | None = WorkerProcess(role, worker_main(role), config, ring.spec, ring.fds)
        self.pid: int = self._proc.pid
        self.exitcode: int | None = None
        self.summary: dict | None = None
        self._traceback: str | None = None
        self.hang_reason: str | None = None
        self._early: str | None = None  # why it ended before it was ready, judged when it was stopped
        self._state = WorkerState.STARTING
        self._beat, self._beat_at = -1, time.monotonic()
        self._started_wall = time.time()
        self._reaped: set[int] = set()  # the orphaned children already handed to reap_later

    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def hung(self, timeout_s: float) -> bool:
        """True once a started worker's heartbeat has not moved for ``timeout_s`` (it is then killed)."""
        if self._proc is None or self._proc.returncode is not None or not self.ring.status(Status.READY):
            return False
        beat, now = self.ring.status(Status.HEARTBEAT), time.monotonic()
        if beat != self._beat:
            self._beat, self._beat_at = beat, now
            return False
        if now - self._beat_at < timeout_s:
            return False
        self.hang_reason = f"the {self.role} made no progress for {timeout_s:g} s (hung) and was killed"
        logger.error("envrec: %s", self.hang_reason)
        self._proc.kill()
        self._proc.wait(HUNG_REAP_S)
        return True

    def usable(self) -> bool:
        """Alive and not failed: records sent to it will be handled."""
        return self.alive() and not self.ring.status(Status.BROKEN)

    def _read_messages(self) -> None:
        conn = self._proc.conn if self._proc is not None else None
        if conn is None:
            return
        try:
            while conn.poll():
                what, payload = conn.recv()
                if what == ERROR:
                    self._traceback = payload
                elif what == DONE:
                    self.summary = payload
        except (EOFError, OSError):
            pass

    @property
    def state(self) -> WorkerState:
        """Where the worker is in its life: observed now while it runs, as judged at ``close`` after."""
        proc = self._proc
        if proc is None:
            return self._state  # frozen when it was stopped
        self._read_messages()
        if self._traceback is None and self.ring.status(Status.BROKEN):
            self._read_messages()  # a worker sends its traceback before it raises BROKEN
        facts = WorkerFacts(
            traceback=self._traceback is not None,
            broken=bool(self.ring.status(Status.BROKEN)),
            exited=proc.returncode is not None,
            ready=bool(self.ring.status(Status.READY)),
            hung=self.hang_reason is not None,
            finished=self.summary is not None,
            stopped=False,
        )
        return self._enter(observe(facts))

    def _enter(self, state: WorkerState) -> WorkerState:
        if state is not self._state and state not in TRANSITIONS[self._state]:
            logger.error("envrec: internal: the %s went from %s to %s, which no worker can", self.role, self._state, state)
        self._state = state
        return state

    def failure(self) -> tuple[str, BaseException | None] | None:
        """Why this worker can no longer be used (reason, cause), or None while it is fine (or finished).

        Before ``close``: as observed now; after it: as judged when it was stopped.
        """
        state, proc = self.state, self._proc
        if state is WorkerState.FAILED:
            return f"the {self.role} failed", RemoteTraceback(self._traceback) if self._traceback else None
        if proc is not None and state in ENDED and self.summary is None:
            self._reap_orphaned_child()  # as soon as the death is seen, not when the stream is next used
        if state is WorkerState.HUNG:
            return str(self.hang_reason), None
        if state is WorkerState.DIED_EARLY:
            return (self._early or "") if proc is None else self._early_death(proc), None
        if state is WorkerState.DIED:
            return f"the {self.role} process died ({signal_name(proc.returncode if proc else None)})", None
        if state is WorkerState.UNFINISHED:
            return f"the {self.role} ended without finishing ({signal_name(self.exitcode)})", None
        return None

    def _reap_orphaned_child(self) -> None:
        """A worker that died without finishing (killed from outside, or crashed) leaves its ffmpeg, which
        runs in a process group of its own, to init; the pids it published say which (the clip's, and the one
        started ahead for the next clip). A healthy ffmpeg finishes its clip when its input closes, and one
        started ahead exits; one that does not is killed ``CHILD_GRACE_S`` later."""
        orphans = []
        for word in (Status.ENCODER_PID, Status.STANDBY_PID):
            pid = self.ring.status(word)
            if not pid or pid in self._reaped:
                continue
            self._reaped.add(pid)
            try:
                child = psutil.Process(pid)
                if child.create_time() >= self._started_wall - 1 and "ffmpeg" in child.name().lower():
                    orphans.append(child)  # else not ours: the pid was reused
            except psutil.Error:
                continue
        if orphans:
            reap_later(orphans)

    def _early_death(self, proc: WorkerProcess) -> str:
        """Why a worker ended before it was ready: it could not be executed, or what it last wrote."""
        if proc.start_error is not None:
            return proc.start_error
        tail = proc.output_tail()
        output = f"; its last output:\n{tail}" if tail.strip() else "; it wrote nothing"
        return f"the {self.role} process died ({signal_name(proc.returncode)}) before it started{output}"

    def close(self, timeout_s: float, close_record: Callable[[], None]) -> None:
        """Steps 1-3 of the shutdown protocol; the caller then closes the ring. The state is then frozen."""
        if self._proc is None:
            return
        try:
            if self.alive():
                deadline = time.monotonic() + timeout_s
                close_record()  # may wait for room in the ring itself (up to timeout_s): the two waits share it
                self._proc.wait(max(deadline - time.monotonic(), 0.0))
            self._read_messages()
        finally:
            self._stop(timeout_s)

    def _stop(self, timeout_s: float) -> None:
        proc = self._proc
        assert proc is not None  # stopped once
        if proc.returncode is None:
            logger.warning("envrec: the %s did not finish within %.0f s; terminating it", self.role, timeout_s)
            proc.terminate()
            proc.wait(TERM_GRACE_S)
        if proc.returncode is None:
            proc.kill()
            proc.wait(KILL_REAP_S)
        self.exitcode = proc.returncode
        if self.summary is None:
            self._reap_orphaned_child()
        facts = WorkerFacts(
            traceback=self._traceback is not None,
            broken=False,  # at close only the worker's own words count
            exited=True,
            ready=bool(self.ring.status(Status.READY)),
            hung=False,  # a hung worker killed is judged as any other that did not finish
            finished=self.summary is not None,
            stopped=True,
        )
        if self._enter(observe(facts)) is WorkerState.DIED_EARLY:
            self._early = self._early_death(proc)
        proc.close()
        self._proc = None


def __getattr__(name: str) -> Any:
    """``Worker``: the old name of ``WorkerSupervisor``, kept for one release."""
    if name == "Worker":
        warnings.warn(
            "envrec.supervision.supervisor.Worker is now WorkerSupervisor(role, config, ring); the old name goes "
            "in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return WorkerSupervisor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
