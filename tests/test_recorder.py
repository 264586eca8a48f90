"""The recorder and wrapper: lifecycle, bad input, live reading, worker and env-process deaths."""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium import spaces as S

import envrec
from envrec.bench.variants import FrameEnv
from envrec.contract.shm import list_memfds, sweep_orphans
from envrec.record.leftovers import remove_dead_recordings

from .support.envs import SPACES, SpaceEnv
from .support.processes import start_child
from .support.waiting import committed_episodes, wait_for


def test_close_twice_context_manager_and_stats(tmp_path):
    with envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path) as env:
        env.reset(seed=0)
        for _ in range(10):
            env.step(0)
        pid = env.stats()["worker_pid"]
    env.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    stats = env.stats()
    assert stats["steps_committed"] == 10 and stats["records_dropped"] == 0 and stats["broken"] is None
    assert stats["batches"] == 1 and stats["bytes_committed"] > 0
    with pytest.raises(envrec.RecordError, match="closed"):
        env.recorder.add_reset(np.zeros(4, np.float32))


def test_recorder_supplied_by_the_caller_is_not_closed_by_the_wrapper(tmp_path):
    env = gym.make("CartPole-v1")
    with envrec.TraceRecorder(tmp_path, env.observation_space, env.action_space) as rec:
        wrapped = envrec.RecordTrace(env, recorder=rec)
        wrapped.reset(seed=1)
        wrapped.step(1)
        wrapped.close()
        assert not rec.closed
        rec.add_reset(np.zeros(4, np.float32))
    assert rec.closed and len(envrec.TraceReader(tmp_path)) == 2


def test_folder_that_cannot_be_created_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(envrec.ConfigError, match="cannot create the output folder"):
        envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path / "file" / "sub")


@pytest.mark.parametrize("prefix", ["../escape", "a/b", "/abs", "nul\0x", ""])
def test_prefixes_that_could_escape_the_folder_are_refused(tmp_path, prefix):
    with pytest.raises(ValueError, match="not allowed"):
        envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, name_prefix=prefix)


def test_an_existing_recording_is_never_overwritten(tmp_path):
    with envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, name_prefix="run") as env:
        env.reset(seed=0)
    with pytest.raises(envrec.ConfigError, match="exists"):
        envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, name_prefix="run")


def test_unsupported_space_is_refused_at_construction(tmp_path):
    env = SpaceEnv(S.Sequence(S.Discrete(2)))
    with pytest.raises(envrec.ConfigError, match="Sequence"):
        envrec.RecordTrace(env, tmp_path)


def test_ring_too_small_for_one_step_is_refused_at_construction(tmp_path):
    env = SpaceEnv(S.Box(0, 255, (100, 100, 3), np.uint8))
    with pytest.raises(envrec.ConfigError, match="ring_bytes >= "):
        envrec.RecordTrace(env, tmp_path, ring_bytes=16384)


@pytest.mark.parametrize(
    "bad_obs, message",
    [
        (np.zeros((5,), np.float32), r"observation: expected a float32 array of shape \(4,\).*got float32 of shape \(5,\)"),
        (np.zeros((4,), np.float64), r"got float64 of shape \(4,\)"),
        ("text", r"observation: expected a float32 array"),
    ],
)
def test_bad_observation_raises_clearly_and_loses_nothing_recorded(tmp_path, bad_obs, message):
    env = envrec.RecordTrace(SpaceEnv(SPACES["box_f32_nan"], episode_len=3, nan=False), tmp_path)
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)
    env.reset(seed=1)
    with pytest.raises(envrec.RecordError, match=message):
        env.recorder.add_step(0, bad_obs, 0.0, False, False, {})
    env.step(1)  # recording goes on
    env.close()
    eps = list(envrec.TraceReader(tmp_path))
    assert [e.length for e in eps] == [3, 1]


def test_safe_casts_are_accepted_and_unsafe_ones_refused(tmp_path):
    env = SpaceEnv(S.Box(-1e9, 1e9, (3,), np.float64), nan=False)
    with envrec.TraceRecorder(tmp_path, env.observation_space, env.action_space) as rec:
        rec.add_reset(np.array([1, 2, 3], np.int32))  # int32 -> float64 is exact
        with pytest.raises(envrec.RecordError):
            rec.add_step(0, np.array([1, 2, 3], np.complex64), 0.0, False, False)
        with pytest.raises(envrec.RecordError, match="reward"):
            rec.add_step(0, np.zeros(3), "one", False, False)
        with pytest.raises(envrec.RecordError, match="integer"):
            rec.add_step(1.5, np.zeros(3), 0.0, False, False)
    assert envrec.TraceReader(tmp_path)[0].observations.tolist() == [[1.0, 2.0, 3.0]]


