"""Env side: one stream of records (a ring and the worker that drains it) under a policy.

A recorder (trace or video) owns one ``Stream``. ``send`` writes a record
under the backpressure policy and counts what is dropped; every
``STATUS_CHECK_INTERVAL_S`` (and at once when a write finds the worker dead)
the stream checks its worker. A failed worker is logged once with its cause
and the stream is marked broken: later records are dropped and counted, the
env goes on. With ``strict=True`` the next call raises ``WorkerError``
instead, the worker's traceback as its cause.

Whether a failed worker is replaced is the ``RestartPolicy`` its recorder
chose (``envrec.supervision.lifecycle``): at once by a successor on the same
ring (trace serializer), by a fresh worker and ring when the owner calls
``restart()`` (video encoder, before its next clip), or never (vector serializer).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from ..contract.protocol import Suspect
from ..contract.records import Kind, Status
from ..contract.ring import ConsumerGone, RingWriter
from ..contract.shm import sweep_orphans
from ..errors import ClosedError, WorkerError
from ..options import BACKPRESSURE_POLICIES, StreamOptions
from .lifecycle import Restart, RestartPolicy, WorkerState
from .stats import process_facts
from .supervisor import Worker

__all__ = ["BACKPRESSURE_POLICIES", "STATUS_CHECK_INTERVAL_S", "Stream", "register_closer", "warn_start_method"]

logger = logging.getLogger(__name__)

STATUS_CHECK_INTERVAL_S = 0.5  # how late a dead or failed worker may be noticed while recording
MIN_WAIT_S = 0.05  # what close still gives a worker once close_timeout_s has run out (a successor's first look)


def warn_start_method(start_method: str | None, stacklevel: int = 3) -> None:
    """The deprecated ``start_method`` option: accepted, ignored, and said so once per call site."""
    if start_method is not None:
        warnings.warn(
            "start_method is deprecated and ignored: envrec's workers always start as fresh interpreters "
            "(python -m envrec.workers), which needs no __main__ guard and works in daemonic processes and threads",
            DeprecationWarning,
            stacklevel=stacklevel,
        )


_forks = 0  # how many os.fork() calls this process came out of as the child


def _after_fork_in_child() -> None:
    global _forks
    _forks += 1
    _live.clear()  # a forked child never closes its parent's recorders (at exit or on a signal)


class Stream:
    """A ring plus its worker process, with the backpressure and failure policy.

    A stream belongs to the process that made it: in a process forked from
    that one (``os.fork``, multiprocessing's ``fork``) every call that
    records raises ``ClosedError`` saying so (the records would interleave
    with the parent's in its ring, or be lost), and ``close`` does nothing
    there: the recording is the parent's, which goes on and closes it.
    """

    def __init__(
        self,
        role: str,
        main: str,
        config: Any,
        options: StreamOptions,
        *,
        ring_bytes: int,
        restart: RestartPolicy,
        where: str | None = None,
        on_broken: Callable[[str], None] | None = None,
    ) -> None:
        """``ring_bytes``: ``options.ring_bytes`` resolved against the recorder's default; ``restart``:
        what is done when the worker fails."""
        self.role = role  # what messages call the worker
        self._main, self._config = main, config  # which worker main runs (envrec.workers.entry.MAINS), with what
        self.restart_policy = restart
        self.max_restarts = options.max_restarts
        self.hang_timeout_s = options.hang_timeout_s  # a worker whose heartbeat stops this long is killed
        self.where = where  # the output folder, named in a broken stream's reason
        self._on_broken = on_broken  # told the reason once the stream is broken (e.g. to write it into the folder)
        self.ring_bytes = ring_bytes
        self.backpressure = options.backpressure
        self.block_timeout_s = options.block_timeout_s
        self.strict = options.strict
        self.close_timeout_s = options.close_timeout_s
        self.records_dropped = 0
        self.records_lost = 0  # left in the ring of a worker that died (counted at its restart)
        self._old_rings = (0, 0.0, 0)  # records sent, seconds blocked, high water of rings replaced
        self._control_records = 0  # CLOSE records: not the user's
        self._final_unreleased = 0
        self.broken: str | None = None
        self.broken_cause: BaseException | None = None
        self.restarts = 0
        self._in_a_row = 0  # hand-overs since a worker last skipped a poison record
        self._poisoned_seen = 0  # records skipped as poison when the last hand-over looked
        self._suspect: Suspect | None = None  # what the last successor was told (see envrec.contract.protocol.Suspect)
        self.closed = False
        self._final: dict[int, int] = {}
        self._totals: dict[int, int] = {}  # counters of workers already replaced
        self._forks, self._owner_pid = _forks, os.getpid()
        sweep_orphans()
        self._start()

    def _start(self) -> None:
        self.ring = RingWriter(self.ring_bytes)
        try:
            self.worker = Worker(self.role, self._main, self._config, self.ring)
        except BaseException:
            self.ring.close()
            raise
        self.ring.set_policy(self.backpressure == "block", self.block_timeout_s, self._usable)
        self._close_sent = False  # per ring: a CLOSE sent to a replaced ring is not in this one
        self._next_check = time.monotonic() + STATUS_CHECK_INTERVAL_S

    def _usable(self) -> bool:
        """The worker will handle what is sent: alive, not failed, not hung."""
        if not self.worker.usable():
            return False
        return not (self.hang_timeout_s and self.worker.hung(self.hang_timeout_s))

    # -- sending -------------------------------------------------------------
    @property
    def left_behind_by_fork(self) -> bool:
        """True in a process forked from the one that made this stream: it must not touch it."""
        return self._forks != _forks

    def _refuse_in_fork(self) -> None:
        raise ClosedError(
            f"this {self.role} stream belongs to process {self._owner_pid}; process {os.getpid()} is a fork of it "
            "and cannot record through it (its records would interleave with the parent's, or be lost). "
            "Create the recorder after the fork, in the process that steps the env (e.g. inside the env's make "
            "function, or with multiprocessing's 'spawn' or 'forkserver' start method)"
        )

    def check_open(self) -> None:
        """Raise ``ClosedError`` if closed (or in a fork), ``WorkerError`` if broken and strict."""
        if self._forks != _forks:
            self._refuse_in_fork()
        if self.closed:
            raise ClosedError(f"this {self.role} stream is closed")
        if self.strict and self.broken is not None:
            raise WorkerError(f"the {self.role} stream is broken: {self.broken}") from self.broken_cause

    def send(self, write: Callable[..., bool], *args) -> bool:
        """Write one record through ``write(ring, *args)``; False (and counted) if it was dropped."""
        if self._forks != _forks:
            self._refuse_in_fork()
        ok = False
        while self.broken is None:
            try:
                ok = write(self.ring, *args)
                break
            except ConsumerGone:
                restarts = self.restarts
                self.check()  # may hand the ring over to a successor: then try again
                if self.restarts == restarts:
                    break
        if not ok:
            self.records_dropped += 1
        if time.monotonic() >= self._next_check:
            self.check()
        return ok

    def check(self) -> None:
        """Look at the worker now: replace it if it failed and may be replaced, else mark the stream broken (once)."""
        self._next_check = time.monotonic() + STATUS_CHECK_INTERVAL_S
        if self.broken is None:
            if self.hang_timeout_s:
                self.worker.hung(self.hang_timeout_s)  # kills it when hung: then it fails like a dead one
            failure = self.worker.failure()
            if failure is not None:
                if self._may_hand_over():
                    self._hand_over(*failure)
                else:
                    self._mark_broken(*failure)
        if self.strict and self.broken is not None:
            raise WorkerError(f"the {self.role} stream is broken: {self.broken}") from self.broken_cause

    @staticmethod
    def _last_line(cause: BaseException | None) -> str:
        """': <the last line of a worker's traceback>', or '' (what a one-line report quotes)."""
        if cause is None:
            return ""
        lines = [ln for ln in str(cause).strip().strip('"').strip().splitlines() if ln.strip()]
        return f": {lines[-1].strip()}" if lines else ""

    def _mark_broken(self, why: str, cause: BaseException | None) -> None:
        self.broken = why + self._last_line(cause)
        if self.where and self.where not in self.broken:
            self.broken += f" (output folder {self.where})"
        self.broken_cause = cause or WorkerError(why)
        logger.error(
            "envrec: the %s stream is broken (%s); the environment goes on, later records are dropped "
            "and counted. What was committed before is intact.%s",
            self.role,
            self.broken,
            f"\nWorker traceback:{cause}" if cause is not None else "",
        )
        if self._on_broken is not None:
            self._on_broken(self.broken)

    def _may_hand_over(self) -> bool:
        """A failed worker may be replaced on its ring: ``max_restarts`` failures in a row are allowed, a
        row ending when a worker skipped a poison record (a batch it says it committed is no sign: with
        a disk that stays full, each successor re-commits its predecessor's pending batch, then fails)."""
        if self.restart_policy.how is not Restart.HAND_OVER or self.ring.closed:
            return False
        poisoned = self.ring.status(Status.POISONED)
        if poisoned > self._poisoned_seen:
            self._in_a_row, self._poisoned_seen = 0, poisoned
        return self._in_a_row < self.max_restarts

    def _successor(self, cause: BaseException | None) -> Any:
        """The successor's config, told which record its predecessor failed on, if one is to blame."""
        failed_at = self.ring.status(Status.FAILED_AT)
        if not failed_at:
            return self.restart_policy.config  # killed, hung, or a disk error: no record to blame
        first, end = failed_at - 1, self.ring.status(Status.FAILED_END)
        before = self._suspect
        confirmed = before is not None and not before.confirmed and before.covers(first)
        self._suspect = Suspect(first, max(end, failed_at), self._last_line(cause)[2:] or "the worker failed", confirmed)
        return dataclasses.replace(self.restart_policy.config, suspect=self._suspect)

    def _hand_over(self, why: str, cause: BaseException | None, timeout_s: float | None = None) -> None:
        """Start a successor on the same ring: it resumes from the failed worker's last checkpoint."""
        self.worker.close(timeout_s or self.close_timeout_s, lambda: None)  # reaps it (killing it if it lingers)
        config = self._successor(cause)
        self.ring.clear_status()
        self.restarts += 1
        self._in_a_row += 1
        logger.warning(
            "envrec: %s%s; a fresh %s takes over its ring from its last checkpoint (restart %d, %d of %d in a row)",
            why, self._last_line(cause), self.role, self.restarts, self._in_a_row, self.max_restarts,
        )
        self.worker = Worker(self.role, self._main, config, self.ring)
        self.ring.set_policy(self.backpressure == "block", self.block_timeout_s, self._usable)

    def restart(self) -> bool:
        """Replace a broken worker and its ring with fresh ones (``RestartPolicy.fresh_per_clip``); False when
        closed, under another policy, or after ``max_restarts``. ``status`` sums the words over workers."""
        policy = self.restart_policy
        if self.closed or policy.how is not Restart.FRESH_PER_CLIP or self.restarts >= self.max_restarts:
            return False
        for i in range(len(Status)):
            self._totals[i] = self._totals.get(i, 0) + self.ring.status(i)
        self.records_lost += self.ring.unreleased()  # sent to the dead worker, never handled
        self._old_rings = (
            self._old_rings[0] + self.ring.records,
            self._old_rings[1] + self.ring.blocked_s,
            max(self._old_rings[2], self.ring.high_water),
        )
        self._shutdown()
        self._config = policy.config
        self._start()
        self.restarts += 1
        self.broken = self.broken_cause = None
        logger.warning("envrec: started a fresh %s (restart %d)", self.role, self.restarts)
        return True

    # -- counters and ending ---------------------------------------------------
    @property
    def records_sent(self) -> int:
        """Records of the user's calls written into rings (not the CLOSE records)."""
        return self._old_rings[0] + self.ring.records - self._control_records

    @property
    def blocked_s(self) -> float:
        return self._old_rings[1] + self.ring.blocked_s

    @property
    def backlog_bytes(self) -> int:
        """Bytes in the ring the worker has not taken yet."""
        return self.ring.used()

    @property
    def high_water(self) -> int:
        return max(self._old_rings[2], self.ring.high_water)

    def status(self, index: int) -> int:
        """A status word of the worker, summed over restarts (its last value after close)."""
        now = self._final.get(index, 0) if self.ring.closed else self.ring.status(index)
        return self._totals.get(index, 0) + now

    @property
    def worker_pid(self) -> int:
        return self.worker.pid

    def _close_record(self, final_stats: dict | None, timeout_s: float | None = None) -> None:
        if self._close_sent:
            return  # a successor finds the first one, still unreleased in the ring
        # CLOSE waits for room while the worker lives, up to close's deadline: a worker alive but hung on a full
        # ring is then stopped as one that did not finish (not waited for forever)
        self.ring.set_policy(True, timeout_s, self.worker.alive)
        part = json.dumps(final_stats or {}, allow_nan=False).encode("utf-8")
        try:
            if self.ring.write(Kind.CLOSE, 0, 0, (part,)):
                self._control_records += 1
                self._close_sent = True
        except ConsumerGone:
            pass

    def stats(self) -> dict[str, Any]:
        """The counters every recorder reports about its stream (see README, "Stats")."""
        return {
            "records_sent": self.records_sent,
            "records_dropped": self.records_dropped,
            "records_lost": self.records_lost,
            "blocked_s": self.blocked_s,
            "ring_high_water_bytes": self.high_water,
            "ring_bytes": self.ring.capacity,
            "broken": self.broken,
            "restarts": self.restarts,
            "worker_pid": self.worker_pid,
            **self.worker_facts(),
        }

    def worker_facts(self) -> dict[str, float]:
        """CPU seconds and memory of the worker: live while it runs, its own report once closed."""
        if not self.closed:
            facts = process_facts(self.worker.pid)
            return {"worker_cpu_s": facts["cpu_s"], "worker_rss_bytes": facts["rss_bytes"]} if facts else {}
        proc = (self.worker.summary or {}).get("process", {})
        out = {}
        if proc:
            out = {"worker_cpu_s": proc["cpu_s"], "worker_max_rss_bytes": proc["max_rss_bytes"]}
            if proc.get("children_cpu_s"):
                out["ffmpeg_cpu_s"] = proc["children_cpu_s"]  # the only children a worker has
        return out

    def _shutdown(self, final_stats: dict | None = None) -> None:
        """Steps 1-3 of the shutdown protocol, handing over to successors while any may be started; all of
        it within ``close_timeout_s`` (each step's kill grace aside)."""
        deadline = time.monotonic() + self.close_timeout_s

        def left() -> float:
            return max(deadline - time.monotonic(), MIN_WAIT_S)

        try:
            while True:
                self.worker.close(left(), lambda: self._close_record(final_stats, left()))
                if self.worker.state is WorkerState.FINISHED or self.broken is not None:
                    break
                failure = self.worker.failure()  # FAILED, DIED_EARLY or UNFINISHED, as judged when it was stopped
                assert failure is not None  # only a finished worker has none
                if not self._may_hand_over() or time.monotonic() >= deadline:
                    self._mark_broken(*failure)
                    break
                self._hand_over(*failure, timeout_s=left())  # the successor finishes the work, the CLOSE record included
        finally:
            self._final = {i: self.ring.status(i) for i in range(len(Status))}
            self._final_unreleased = max(self.ring.unreleased() - self._close_sent, 0)
            self.ring.close()

    def close(self, final_stats: dict | None = None) -> dict | None:
        """Shut the worker down cleanly (see ``supervisor``); harmless when repeated.

        ``final_stats`` travels with the CLOSE record, for the worker's final files.
        """
        if self.closed or self.left_behind_by_fork:
            return self.worker.summary
        self.closed = True
        if self.broken is None:
            try:
                self.check()  # a worker that failed just now: hand over, so the successor finishes the work
            except WorkerError:
                pass  # strict: closing still has to free everything
        try:
            self._shutdown(final_stats)
        finally:
            if self.broken is not None:
                self.records_lost += self._final_unreleased
        return self.worker.summary


_live: weakref.WeakSet[Any] = weakref.WeakSet()


def register_closer(obj: Any) -> None:
    """Close ``obj`` at interpreter exit if the program forgot to (before multiprocessing reaps workers)."""
    _live.add(obj)


def unregister_closer(obj: Any) -> None:
    _live.discard(obj)


def close_all(why: str) -> None:
    """Close every recorder of this process still open (at exit, or on a signal: see ``envrec.supervision.signals``)."""
    for obj in list(_live):
        try:
            obj.close()
        except Exception:  # one failing recorder must not keep the others from closing
            logger.exception("envrec: closing a recorder %s failed", why)


@atexit.register
def _close_forgotten() -> None:
    close_all("at exit")


os.register_at_fork(after_in_child=_after_fork_in_child)
