"""Env side: start, watch and stop one worker process fed by one ring.

Shutdown protocol (``Worker.close``), step by step:

1. The owner posts a CLOSE record into the ring (waiting for room only while
   the worker is alive: a dead worker never blocks it).
2. Wait up to ``close_timeout_s`` for the worker to finish its output, send
   ``("done", summary)`` on its pipe and exit.
3. Still running: SIGTERM, 2 s, then SIGKILL, and a warning saying so.
4. The owner detaches and unlinks the ring (only the env process unlinks).

A worker failure reaches the owner as a fact with its cause: ``failure()``
returns the reason (exit status named as a signal, or "failed" with the
worker's traceback as a ``RemoteTraceback``), once.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from multiprocessing.context import BaseContext
from typing import Any, Callable

from .errors import RemoteTraceback
from .records import Status
from .ring import RingWriter

__all__ = ["Worker", "signal_name"]

logger = logging.getLogger(__name__)

_SPAWN_HINT = (
    "; it never started: with the 'spawn' start method the worker re-imports your main script, "
    "so guard the script's top-level code with `if __name__ == '__main__':`"
)


def signal_name(exitcode: int | None) -> str:
    """'SIGKILL(-9)' for a process killed by a signal, 'exit code 3' otherwise."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"{signal.Signals(-exitcode).name}({exitcode})"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


class Worker:
    """One worker process, its ring and its report pipe."""

    def __init__(self, role: str, target: Callable, config: Any, ring: RingWriter, ctx: BaseContext, start_method: str) -> None:
        self.role = role
        self.ring = ring
        self.start_method = start_method
        self._conn, child_conn = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=target,
            args=(config, ring.spec, child_conn, os.getpid()),
            name=f"envrec-{role}",
            daemon=True,
        )
        try:
            self._proc.start()
        finally:
            child_conn.close()
        self.pid: int = self._proc.pid
        self.exitcode: int | None = None
        self.summary: dict | None = None
        self._traceback: str | None = None
        self.hang_reason: str | None = None
        self._beat, self._beat_at = -1, time.monotonic()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.exitcode is None

    def hung(self, timeout_s: float) -> bool:
        """True once a started worker's heartbeat has not moved for ``timeout_s`` (it is then killed)."""
        if self._proc is None or self._proc.exitcode is not None or not self.ring.status(Status.READY):
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
        self._proc.join(5.0)
        return True

    def usable(self) -> bool:
        """Alive and not failed: records sent to it will be handled."""
        return self.alive() and not self.ring.status(Status.BROKEN)

    def _read_messages(self) -> None:
        try:
            while self._conn.poll():
                what, payload = self._conn.recv()
                if what == "error":
                    self._traceback = payload
                elif what == "done":
                    self.summary = payload
        except (EOFError, OSError):
            pass

    def failure(self) -> tuple[str, BaseException | None] | None:
        """Why this worker can no longer be used (reason, cause), or None while it is fine."""
        if self._proc is None:
            return None
        self._read_messages()
        if self._traceback is not None or self.ring.status(Status.BROKEN):
            return f"the {self.role} failed", RemoteTraceback(self._traceback) if self._traceback else None
        code = self._proc.exitcode
        if code is not None and self.hang_reason is not None:
            return self.hang_reason, None
        if code is not None and self.summary is None:
            # The spawn-bootstrap failure of an unguarded main script exits with code 1, before READY.
            hint = "" if self.ring.status(Status.READY) or self.start_method == "fork" or code != 1 else _SPAWN_HINT
            return f"the {self.role} process died ({signal_name(code)}){hint}", None
        return None

    def failure_after_close(self) -> tuple[str, BaseException | None] | None:
        """Why the worker did not finish cleanly, judged after ``close``."""
        if self._traceback is not None:
            return f"the {self.role} failed", RemoteTraceback(self._traceback)
        if self.summary is None:
            return f"the {self.role} ended without finishing ({signal_name(self.exitcode)})", None
        return None

    def close(self, timeout_s: float, close_record: Callable[[], None]) -> None:
        """Steps 1-3 of the shutdown protocol; the caller then closes the ring."""
        if self._proc is None:
            return
        try:
            if self.alive():
                close_record()
                self._proc.join(timeout_s)
            self._read_messages()
        finally:
            self._stop(timeout_s)

    def _stop(self, timeout_s: float) -> None:
        proc = self._proc
        if proc.exitcode is None:
            logger.warning("envrec: the %s did not finish within %.0f s; terminating it", self.role, timeout_s)
            proc.terminate()
            proc.join(2.0)
        if proc.exitcode is None:
            proc.kill()
            proc.join(2.0)
        self.exitcode = proc.exitcode
        proc.close()
        self._proc = None  # it holds the ring's semaphores, unlinked once unreferenced
        self._conn.close()