def test_discrete_actions_of_every_integer_type_are_recorded_exactly_and_others_refused(tmp_path):
    """A Discrete action is packed with the step's reward and flags: every integer type is taken, anything
    else (or an integer that 64 bits cannot hold) refused before anything of its step is published."""
    import enum

    class Move(enum.IntEnum):
        LEFT = -1

    accepted = [5, True, np.int64(-7), np.int8(3), np.uint16(9), np.array(4), Move.LEFT, 2**63 - 1, -(2**63)]
    refused = [(1.5, "integer"), ("1", "integer"), (np.array([1]), "integer"), (None, "integer"),
               (2**63, "does not fit"), (-(2**63) - 1, "does not fit")]
    space = S.Box(-1, 1, (2,), np.float32)
    with envrec.TraceRecorder(tmp_path, space, S.Discrete(3, start=-1)) as rec:
        rec.add_reset(np.zeros(2, np.float32))
        for i, action in enumerate(accepted):
            rec.add_step(action, np.full(2, i, np.float32), float(i), False, False, {"i": i})
            bad, message = refused[i % len(refused)]
            with pytest.raises(envrec.RecordError, match=rf"action: .*{message}"):
                rec.add_step(bad, np.zeros(2, np.float32), -1.0, True, True)
    ep = envrec.TraceReader(tmp_path)[0]
    assert ep.actions.tolist() == [int(a) for a in accepted]
    assert ep.rewards.tolist() == [float(i) for i in range(len(accepted))]
    assert ep.observations[1:, 0].tolist() == [float(i) for i in range(len(accepted))]
    assert [info["i"] for info in ep.infos[1:]] == list(range(len(accepted)))
    assert not ep.complete  # no refused step's flags reached the ring


def test_step_before_reset_and_text_larger_than_the_ring(tmp_path):
    with envrec.TraceRecorder(tmp_path, S.Text(100_000), S.Discrete(2), ring_bytes=8192) as rec:
        with pytest.raises(envrec.RecordError, match="before any add_reset"):
            rec.add_step(0, "x", 0.0, False, False)
        rec.add_reset("hello")
        with pytest.raises(envrec.RecordTooLargeError, match="ring_bytes"):
            rec.add_step(0, "x" * 20_000, 0.0, False, False)
        rec.add_step(1, "ok", 1.0, True, False)
    ep = envrec.TraceReader(tmp_path)[0]
    assert ep.observations == ["hello", "ok"] and ep.actions.tolist() == [1]


def test_committed_batches_are_readable_while_recording_runs(tmp_path):
    env = envrec.RecordTrace(SpaceEnv(SPACES["box_f32_nan"], episode_len=5, nan=False), tmp_path, batch_bytes=1)
    for ep in range(3):
        env.reset(seed=ep)
        for _ in range(5):
            env.step(0)
    env.reset(seed=3)  # ends episode 2, which commits its batch (batch_bytes=1: each episode in parts of one step)
    assert wait_for(lambda: _whole_episodes(tmp_path) == 3)
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == 3 and reader[2].length == 5
    env.step(0)
    env.close()
    reader.refresh()
    assert len(reader) == 4 and reader[3].length == 1 and not reader[3].complete


@pytest.mark.xdist_group("serial")
def test_worker_killed_with_no_restarts_left_env_goes_on_and_committed_data_survives(tmp_path, caplog):
    env = envrec.RecordTrace(SpaceEnv(SPACES["box_u8_image"], episode_len=10), tmp_path, batch_bytes=1, max_restarts=0)
    for ep in range(3):
        env.reset(seed=ep)
        for _ in range(10):
            env.step(0)
    env.reset(seed=3)
    assert wait_for(lambda: _whole_episodes(tmp_path) == 3)
    pid = env.stats()["worker_pid"]
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="envrec"):
        while env.stats()["broken"] is None and time.monotonic() - t0 < 5:
            env.step(0)  # the env keeps stepping; no exception
    detected = time.monotonic() - t0
    assert env.stats()["broken"] is not None and "SIGKILL(-9)" in env.stats()["broken"]
    assert detected < 1.5
    assert sum("broken" in r.message for r in caplog.records) == 1  # logged once
    for _ in range(20):
        env.step(0)
    t0 = time.monotonic()
    env.close()
    assert time.monotonic() - t0 < 5
    assert env.stats()["records_dropped"] > 0
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == 3 and all(e.length == 10 and e.complete for e in reader)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


