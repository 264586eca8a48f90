"""Faults injected into the serializer through the real path (a FaultSpec in its config).

Each case asserts what survived, what was reported, and (through the
``no_leaks`` fixture) that no process, segment, semaphore or temp file leaked.
"""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
from gymnasium import spaces

import envrec
from envrec.contract.faults import FaultSpec
from envrec.contract.records import Status

from .support.counters import assert_counters_add_up
from .support.episodes import feed as run
from .support.scripts import load_script
from .support.waiting import wait_for

OBS = spaces.Box(0, 255, (16, 16, 3), np.uint8)
ACT = spaces.Discrete(2)


@pytest.mark.parametrize(
    "policy",
    [{"backpressure": "block"}, {"backpressure": "block", "block_timeout_s": 0.005}, {"backpressure": "drop"}],
    ids=["block", "block-timeout", "drop"],
)
def test_conservation_under_a_throttled_consumer(tmp_path, policy):
    """Every record is accounted for: attempted = handled + dropped; committed + orphaned = steps handled."""
    rec = envrec.TraceRecorder(
        tmp_path, OBS, ACT, ring_bytes=8192, batch_bytes=1, faults=FaultSpec(sleep_per_record_s=0.002), **policy
    )
    run(rec, 20)
    rec.close()
    s = rec.stats()
    attempted = 20 * 11
    handled = rec._stream.status(Status.RECORDS)
    assert s["records_sent"] + s["records_dropped"] == attempted
    assert handled == s["records_sent"]  # nothing in flight after close, nothing lost
    reader = envrec.TraceReader(tmp_path)
    manifest = json.load(open(rec.manifest_path))
    orphans = manifest["counters"]["orphan_steps"]
    assert s["steps_committed"] == sum(e.length for e in reader)
    assert s["steps_committed"] + orphans == s["steps_written"] + orphans == handled - len(reader)
    if policy.get("block_timeout_s") is None and policy["backpressure"] == "block":
        assert s["records_dropped"] == 0 and s["blocked_s"] > 0.05 and s["steps_committed"] == 200
    else:
        assert s["records_dropped"] > 0


POINTS = ("record", "commit:bin-written", "commit:bin", "commit:json", "commit:manifest", "commit:done",
          "part:cut", "part:next")  # batch_bytes=1: each step of an episode is a part, committed on its own
# exit (os._exit(3)) and kill (SIGKILL) end the serializer alike, no finally or flush run: its successor's recovery
# takes one path and only the status reported differs, so each point dies one way, the two ways in turn.
DEATHS = ("exit", "kill")
CASES = [(point, how) for i, point in enumerate(POINTS) for how in ("raise", DEATHS[i % 2])] + [
    ("record", "hang"), ("commit:bin", "hang"), ("commit:manifest", "hang")]
QUICK = {("record", "exit"), ("commit:bin-written", "kill")}  # the development tier's deaths; the hangs: below too
REPORTED = {"raise": "InjectedFault", "exit": "exit code 3", "kill": "SIGKILL(-9)", "hang": "made no progress"}


@pytest.mark.parametrize("point, how", [
    pytest.param(p, h, id=f"{p}-{h}", marks=() if h == "raise" or (p, h) in QUICK else pytest.mark.slow) for p, h in CASES])
def test_serializer_fault_battery(tmp_path, point, how, caplog):
    """A serializer that raises, exits or is killed at any step of a commit: its successor loses nothing."""
    after = 40 if point == "record" else 3  # a few batches commit first
    rec = envrec.TraceRecorder(
        tmp_path, OBS, ACT, batch_bytes=1, faults=FaultSpec(at=point, after=after, how=how), hang_timeout_s=1.0
    )
    first_pid = rec.stats()["worker_pid"]
    run(rec, 6)
    assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == 1, 10)
    run(rec, 3, start=6)  # the env went on
    rec.close()
    s = rec.stats()
    assert s["restarts"] == 1 and s["broken"] is None and s["worker_pid"] != first_pid
    reported = [r.message for r in caplog.records if "takes over its ring" in r.message]
    assert len(reported) == 1 and REPORTED[how] in reported[0]
    reader = envrec.TraceReader(tmp_path)
    assert [e.seed for e in reader] == list(range(9))  # every episode, once, in order
    for e in reader:
        assert e.length == 10 and e.complete
        assert e.observations[1:, 0, 0, 0].tolist() == list(range(10))
    for m in reader.manifests:
        assert m["complete"] and m["closed_cleanly"]
        for b in m["batches"]:
            assert reader.check_batch(b) == []
    assert s["steps_committed"] == 90 and s["records_lost"] == 0 and s["records_dropped"] == 0
    assert_counters_add_up(s, 9 * 11, sum(e.length + 1 for e in reader))
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp") or "checkpoint" in n]


