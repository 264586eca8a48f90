"""Env side: one stream of records (a ring and the worker that drains it) under a policy.

A recorder (trace or video) owns one ``Stream``. ``send`` writes a record
(a ``RingRecord``) under the backpressure policy and counts what is dropped;
every ``STATUS_CHECK_INTERVAL_S`` (and at once when a write finds the worker
dead) the stream checks its worker. A failed worker is logged once with its
cause and the stream is marked broken: later records are dropped and
counted, the env goes on. With ``strict=True`` the next call raises
``WorkerError`` instead, the worker's traceback as its cause.

A stream is made of pieces that each hold one concern:

* the worker process, watched and stopped by a ``WorkerSupervisor``
  (``envrec.supervision.supervisor``), which reports its failures as facts;
* whether a failed worker is replaced, and with what: the ``Restarter`` of
  the ``RestartPolicy`` its recorder chose (``envrec.supervision.restarts``):
  at once by a successor on the same ring (trace serializer), by a fresh
  worker and ring when the owner calls ``restart()`` (video encoder, before
  its next clip), or never (vector serializer);
* what it counts across the rings and workers it used: ``StreamCounters``
  (``envrec.supervision.counters``);
* closing at exit what a program forgot: ``envrec.supervision.closers``,
  where each recorder registers itself.

The stream itself carries out what they decide: it writes, checks, hands
its ring over, marks itself broken, and closes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

from ..contract.records import Kind
from ..contract.ring import ConsumerGone, RingWriter
from ..contract.shm import sweep_orphans
from ..errors import ClosedError, WorkerError
from ..options import BACKPRESSURE_POLICIES, StreamOptions
from .counters import StreamCounters
from .lifecycle import WorkerState
from .restarts import RestartPolicy
from .stats import process_facts
from .supervisor import WorkerSupervisor

__all__ = ["BACKPRESSURE_POLICIES", "STATUS_CHECK_INTERVAL_S", "RawRecord", "RingRecord", "Stream", "warn_start_method"]

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


class RingRecord(Protocol):
    """One record handed to ``Stream.send``: it knows how to write itself into a ring.

    The recorders' records are ``envrec.record.packer``'s ``StepRecord``,
    ``ResetRecord`` and ``FrameRecord`` (written in place by a packer), and
    ``RawRecord`` (sections ready as bytes).
    """

    def write_to(self, ring: RingWriter) -> bool:
        """Write this record into ``ring``; False when the ring's policy dropped it (full)."""
        ...


@dataclasses.dataclass(slots=True)
class RawRecord:
    """A record whose sections are ready (bytes or 1-D byte views), copied into the ring as they are.

    Args:
        kind: the record's kind (``envrec.contract.records.Kind``).
        episode: the episode it belongs to (0 where its kind has none).
        step: its step (0 where its kind has none).
        sections: its sections, in the order its kind's layout gives.
    """

    kind: int
    episode: int
    step: int
    sections: list | tuple

    def write_to(self, ring: RingWriter) -> bool:
        return ring.write(self.kind, self.episode, self.step, self.sections)


