"""Recorders start wherever RL code runs: no ``__main__`` guard, notebooks, vector-env sub-processes,
pool workers, threads; a worker that cannot start leaves its reason in the output folder."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

import envrec
from envrec.contract.shm import list_memfds

from .support.episodes import run_episodes
from .support.start_anywhere import (
    UNGUARDED_SCRIPT,
    RecordingThunk,
    actions_for,
    assert_trace_equals,
    record_in_pool_worker,
    reference_episodes,
)
from .support.video import decode, meta
from .support.waiting import wait_for

CHILD_TIMEOUT_S = 120


def _check_script_recording(out, stdout: str) -> None:
    """One run of the script's top level; every episode read back; every clip decodes with its frames."""
    lengths = json.loads(stdout.strip().splitlines()[-1])
    assert len((out / "runs.txt").read_text().split()) == 1  # no worker ran the script again
    reader = envrec.TraceReader(out / "trace")
    assert [ep.length for ep in reader] == lengths
    assert all(ep.complete for ep in reader)
    for i, n in enumerate(lengths):
        m = meta(out / "video", f"rl-video-episode-{i}")
        assert not m["broken"] and m["frames_written"] == n + 1
        assert len(decode(out / "video" / f"rl-video-episode-{i}.mp4", 600, 400)) == n + 1


def _run(argv, cwd, out, stdin=None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("how", ["script", *(pytest.param(h, marks=pytest.mark.slow) for h in ("module", "command", "stdin"))])
def test_script_without_main_guard_records_traces_and_video(tmp_path, how):
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "train.py").write_text(UNGUARDED_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    argv = {
        "script": [sys.executable, str(code / "pkg" / "train.py"), str(out)],
        "module": [sys.executable, "-m", "pkg.train", str(out)],
        "command": [sys.executable, "-c", UNGUARDED_SCRIPT, str(out)],
        # as a notebook runs code: an interactive __main__ with no __file__, the code fed through stdin
        "stdin": [sys.executable, "-", str(out)],
    }[how]
    done = _run(argv, code, out, stdin=UNGUARDED_SCRIPT if how == "stdin" else None)
    _check_script_recording(out, done.stdout)


def test_code_executed_in_an_interactive_main_without_file(tmp_path):
    """``exec`` of the code in a fresh interpreter's ``__main__`` (no ``__file__``), as Jupyter does."""
    out = tmp_path / "out"
    out.mkdir()
    runner = (
        "import sys, __main__\n"
        "assert not hasattr(__main__, '__file__')\n"
        "sys.argv = ['notebook', sys.argv[1]]\n"
        "exec(compile(sys.stdin.read(), '<cell>', 'exec'), __main__.__dict__)\n"
    )
    done = _run([sys.executable, "-c", runner, str(out)], tmp_path, out, stdin=UNGUARDED_SCRIPT)
    _check_script_recording(out, done.stdout)


@pytest.mark.parametrize("context", [None, pytest.param("spawn", marks=pytest.mark.slow)])
def test_async_vector_env_thunks_record_each_sub_env(tmp_path, context):
    """CleanRL's/SB3's pattern: wrappers applied inside AsyncVectorEnv's (daemonic) sub-processes."""
    n, steps = 2, 150
    thunks = [RecordingThunk(str(tmp_path), i) for i in range(n)]
    env = gym.vector.AsyncVectorEnv(thunks, context=context)
    actions = actions_for(n, steps)
    try:
        env.reset(seed=[10, 20])
        for a in actions:
            env.step(a)
    finally:
        env.close()
    for i, seed in enumerate([10, 20]):
        assert len(list((tmp_path / f"env{i}").glob("*.manifest.json"))) == 1
        reference = reference_episodes(seed, actions[:, i])
        assert_trace_equals(tmp_path / f"env{i}", reference)
    clips = sorted((tmp_path / "video0").glob("*.meta.json"))
    reader = envrec.TraceReader(tmp_path / "env0")
    assert len(clips) == len(reader)
    for ep in reader:
        m = meta(tmp_path / "video0", f"rl-video-episode-{ep.episode_id}")
        expected = ep.length + 1  # the reset frame and one per step
        assert not m["broken"] and m["frames_written"] == expected
        assert len(decode(tmp_path / "video0" / f"rl-video-episode-{ep.episode_id}.mp4", 600, 400)) == expected
    assert not (tmp_path / "video1").exists()


@pytest.mark.variants
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_multiprocessing_pool_worker_records(tmp_path, context):
    with mp.get_context(context).Pool(1) as pool:
        daemonic, lengths = pool.apply(record_in_pool_worker, (str(tmp_path),))
    assert daemonic
    reader = envrec.TraceReader(tmp_path)
    assert [ep.length for ep in reader] == lengths
    assert reader[0].seed == 3 and all(ep.complete for ep in reader)


def test_recorder_started_in_a_thread_that_then_exits(tmp_path):
    """The worker's parent-death signal fires when the creating thread exits: the worker must go on."""
    made = {}
    t = threading.Thread(target=lambda: made.update(env=envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path)))
    t.start()
    t.join(30)
    env = made["env"]
    pid = env.stats()["worker_pid"]
    time.sleep(0.3)  # the signal has been delivered by now
    env.reset(seed=5)
    env.action_space.seed(5)
    lengths, n = [], 0
    while len(lengths) < 3:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        n += 1
        if terminated or truncated:
            lengths.append(n)
            n = 0
            env.reset()
    env.close()
    stats = env.stats()
    assert stats["worker_pid"] == pid and stats["restarts"] == 0 and stats["broken"] is None
    assert [ep.length for ep in envrec.TraceReader(tmp_path)][:3] == lengths