def test_kills_spaced_by_commits_never_use_up_the_restarts(tmp_path, caplog):
    """``max_restarts`` counts failures in a row: a successor that commits steps it did not inherit ends the
    row, so more SIGKILLs than ``max_restarts``, each after the successor committed new steps, lose nothing."""
    kills, episodes = 3, 0
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, batch_bytes=1, max_restarts=1)
    for k in range(kills):
        run(rec, 2, start=episodes)
        episodes += 2
        # more than every step fed before (at most what it inherited): it committed steps of its own
        beyond = 10 * (episodes - 1)
        assert wait_for(lambda: rec.stats()["steps_committed"] >= beyond, 10), rec.stats()  # noqa: B023
        os.kill(rec.stats()["worker_pid"], signal.SIGKILL)
        assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == k + 1, 10)  # noqa: B023
        assert rec.broken is None
    run(rec, 2, start=episodes)
    episodes += 2
    rec.close()
    s = rec.stats()
    assert s["restarts"] == kills > rec._stream.max_restarts and s["broken"] is None
    in_a_row = [r.message for r in caplog.records if "takes over its ring" in r.message]
    assert len(in_a_row) == kills and all("1 of 1 in a row" in m for m in in_a_row), in_a_row
    reader = envrec.TraceReader(tmp_path)
    assert [e.seed for e in reader] == list(range(episodes))  # every episode, once, in order
    for e in reader:
        assert e.length == 10 and e.complete and e.observations[1:, 0, 0, 0].tolist() == list(range(10))
    assert s["steps_committed"] == 10 * episodes and s["records_lost"] == 0 and s["records_dropped"] == 0
    assert_counters_add_up(s, 11 * episodes, sum(e.length + 1 for e in reader))


def test_a_broken_stream_counts_its_open_batch_as_lost(tmp_path):
    """The serializer dies for good with records taken into its open batch (released from the ring by a
    checkpoint, for a successor that does not come): they are counted in ``records_lost``, so every record
    made is committed, lost or dropped."""
    rec = envrec.TraceRecorder(
        tmp_path, OBS, ACT, batch_bytes=400_000, commit_interval=None, max_restarts=0,
        faults=FaultSpec(at="record", after=900, how="kill"),
    )  # a batch every ~47 episodes (517 records), a checkpoint every 256 records
    episodes = 120
    run(rec, episodes)
    assert wait_for(lambda: rec._stream.check() or rec.broken is not None, 10)
    rec.close()
    s = rec.stats()
    assert s["broken"] and "SIGKILL" in s["broken"] and s["restarts"] == 0
    committed = sum(e.length + 1 for e in envrec.TraceReader(tmp_path))  # each episode's reset and steps
    assert 0 < committed < 900 and s["records_lost"] > 0
    assert_counters_add_up(s, episodes * 11, committed)



def test_soak_short_serializer_killed_at_random_times(tmp_path):
    """The short version of scripts/soak/soak_serializer.py: every step produced is read back once, in order, long
    episodes committed in parts (kills land inside them) read back whole."""
    r = load_script("soak/soak_serializer.py").soak(str(tmp_path / "soak"), kills=6, seed=1, max_gap_s=0.3)
    assert r["kills"] == 6 and r["restarts"] >= 6
    assert r["steps_read"] == r["steps_produced"] > 0
    assert r["missing"] == 0 and r["duplicated"] == 0 and r["in_order"]
    assert r["episodes_read"] == r["episodes_produced"] and r["episode_lengths_match"]
    assert r["episodes_in_parts"] >= 1  # long episodes among the others, committed in parts and stitched
    assert r["problems"] == [] and r["broken"] is None and r["complete"]
    assert r["records_lost"] == 0 and r["records_dropped"] == 0


@pytest.mark.xdist_group("serial")
def test_a_hung_serializer_is_killed_and_replaced_without_loss(tmp_path, caplog):
    rec = envrec.TraceRecorder(
        tmp_path, OBS, ACT, batch_bytes=1, faults=FaultSpec(at="commit:json", after=2, how="hang"), hang_timeout_s=1.0
    )
    run(rec, 6)
    t0 = time.monotonic()
    assert wait_for(lambda: (run(rec, 0) or rec._stream.check()) or rec.stats()["restarts"] == 1, 10)
    assert time.monotonic() - t0 < 4
    run(rec, 3, start=6)
    rec.close()
    assert rec.stats()["broken"] is None
    assert any("made no progress for 1 s" in r.message for r in caplog.records)
    reader = envrec.TraceReader(tmp_path)
    assert [e.seed for e in reader] == list(range(9)) and all(e.length == 10 for e in reader)
