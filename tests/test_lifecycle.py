"""A worker's lifecycle: the state observed from accumulating facts only ever steps along TRANSITIONS;
the restart policy is explicit and consistent."""

from __future__ import annotations

import itertools
import os
import signal

import gymnasium as gym
import numpy as np
import pytest

import envrec
from envrec.contract.records import Status
from envrec.contract.ring import RingWriter
from envrec.contract.ring_reader import RingReader
from envrec.supervision import supervisor
from envrec.supervision.lifecycle import ENDED, TRANSITIONS, Restart, RestartPolicy, WorkerFacts, WorkerState, observe
from envrec.supervision.restarts import FreshPerClip, HandOver, Never

from .support.waiting import wait_for

S = WorkerState
FROZEN_AT_EXIT = ("ready", "hung", "broken")  # status words and the hang verdict: final once the process is gone


def _possible() -> list[WorkerFacts]:
    every = (WorkerFacts(*bits) for bits in itertools.product((False, True), repeat=len(WorkerFacts._fields)))
    return [f for f in every if not f.hung or f.ready]  # a worker is judged hung only once it was ready


def _may_follow(a: WorkerFacts, b: WorkerFacts) -> bool:
    """Facts only accumulate; nothing is learnt once stopped; what the ring and the hang say stops at exit."""
    if any(x and not y for x, y in zip(a, b, strict=True)) or (a.stopped and a != b):
        return False
    return not (a.exited and any(getattr(a, k) != getattr(b, k) for k in FROZEN_AT_EXIT))


def test_every_observed_step_is_in_the_table():
    facts = _possible()
    seen = set()
    for a, b in itertools.product(facts, facts):
        if _may_follow(a, b) and observe(a) is not observe(b):
            seen.add((observe(a), observe(b)))
            assert observe(b) in TRANSITIONS[observe(a)], f"{a} -> {b}"
    table = {(x, y) for x, nexts in TRANSITIONS.items() for y in nexts}
    assert seen == table, f"steps the table allows but no facts lead to: {table - seen}"


@pytest.mark.parametrize(
    ("true", "state"),
    [
        ((), S.STARTING),
        (("ready",), S.RUNNING),
        (("ready", "broken"), S.FAILED),
        (("exited", "traceback", "finished"), S.FAILED),  # its traceback wins over everything
        (("ready", "exited", "hung"), S.HUNG),
        (("ready", "exited", "finished"), S.FINISHED),
        (("exited",), S.DIED_EARLY),
        (("ready", "exited"), S.DIED),
        (("ready", "exited", "stopped"), S.UNFINISHED),
        (("ready", "exited", "hung", "stopped"), S.UNFINISHED),  # at close a hang is not finishing
        (("ready", "broken", "exited", "stopped"), S.UNFINISHED),  # nor is a BROKEN word alone
        (("stopped",), S.DIED_EARLY),  # stopped before it was ready, however it ended
    ],
)
def test_precedence(true, state):
    facts = WorkerFacts(*(name in true for name in WorkerFacts._fields))
    assert observe(facts) is state


def test_ended_states_take_no_records_and_unfinished_is_final():
    assert set(S) - {S.STARTING, S.RUNNING} == ENDED
    assert TRANSITIONS[S.UNFINISHED] == frozenset() and S.STARTING not in set().union(*TRANSITIONS.values())


def test_restart_policies():
    assert RestartPolicy.hand_over("cfg") == RestartPolicy(Restart.HAND_OVER, "cfg")
    assert RestartPolicy.fresh_per_clip("cfg").how is Restart.FRESH_PER_CLIP
    assert RestartPolicy.never() == RestartPolicy(Restart.NEVER, None)
    with pytest.raises(TypeError, match="takes a config exactly when it restarts workers"):
        RestartPolicy(Restart.HAND_OVER)
    with pytest.raises(TypeError, match="takes a config exactly when it restarts workers"):
        RestartPolicy(Restart.NEVER, "cfg")


def test_each_policy_has_its_own_rules():
    """What each restarter answers; ``HandOver``'s row of failures ends when the failed worker committed a batch
    it did not inherit or skipped a poison record, not when it only re-committed what it took over."""
    ring = RingWriter(4096)
    worker_side = RingReader(ring.spec)
    try:
        assert isinstance(RestartPolicy.never().restarter(3), Never)
        assert not RestartPolicy.never().restarter(3).may_hand_over(ring)
        fresh = RestartPolicy.fresh_per_clip("cfg").restarter(2)
        assert isinstance(fresh, FreshPerClip) and not fresh.may_hand_over(ring)
        for _ in range(2):
            assert fresh.may_start_fresh()
            fresh.started_fresh()
        assert not fresh.may_start_fresh() and fresh.count == 2
        rows = RestartPolicy.hand_over("cfg").restarter(2)
        assert isinstance(rows, HandOver) and not rows.may_start_fresh()
        worker_side.set_status(Status.BATCHES_INHERITED, 5)
        worker_side.set_status(Status.BATCHES, 5)  # it re-committed what it took over, no more
        assert rows.may_hand_over(ring) and rows.handed_over() == "restart 1, 1 of 2 in a row"
        assert rows.may_hand_over(ring) and rows.handed_over() == "restart 2, 2 of 2 in a row"
        assert not rows.may_hand_over(ring)  # the row is full
        worker_side.set_status(Status.BATCHES, 6)  # a batch of its own: a new row
        assert rows.may_hand_over(ring) and rows.handed_over() == "restart 3, 1 of 2 in a row"
        worker_side.set_status(Status.BATCHES, 5)
        assert rows.may_hand_over(ring) and rows.handed_over() == "restart 4, 2 of 2 in a row"
        worker_side.set_status(Status.POISONED, 1)  # a poison record skipped: a new row
        assert rows.may_hand_over(ring) and rows.in_a_row == 0
        assert rows.successor_config(ring, "boom") == "cfg"  # no record to blame
    finally:
        worker_side.close()
        ring.close()


def test_the_old_name_of_the_worker_supervisor_still_works_and_says_so():
    with pytest.warns(DeprecationWarning, match="WorkerSupervisor"):
        assert supervisor.Worker is supervisor.WorkerSupervisor
    assert supervisor.worker_main("vector serializer") == "vector-serializer"


def test_a_killed_vector_serializer_is_never_replaced(tmp_path):
    """RestartPolicy.never: the stream stays broken with the death named; the env goes on, records dropped."""
    env = envrec.RecordVectorTrace(gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2), tmp_path)
    env.reset(seed=0)
    os.kill(env.stats()["worker_pid"], signal.SIGKILL)
    actions = np.zeros(2, np.int64)
    assert wait_for(lambda: env.step(actions) and env.stats()["broken"] is not None, 10)
    dropped = env.stats()["records_dropped"]
    env.step(actions)
    stats = env.stats()
    env.close()
    assert stats["restarts"] == 0 and "the vector serializer process died (SIGKILL(-9))" in stats["broken"]
    assert stats["records_dropped"] == dropped + 1