def test_recorder_used_only_from_a_thread(tmp_path):
    result = {}

    def job():
        with envrec.TraceRecorder(tmp_path, gym.spaces.Box(0, 1, (3,), np.float32), gym.spaces.Discrete(2)) as rec:
            rec.add_reset(np.zeros(3, np.float32))
            for t in range(50):
                rec.add_step(t % 2, np.full(3, t / 50, np.float32), 1.0, t == 49, False)
        result["stats"] = rec.stats()

    t = threading.Thread(target=job)
    t.start()
    t.join(60)
    assert result["stats"]["steps_committed"] == 50
    ep = envrec.TraceReader(tmp_path)[0]
    assert ep.length == 50 and np.array_equal(ep.observations[-1], np.full(3, 49 / 50, np.float32))


# -- workers that cannot start -------------------------------------------------------------------------


@pytest.fixture
def broken_python(tmp_path, monkeypatch):
    """An interpreter that cannot run envrec: says why on stderr and exits 7."""
    path = tmp_path / "python-without-envrec"
    path.write_text("#!/bin/sh\necho 'simulated: this interpreter cannot import envrec' >&2\nexit 7\n")
    path.chmod(0o755)
    monkeypatch.setenv("ENVREC_PYTHON", str(path))
    return path


def test_serializer_that_cannot_start_leaves_its_reason_in_the_folder(tmp_path, broken_python):
    out = tmp_path / "out"
    env = envrec.RecordTrace(gym.make("CartPole-v1"), out)
    run_episodes(env, 2, reseed=False, action_seed=0)  # the env never sees an exception
    env.close()
    stats = env.stats()
    assert "exit code 7" in stats["broken"] and "simulated: this interpreter cannot import envrec" in stats["broken"]
    assert stats["restarts"] == 3
    manifest = json.loads(next(out.glob("*.manifest.json")).read_text())
    assert manifest["batches"] == [] and not manifest["complete"]
    assert "before it started" in manifest["error"] and "simulated" in manifest["error"]
    with pytest.raises(envrec.TraceError, match="simulated: this interpreter cannot import envrec"):
        envrec.TraceReader(out)
    done = subprocess.run(
        [sys.executable, "-m", "envrec", "inspect", str(out)], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "ENVREC_PYTHON"},
    )
    assert done.returncode != 0 and "simulated: this interpreter cannot import envrec" in done.stderr


def test_interpreter_that_cannot_be_executed_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVREC_PYTHON", str(tmp_path / "no-such-python"))
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, max_restarts=0)
    run_episodes(env, 1, reseed=False, action_seed=0)
    env.close()
    with pytest.raises(envrec.TraceError, match=r"cannot start the serializer with .*no-such-python.*No such file"):
        envrec.TraceReader(tmp_path)


def test_strict_mode_raises_the_start_failure(tmp_path, broken_python):
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, strict=True, max_restarts=0)
    env.reset(seed=0)
    deadline = time.monotonic() + 10
    with pytest.raises(envrec.WorkerError, match="simulated: this interpreter cannot import envrec"):
        while time.monotonic() < deadline:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
    env.close()
    assert "simulated" in json.loads(next(tmp_path.glob("*.manifest.json")).read_text())["error"]


def test_encoder_that_cannot_start_marks_its_clips(tmp_path, broken_python):
    out = tmp_path / "out"
    env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), str(out), episode_trigger=lambda e: True)
    run_episodes(env, 2, reseed=False, action_seed=0)
    env.close()
    m = meta(out, "rl-video-episode-0")
    assert m["broken"] and "exit code 7" in m["error"] and "simulated: this interpreter cannot import envrec" in m["error"]
    assert m["path"] is None and not list(out.glob("*.mp4"))