@pytest.mark.xdist_group("serial")
def test_a_killed_serializer_is_replaced_and_nothing_is_lost(tmp_path, caplog):
    env = envrec.RecordTrace(SpaceEnv(SPACES["box_u8_image"], episode_len=10), tmp_path, batch_bytes=1)
    for ep in range(3):
        env.reset(seed=ep)
        for _ in range(10):
            env.step(0)
    env.reset(seed=3)  # commits episode 2
    assert wait_for(lambda: _whole_episodes(tmp_path) == 3)
    first_pid = env.stats()["worker_pid"]
    for _ in range(4):
        env.step(0)
    os.kill(first_pid, signal.SIGKILL)  # in the middle of episode 3
    t0 = time.monotonic()
    for _ in range(6):
        env.step(0)  # the env goes on: these wait in the ring for the successor
    assert wait_for(lambda: env.recorder._stream.check() or env.stats()["restarts"] == 1, 5)
    assert time.monotonic() - t0 < 1.5
    for ep in range(4, 7):
        env.reset(seed=ep)
        for _ in range(10):
            env.step(0)
    env.close()
    final = env.stats()
    assert final["worker_pid"] != first_pid and final["broken"] is None
    reader = envrec.TraceReader(tmp_path)
    assert [e.seed for e in reader] == [0, 1, 2, 3, 4, 5, 6]  # episode 3 too: nothing lost
    assert all(e.length == 10 and e.complete for e in reader)
    assert final["steps_committed"] == 70 and final["records_lost"] == 0 and final["records_dropped"] == 0
    manifest = json.load(open(env.recorder.manifest_path))
    assert manifest["complete"] and manifest["closed_cleanly"] and manifest["counters"]["episodes"] == 7
    assert any("takes over its ring" in r.message for r in caplog.records)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp") or "checkpoint" in n]


@pytest.mark.xdist_group("serial")
def test_strict_mode_raises_with_the_cause(tmp_path):
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, strict=True, max_restarts=0)
    env.reset(seed=0)
    os.kill(env.stats()["worker_pid"], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(envrec.WorkerError, match="SIGKILL"):
        while time.monotonic() - t0 < 5:
            env.step(0)
            if env.unwrapped.steps_beyond_terminated is not None:
                env.reset()
    assert time.monotonic() - t0 < 1.5
    env.close()


def _whole_episodes(folder) -> int:
    """Episodes committed whole so far (a long one is committed in parts while it runs)."""
    return sum(e.complete for e in committed_episodes(folder))


def _run_child(tmp_path, steps, mode):
    return start_child("child_recorder.py", str(tmp_path), str(steps), mode)


def _assert_gone(worker_pid, child_pid, timeout_s=5.0):
    assert wait_for(lambda: not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE, timeout_s)
    wait_for(lambda: not [s for s in list_memfds() if s.startswith(f"envrec_{child_pid}_")], 3.0)
    sweep_orphans()  # what the next start of a recorder does
    assert not [s for s in list_memfds() if s.startswith(f"envrec_{child_pid}_")]


@pytest.mark.xdist_group("serial")
def test_env_process_killed_workers_drain_the_ring_and_finalize(tmp_path):
    child = _run_child(tmp_path, 500, "kill-self")
    worker_pid = int(child.stdout.readline())
    assert child.wait(30) == -signal.SIGKILL
    t0 = time.monotonic()
    _assert_gone(worker_pid, child.pid)
    assert time.monotonic() - t0 < 5
    child.stdout.close()
    manifest = json.load(open(next(tmp_path.glob("*.manifest.json"))))
    assert manifest["complete"] and not manifest["closed_cleanly"]
    assert not list(tmp_path.glob(".*"))  # no temporary or checkpoint file: no successor can come
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == 10 and sum(e.length for e in reader) == 500  # every step handed over survived
    assert [e.observations[-1, 0, 0, 0] for e in reader] == [(50 * k + 49) % 256 for k in range(10)]


def test_env_process_and_worker_killed_together_leave_no_memfd(tmp_path):
    """A batch scheduler, the OOM killer or Ray killing the whole tree: nothing can clean up, nothing is left."""
    child = _run_child(tmp_path, 120, "wait")
    worker_pid = int(child.stdout.readline())
    assert child.stdout.readline().strip() == "ready"
    assert [s for s in list_memfds() if s.startswith(f"envrec_{child.pid}_")]
    assert wait_for(lambda: _whole_episodes(tmp_path) == 2, 5)  # two whole episodes committed
    os.kill(worker_pid, signal.SIGKILL)
    child.kill()
    child.wait(10)
    child.stdout.close()
    assert wait_for(lambda: not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE, 5)
    # no sweep: the kernel freed the memfds with their last holder
    assert wait_for(lambda: not [s for s in list_memfds() if s.startswith(f"envrec_{child.pid}_")], 2.0)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"envrec_{child.pid}_")]
    reader = envrec.TraceReader(tmp_path)
    lengths = [e.length for e in reader]  # the batches committed before the kill (parts of the third, perhaps)
    assert lengths[:2] == [50, 50] and sum(lengths) < 120  # the rest died in the ring
    left = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert left and all(n.startswith(".") and n.endswith(f".{worker_pid}.tmp") for n in left)  # hidden, the dead worker's
    # the next trace recorder that starts in this folder removes them (its writer and env process are gone)
    (prefix,) = remove_dead_recordings(str(tmp_path), keep="")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{prefix}.")]


