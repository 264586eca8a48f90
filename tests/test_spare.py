"""Spare workers (envrec.supervision.spare): after a worker starts, one more interpreter waits, imports done, and
the next worker start takes it; it is this process's child like any worker, named envrec-spare while it waits
and envrec-ROLE once taken; it exits with the process (closed or killed); a forked process never takes its
parent's; ENVREC_SPARE_WORKER=0 starts none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import gymnasium as gym
import psutil
import pytest

import envrec
from envrec import TraceReader

from .support.processes import child_env
from .support.waiting import wait_for


def _spares(pid: int | None = None) -> list[psutil.Process]:
    out = []
    for p in psutil.Process(pid).children():
        try:
            if p.name() == "envrec-spare":
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


def test_the_next_worker_is_the_spare_started_after_the_last(tmp_path):
    first = _record(tmp_path, "a")
    spare = _waiting_spare(first.recorder._stream.worker_pid)
    second = _record(tmp_path, "b")
    worker = second.recorder._stream.worker_pid
    assert worker == spare.pid and psutil.Process(worker).ppid() == os.getpid()
    assert wait_for(lambda: psutil.Process(worker).name() == "envrec-serializ", 10.0)  # envrec-serializer, cut to 15
    first.close()
    second.close()
    assert not psutil.pid_exists(worker)  # exited as a worker does, and reaped by this process (its parent)
    assert second.recorder._stream.worker.exitcode == 0 and not second.stats()["broken"]
    assert [len(list(TraceReader(str(tmp_path), prefix=p))) for p in ("a", "b")] == [1, 1]


SCRIPT = """
import os, sys, time
import gymnasium as gym, envrec
rec = envrec.RecordTrace(gym.make("CartPole-v1"), sys.argv[1])
rec.reset(seed=0)
rec.step(0)
rec.close()
time.sleep(0.5)  # the spare started after the worker
print(os.getpid(), flush=True)
if sys.argv[2] == "wait":
    time.sleep(60)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_spare_exits_with_its_process(tmp_path, how):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path), "wait" if how == "sigkill" else "exit"],
                            stdout=subprocess.PIPE, text=True, env=child_env())
    pid = int(proc.stdout.readline())
    spares = _spares(pid) if psutil.pid_exists(pid) else []
    if how == "sigkill":
        assert len(spares) == 1
        os.kill(pid, signal.SIGKILL)
    proc.wait(30)
    assert wait_for(lambda: not any(s.is_running() and s.status() != psutil.STATUS_ZOMBIE for s in spares), 10.0)
    leftover = [p for p in psutil.process_iter(["cmdline"]) if "--spare-fd=" in " ".join(p.info["cmdline"] or [])
                and p.ppid() in (pid, 1)]
    assert not leftover


def test_no_spare_when_turned_off(tmp_path):
    env = {**child_env(), "ENVREC_SPARE_WORKER": "0"}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path), "wait"], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        pid = int(proc.stdout.readline())
        assert _spares(pid) == []
    finally:
        proc.kill()
        proc.wait(30)


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
