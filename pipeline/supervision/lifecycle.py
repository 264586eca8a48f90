"""Env side: a worker's lifecycle (``WorkerState``); a stream's restart policy is in ``restarts`` (re-exported here).

A worker's state is never set by hand: ``observe`` derives it from what the
env process has seen of the worker (``WorkerFacts``: its pipe, its status
words, its exit status), with one precedence. Those facts only accumulate,
so the states that may follow each other are few; ``TRANSITIONS`` lists
them, and a ``WorkerSupervisor`` logs any other step it observes (a bug in how the
facts are gathered). The usual paths::

    STARTING ──> RUNNING ──> FINISHED    sent its summary: the output is complete
        │           ├──────> FAILED      sent a traceback or raised BROKEN
        │           ├──────> HUNG        its heartbeat stopped: killed
        │           ├──────> DIED        exited without finishing: a signal, a crash
        │           └──────> UNFINISHED  stopped by ``close`` before it finished
        └──────────────────> DIED_EARLY  exited before it was ready

Between two looks a worker may have gone further (STARTING, then already
FINISHED or DIED). A dead worker's last words (a traceback, a summary) may
reach the pipe after its exit status is seen: DIED, DIED_EARLY and HUNG may
then become FAILED or FINISHED. At ``close`` the state is judged one last
time and then frozen: only the worker's own words count then (a traceback,
a summary), and a worker that was HUNG, DIED or only raised BROKEN is
UNFINISHED (DIED_EARLY if it never was ready).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from .restarts import Restart, RestartPolicy

__all__ = ["ENDED", "TRANSITIONS", "Restart", "RestartPolicy", "WorkerFacts", "WorkerState", "observe"]


class WorkerState(enum.Enum):
    """Where one worker process is in its life, as the env process sees it."""

    STARTING = "starting"  # launched, not ready yet
    RUNNING = "running"  # ready: handling records
    FINISHED = "finished"  # sent its summary: every record it took is on disk
    FAILED = "failed"  # reported an exception (its traceback) or raised the BROKEN status word
    HUNG = "hung"  # its heartbeat did not move for hang_timeout_s: killed
    DIED = "died"  # exited without finishing and without a word (killed from outside, crashed)
    DIED_EARLY = "died early"  # exited (or could not be executed) before it was ready
    UNFINISHED = "unfinished"  # stopped by close without its summary (killed when it outlived close_timeout_s)


S = WorkerState
TRANSITIONS: dict[WorkerState, frozenset[WorkerState]] = {
    S.STARTING: frozenset({S.RUNNING, S.FINISHED, S.FAILED, S.HUNG, S.DIED, S.DIED_EARLY, S.UNFINISHED}),
    S.RUNNING: frozenset({S.FINISHED, S.FAILED, S.HUNG, S.DIED, S.UNFINISHED}),
    S.FAILED: frozenset({S.FINISHED, S.DIED_EARLY, S.UNFINISHED}),  # at close a BROKEN word alone no longer counts
    S.HUNG: frozenset({S.FAILED, S.FINISHED, S.UNFINISHED}),
    S.DIED: frozenset({S.FAILED, S.FINISHED, S.UNFINISHED}),
    S.DIED_EARLY: frozenset({S.FAILED, S.FINISHED}),
    S.FINISHED: frozenset({S.FAILED}),
    S.UNFINISHED: frozenset(),
}
ENDED = frozenset(TRANSITIONS) - {S.STARTING, S.RUNNING}  # the worker can no longer take records
del S


class WorkerFacts(NamedTuple):
    """What the env process has seen of one worker; each fact, once true, stays true."""

    traceback: bool  # it sent the traceback of an exception
    broken: bool  # it raised the BROKEN status word
    exited: bool  # its exit status is known
    ready: bool  # it raised the READY status word
    hung: bool  # it was killed for a heartbeat that stopped
    finished: bool  # it sent its summary
    stopped: bool  # close has stopped it: the state is judged one last time


def observe(facts: WorkerFacts) -> WorkerState:
    """The one place a worker's state is decided from the facts, in this order of precedence."""
    if facts.traceback or (facts.broken and not facts.stopped):
        return WorkerState.FAILED
    if not (facts.exited or facts.stopped):
        return WorkerState.RUNNING if facts.ready else WorkerState.STARTING
    if facts.hung and not facts.stopped:
        return WorkerState.HUNG
    if facts.finished:
        return WorkerState.FINISHED
    if not facts.ready:
        return WorkerState.DIED_EARLY
    return WorkerState.UNFINISHED if facts.stopped else WorkerState.DIED