def test_serializer_dying_at_start_is_replaced_and_loses_nothing(tmp_path):
    fault = envrec.contract.faults.FaultSpec(at="start", how="exit")
    rec = envrec.TraceRecorder(tmp_path, gym.spaces.Discrete(4), gym.spaces.Discrete(2), faults=fault)
    for episode in range(3):
        rec.add_reset(episode)
        for t in range(20):
            rec.add_step(t % 2, (t + episode) % 4, float(t), t == 19, False)
    rec.close()
    stats = rec.stats()
    assert stats["restarts"] == 1 and stats["broken"] is None and stats["records_lost"] == 0
    reader = envrec.TraceReader(tmp_path)
    assert [ep.length for ep in reader] == [20, 20, 20]
    assert reader[2].observations.tolist() == [2] + [(t + 2) % 4 for t in range(20)]


# -- a daemonic host killed ------------------------------------------------------------------------------


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _has_ffmpeg(pid: int) -> bool:
    for p in _descendants(pid):
        try:
            if "ffmpeg" in p.name():
                return True
        except psutil.Error:
            continue
    return False


def _command(proc: psutil.Process) -> str:
    """The process's command line and name (a worker that was a spare names its role only in its name)."""
    try:
        return " ".join(proc.cmdline()[:5]) + f" [{proc.name()}]"
    except psutil.Error:  # a clip's ffmpeg that exited as we looked
        return ""


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
@pytest.mark.xdist_group("serial")
def test_sigkill_of_an_async_vector_env_sub_process_leaves_nothing_running(tmp_path):
    n, steps = 2, 120
    env = gym.vector.AsyncVectorEnv([RecordingThunk(str(tmp_path), i) for i in range(n)])
    actions = actions_for(n, steps, seed=1)
    try:
        env.reset(seed=[1, 2])
        for a in actions:
            env.step(a)
        host = env.processes[0]
        assert host.daemon
        # the encoder starts the current clip's ffmpeg when it reaches the clip's first frame
        assert wait_for(lambda: _has_ffmpeg(host.pid), 15.0)
        left = _descendants(host.pid)
        names = sorted(_command(p) for p in left)
        assert any("envrec-serializ" in c for c in names) and any("envrec-encoder" in c for c in names), names
        others = _descendants(env.processes[1].pid)  # the other sub-env's workers
        segments_before = set(list_memfds())
        os.kill(host.pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert wait_for(lambda: all(_gone(p) for p in left), 5.0), [p for p in left if not _gone(p)]
        assert time.monotonic() - t0 < 5.0
        # the killed host's rings are freed once its workers, their last holders, are gone
        assert wait_for(lambda: len(segments_before - set(list_memfds())) >= 2, 3.0)
    finally:
        env.close(terminate=True)
    # everything the host had sent was drained and finalized by its workers, bit for bit
    assert_trace_equals(tmp_path / "env0", reference_episodes(1, actions[:, 0]))
    # one recording per sub-env: the env AsyncVectorEnv builds in this process to read the spaces left none
    manifests = list((tmp_path / "env0").glob("*.manifest.json"))
    assert len(manifests) == 1 and manifests[0].name.endswith(f".{host.pid}.manifest.json")
    manifest = json.loads(manifests[0].read_text())
    assert manifest["complete"] and not manifest["closed_cleanly"]
    for path in sorted((tmp_path / "video0").glob("*.meta.json")):
        m = json.loads(path.read_text())
        assert m["frames_written"] > 0
        assert len(decode(tmp_path / "video0" / m["path"], 600, 400)) == m["frames_written"]
    # the other sub-env was terminated by close(): its workers finalize what it sent, then exit
    assert wait_for(lambda: all(_gone(p) for p in others), 30.0), [p for p in others if not _gone(p)]
    assert_trace_equals(tmp_path / "env1", reference_episodes(2, actions[:, 1]))


@pytest.mark.slow
def test_start_method_is_deprecated_and_ignored(tmp_path):
    with pytest.warns(DeprecationWarning, match="start_method is deprecated and ignored"):
        env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path / "t", start_method="fork")
    with pytest.warns(DeprecationWarning, match="start_method"):
        rec = envrec.TraceRecorder(tmp_path / "r", gym.spaces.Discrete(2), gym.spaces.Discrete(2), start_method="spawn")
    with pytest.warns(DeprecationWarning, match="start_method"):
        video = envrec.RecordVideo(
            gym.make("CartPole-v1", render_mode="rgb_array"), str(tmp_path / "v"), start_method="forkserver"
        )
    run_episodes(env, 1, reseed=False, action_seed=0)
    env.close()
    rec.close()
    video.close()
    assert len(envrec.TraceReader(tmp_path / "t")) == 1  # recorded as usual