def test_env_process_killed_while_idle(tmp_path):
    child = _run_child(tmp_path, 120, "wait")
    worker_pid = int(child.stdout.readline())
    assert child.stdout.readline().strip() == "ready"
    child.kill()
    child.wait(10)
    child.stdout.close()
    _assert_gone(worker_pid, child.pid)
    reader = envrec.TraceReader(tmp_path)
    assert [e.length for e in reader] == [50, 50, 20]
    assert not reader[2].complete and reader[2].ended_by == "crash"


def test_keyboard_interrupt_in_the_users_loop_finalizes_everything(tmp_path):
    child = _run_child(tmp_path, 75, "interrupt")
    worker_pid = int(child.stdout.readline())
    out, _ = child.communicate(timeout=30)
    assert out.strip() == "interrupted" and child.returncode == 0
    _assert_gone(worker_pid, child.pid)
    manifest = json.load(open(next(tmp_path.glob("*.manifest.json"))))
    assert manifest["complete"] and manifest["closed_cleanly"]
    assert [e.length for e in envrec.TraceReader(tmp_path)] == [50, 25]


@pytest.mark.slow
def test_memory_is_flat_in_episode_length(tmp_path):
    """A long episode of Atari-sized frames must not grow any process (buffering it would: 100 KB a step)."""
    env = envrec.RecordTrace(FrameEnv(210, 160, length=None), tmp_path)
    env.reset()
    procs = [psutil.Process(), psutil.Process(env.stats()["worker_pid"])]
    rss = []
    for checkpoint in (1500, 3000, 6000):
        while env.recorder._step < checkpoint:
            env.step(0)
        wait_for(lambda n=checkpoint: env.stats()["steps_written"] >= n, 30)
        rss.append([p.memory_info().rss for p in procs])
    env.close()
    growth = [(rss[2][i] - rss[0][i]) / 2**20 for i in range(2)]
    assert max(growth) < 24, f"RSS grew by {growth} MiB over 4500 steps (buffering would be ~430 MiB)"
    ep = envrec.TraceReader(tmp_path)[0]
    assert ep.length == 6000 and ep.observations.shape == (6001, 210, 160, 3)
    assert ep.observations[6000, 0, 0, 0] == 6000 % 256


def test_a_step_after_the_episode_ended_without_reset_is_recorded_and_said_once(tmp_path, caplog):
    import gymnasium as gym

    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path)
    env.reset(seed=0)
    done = False
    while not done:
        *_, terminated, truncated, _ = env.step(0)
        done = terminated or truncated
    env.unwrapped.steps_beyond_terminated = None  # CartPole's own warning aside: it steps on
    env.step(0)
    env.step(0)
    assert env.stats()["steps_after_end"] == 2
    assert caplog.text.count("without reset()") == 1
    env.close()
    (episode,) = list(envrec.TraceReader(tmp_path))
    assert episode.length == len(episode.actions) and episode.actions.shape[0] >= 3  # kept in the ended episode