class Stream:
    """A ring plus its worker process, with the backpressure and failure policy.

    A stream belongs to the process that made it: in a process forked from
    that one (``os.fork``, multiprocessing's ``fork``) every call that
    records raises ``ClosedError`` saying so (the records would interleave
    with the parent's in its ring, or be lost), and ``close`` does nothing
    there: the recording is the parent's, which goes on and closes it.

    Args:
        role: what the worker is ("serializer", "encoder", "vector serializer"): messages call it so, and it
            names the worker main that runs (``envrec.supervision.supervisor.worker_main``).
        config: what the first worker is started with.
        options: the recorder's ``StreamOptions``.
        ring_bytes: ``options.ring_bytes`` resolved against the recorder's default.
        restart: what is done when the worker fails.
        where: the output folder, named in a broken stream's reason.
        on_broken: told the reason once the stream is broken (e.g. to write it into the folder).
        pace_s: the ring's pacing (``RingWriter.set_pacing``; 0: none).
    """

    def __init__(
        self,
        role: str,
        config: Any,
        options: StreamOptions,
        *,
        ring_bytes: int,
        restart: RestartPolicy,
        where: str | None = None,
        on_broken: Callable[[str], None] | None = None,
        pace_s: float = 0.0,
    ) -> None:
        self.role = role
        self.pace_s = pace_s
        self.restart_policy = restart
        self.restarter = restart.restarter(options.max_restarts)
        self.max_restarts = options.max_restarts
        self.hang_timeout_s = options.hang_timeout_s  # a worker whose heartbeat stops this long is killed
        self.where = where
        self._on_broken = on_broken
        self.ring_bytes = ring_bytes
        self.backpressure = options.backpressure
        self.block_timeout_s = options.block_timeout_s
        self.strict = options.strict
        self.close_timeout_s = options.close_timeout_s
        self.counters = StreamCounters()
        self.broken: str | None = None
        self.broken_cause: BaseException | None = None
        self.closed = False
        self._forks, self._owner_pid = _forks, os.getpid()
        sweep_orphans()
        self._start(config)

    def _start(self, config: Any) -> None:
        """A fresh ring and a worker started on it with ``config``."""
        self.ring = RingWriter(self.ring_bytes)
        try:
            self.worker = WorkerSupervisor(self.role, config, self.ring)
        except BaseException:
            self.ring.close()
            raise
        self._watch_ring()
        self._close_sent = False  # per ring: a CLOSE sent to a replaced ring is not in this one

    def _watch_ring(self) -> None:
        """The ring's backpressure, watching the worker now on it; its first check due."""
        self.ring.set_policy(self.backpressure == "block", self.block_timeout_s, self._usable)
        self.ring.set_pacing(self.pace_s)
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

    def send(self, record: RingRecord) -> bool:
        """Write ``record`` into the ring under the backpressure policy; False (and counted) if it was dropped.

        A write that finds the worker gone checks it at once: when a successor took the ring over, the
        record is written again, for it.
        """
        return self.send_call(record.write_to)

    def send_call(self, write: Callable[..., bool], *args: Any) -> bool:
        """``send`` of the record that ``write(ring, *args)`` writes (a packer's method: no record object to
        build per step); the same policy, counting and hand-over."""
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
            self.counters.records_dropped += 1
        if time.monotonic() >= self._next_check:
            self.check()
        return ok

    # -- failures --------------------------------------------------------------
    def check(self) -> None:
        """Look at the worker now: replace it if it failed and may be replaced, else mark the stream broken (once)."""
        self._next_check = time.monotonic() + STATUS_CHECK_INTERVAL_S
        if self.broken is None:
            if self.hang_timeout_s:
                self.worker.hung(self.hang_timeout_s)  # kills it when hung: then it fails like a dead one
            failure = self.worker.failure()
            if failure is not None:
                if self.restarter.may_hand_over(self.ring):
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

    def _hand_over(self, why: str, cause: BaseException | None, timeout_s: float | None = None) -> None:
        """Start a successor on the same ring: it resumes from the failed worker's last checkpoint."""
        self.worker.close(timeout_s or self.close_timeout_s, lambda: None)  # reaps it (killing it if it lingers)
        config = self.restarter.successor_config(self.ring, self._last_line(cause)[2:])
        self.ring.clear_status()
        count = self.restarter.handed_over()
        logger.warning(
            "envrec: %s%s; a fresh %s takes over its ring from its last checkpoint (%s)",
            why,
            self._last_line(cause),
            self.role,
            count,
        )
        self.worker = WorkerSupervisor(self.role, config, self.ring)
        self._watch_ring()

    def restart(self) -> bool:
        """Replace a broken worker and its ring with fresh ones, if the stream's policy allows it now (it
        does only under ``RestartPolicy.fresh_per_clip``, ``max_restarts`` times); False when closed or not
        allowed. ``status`` sums the words over workers."""
        if self.closed or not self.restarter.may_start_fresh():
            return False
        self.counters.retire(self.ring)
        self._shutdown()
        self._start(self.restarter.config)
        self.restarter.started_fresh()
        self.broken = self.broken_cause = None
        logger.warning("envrec: started a fresh %s (restart %d)", self.role, self.restarts)
        return True

    # -- counters --------------------------------------------------------------
    @property
    def restarts(self) -> int:
        """Workers replaced so far (handed over to, or started fresh)."""
        return self.restarter.count

    @property
    def records_dropped(self) -> int:
        return self.counters.records_dropped

    @property
    def records_lost(self) -> int:
        return self.counters.records_lost

    @property
    def records_sent(self) -> int:
        """Records of the user's calls written into rings (not the CLOSE records)."""
        return self.counters.records_sent(self.ring)

    @property
    def blocked_s(self) -> float:
        return self.counters.blocked_s(self.ring)

    @property
    def backlog_bytes(self) -> int:
        """Bytes in the ring the worker has not taken yet."""
        return self.ring.used()

    @property
    def high_water(self) -> int:
        return self.counters.high_water(self.ring)

    def status(self, index: int) -> int:
        """A status word of the worker, summed over restarts (its last value after close)."""
        return self.counters.status(self.ring, index)

    @property
    def worker_pid(self) -> int:
        return self.worker.pid

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

    # -- ending ----------------------------------------------------------------
    def _close_record(self, final_stats: dict | None, timeout_s: float | None = None) -> None:
        if self._close_sent:
            return  # a successor finds the first one, still unreleased in the ring
        # CLOSE waits for room while the worker lives, up to close's deadline: a worker alive but hung on a full
        # ring is then stopped as one that did not finish (not waited for forever)
        self.ring.set_policy(True, timeout_s, self.worker.alive)
        section = json.dumps(final_stats or {}, allow_nan=False).encode("utf-8")
        try:
            if self.ring.write(Kind.CLOSE, 0, 0, (section,)):
                self.counters.control_records += 1
                self._close_sent = True
        except ConsumerGone:
            pass

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
                if not self.restarter.may_hand_over(self.ring) or time.monotonic() >= deadline:
                    self._mark_broken(*failure)
                    break
                self._hand_over(*failure, timeout_s=left())  # the successor finishes the work, the CLOSE record included
        finally:
            self.counters.freeze(self.ring, self._close_sent)
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
                self.counters.records_lost += self.counters.final_unreleased
        return self.worker.summary


os.register_at_fork(after_in_child=_after_fork_in_child)
