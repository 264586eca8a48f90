"""Spare workers (envrec.supervision.spare): after a worker is closed, one more interpreter waits, imports done
(two at most), and the next worker start takes it; it is this process's child like any worker, named envrec-spare while it waits
and envrec-ROLE once taken; it exits with the process (closed or killed); a forked process never takes its
parent's; ENVREC_SPARE_WORKER=0 starts none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import psutil
import pytest

import envrec
from envrec import TraceReader
from envrec.supervision.spare import MAX_SPARES, spare_workers

from .support.processes import child_env
from .support.waiting import wait_for


def _spares(pid: int | None = None) -> list[psutil.Process]:
    """The spares waiting (named so once their imports are done)."""
    out = []
    for p in psutil.Process(pid).children():
        try:
            if p.name() == "envrec-spare" and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _waiting_spare(taken: int) -> psutil.Process:
    """The spare started after the worker ``taken`` (which may have been a spare itself, named so a moment longer)."""
    found: list[psutil.Process] = []
    assert wait_for(lambda: bool(found.extend(s for s in _spares() if s.pid != taken) or found), 10.0)
    return found[0]


def _record(folder, prefix: str) -> envrec.RecordTrace:
    rec = envrec.RecordTrace(gym.make("CartPole-v1"), folder, name_prefix=prefix)
    rec.reset(seed=0)
    for _ in range(5):
        rec.step(0)
    return rec


def test_no_spare_while_the_recorders_run_and_the_next_worker_takes_one_after(tmp_path):
    left = _spares()
    with spare_workers().paused():
        pass  # the spares earlier tests of this process left exit
    assert wait_for(lambda: not _spares(), 10.0), left
    first = _record(tmp_path, "a")
    taken = first.recorder._stream.worker_pid
    assert not [s for s in _spares() if s.pid != taken]  # a job that keeps its recorders never gets a spare
    first.close()
    spare = _waiting_spare(taken)
    second = _record(tmp_path, "b")
    worker = second.recorder._stream.worker_pid
    assert worker == spare.pid and psutil.Process(worker).ppid() == os.getpid()
    assert wait_for(lambda: psutil.Process(worker).name() == "envrec-serializ", 10.0)  # envrec-serializer, cut to 15
    second.close()
    assert not psutil.pid_exists(worker)  # exited as a worker does, and reaped by this process (its parent)
    assert second.recorder._stream.worker.exitcode == 0 and not second.stats()["broken"]
    assert [len(list(TraceReader(str(tmp_path), prefix=p))) for p in ("a", "b")] == [1, 1]
    assert wait_for(lambda: len(_spares()) == 1, 10.0)  # one worker closed: one spare
    both = [_record(tmp_path, name) for name in "cd"]  # as a trace and a video recorder: two workers at once
    for rec in both:
        rec.close()
    assert wait_for(lambda: len(_spares()) == MAX_SPARES, 10.0)
    for name in "ef":
        _record(tmp_path, name).close()  # each takes one and its close starts one: never more than MAX_SPARES
    assert wait_for(lambda: len(_spares()) == MAX_SPARES, 10.0)
    time.sleep(0.5)
    assert len(_spares()) == MAX_SPARES


SCRIPT = """
import os, sys, time
import gymnasium as gym, envrec
from envrec.supervision.spare import spare_workers
rec = envrec.RecordTrace(gym.make("CartPole-v1"), sys.argv[1])
rec.reset(seed=0)
rec.step(0)
rec.close()
while not spare_workers()._spares.get("envrec.workers"):  # a spare is started after a worker is closed
    time.sleep(0.05)
print(os.getpid(), flush=True)
sys.stdin.readline()  # then exits
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_spare_exits_with_its_process(tmp_path, how):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        pid = int(proc.stdout.readline())
        assert wait_for(lambda: len(_spares(pid)) == 1, 10.0)
        spares = _spares(pid)
        if how == "sigkill":
            os.kill(pid, signal.SIGKILL)
        else:
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(30)
    finally:
        proc.kill()
    assert wait_for(lambda: not any(_running(s) for s in spares), 10.0)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_no_spare_when_turned_off(tmp_path):
    env = {**child_env(), "ENVREC_SPARE_WORKER": "0"}
    code = """
import sys, time, gymnasium as gym, envrec
from envrec.supervision.spare import spare_workers
rec = envrec.RecordTrace(gym.make("CartPole-v1"), sys.argv[1])
rec.reset(seed=0)
rec.close()
time.sleep(1.0)
sys.exit(len(spare_workers()._spares.get("envrec.workers") or []) + spare_workers()._starting.get("envrec.workers", 0))
"""
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, timeout=60)
    assert proc.returncode == 0  # no spare waits, none starts


def test_a_forked_process_starts_its_own_workers(tmp_path):
    parent = _record(tmp_path, "parent")
    parent.close()
    spare = _waiting_spare(parent.recorder._stream.worker_pid)
    child = os.fork()
    if child == 0:  # pragma: no cover  (the child reports by its exit status)
        code = 1
        try:
            rec = _record(tmp_path, "child")
            worker = psutil.Process(rec.recorder._stream.worker_pid)
            code = 0 if worker.ppid() == os.getpid() and worker.pid != spare.pid else 2
            rec.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert spare.is_running() and spare.name() == "envrec-spare"  # still waiting for this process
    assert len(list(TraceReader(str(tmp_path), prefix="child"))) == 1


def test_a_spare_becomes_a_worker_when_the_working_folder_was_removed(tmp_path, monkeypatch):
    """A process whose working folder was removed (a test's temporary folder, a job's scratch) still gets workers."""
    parent = _record(tmp_path / "out", "a")
    parent.close()
    spare = _waiting_spare(parent.recorder._stream.worker_pid)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    rec = _record(tmp_path / "out", "b")
    assert rec.recorder._stream.worker_pid == spare.pid
    rec.close()
    assert not rec.stats()["broken"] and len(list(TraceReader(str(tmp_path / "out"), prefix="b"))) == 1
