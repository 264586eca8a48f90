"""Preemption as schedulers do it: SIGTERM to the whole process group (Slurm's scancel and preemption,
``timeout``, a Jupyter kernel's manager), to the env process alone, or to a worker alone.

Nothing the env process handed over is lost: the workers latch SIGTERM, commit what the ring holds
once their env process is gone, name the signal in the final files and exit within ``DRAIN_BOUND_S``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types

import psutil
import pytest

import envrec

from .support.processes import child_command, start_child
from .support.waiting import wait_for

STEPS = 50
DRAIN_BOUND_S = 10.0  # generous on a busy 2-core machine; scripts/bench/bench_preemption.py measures the real figure

pytestmark = pytest.mark.timeout(90)


def _start(folder, *flags: str, env: dict | None = None) -> tuple[subprocess.Popen, list[int]]:
    proc = start_child("child_preempted.py", str(folder), str(STEPS), *flags, env={**os.environ, **(env or {})},
                       start_new_session=True)
    assert proc.stdout is not None
    pids = json.loads(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "ready"
    return proc, pids


def _gone(pids: list[int]) -> bool:
    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return not any(alive(p) for p in pids)


def _end(proc: subprocess.Popen, workers: list[int]) -> float:
    """Wait for the env process and its workers to exit; seconds the workers took after the env process."""
    proc.wait(30)
    t0 = time.monotonic()
    assert wait_for(lambda: _gone(workers), DRAIN_BOUND_S), f"workers {workers} still running {DRAIN_BOUND_S} s after their env process"
    took = time.monotonic() - t0
    assert proc.stdout is not None
    proc.stdout.close()
    return took


def _manifest(folder) -> dict:
    [name] = [n for n in os.listdir(folder) if n.endswith(".manifest.json")]
    with open(os.path.join(folder, name)) as f:
        return json.load(f)


def _steps_read_back(folder) -> int:
    return sum(ep.length for ep in envrec.TraceReader(folder))


def _worker_ready(folder) -> bool:
    return any(n.endswith(".manifest.json") for n in os.listdir(folder))


@pytest.mark.parametrize("when", ["while the worker starts", "once the worker runs"])
def test_sigterm_to_the_process_group_keeps_every_step(tmp_path, when):
    proc, workers = _start(tmp_path)
    if when == "once the worker runs":
        assert wait_for(lambda: _worker_ready(tmp_path), 20)
    os.killpg(proc.pid, signal.SIGTERM)
    _end(proc, workers)
    assert proc.returncode == -signal.SIGTERM
    manifest = _manifest(tmp_path)
    assert manifest["terminated_by"] == "SIGTERM"
    assert manifest["complete"] and not manifest["closed_cleanly"]
    assert manifest["counters"]["steps"] == STEPS
    assert _steps_read_back(tmp_path) == STEPS
    assert list(envrec.TraceReader(tmp_path))[-1].ended_by == "crash"  # the episode left open


@pytest.mark.slow
def test_timeout_ends_the_job_and_keeps_every_step(tmp_path):
    """GNU ``timeout`` signals the process group it runs the command in."""
    proc = subprocess.Popen(["timeout", "-s", "TERM", "8", *child_command("child_preempted.py", str(tmp_path), str(STEPS))],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    workers = json.loads(proc.stdout.readline())
    _end(proc, workers)
    assert proc.returncode == 124  # timeout's own status: the time ran out
    assert _manifest(tmp_path)["terminated_by"] == "SIGTERM"
    assert _steps_read_back(tmp_path) == STEPS


def test_sigterm_to_the_env_process_alone_keeps_every_step(tmp_path):
    proc, workers = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _end(proc, workers)
    manifest = _manifest(tmp_path)
    assert manifest["terminated_by"] is None and not manifest["closed_cleanly"]  # the worker saw its env process die
    assert _steps_read_back(tmp_path) == STEPS


def test_sigterm_to_a_worker_alone_changes_nothing(tmp_path):
    proc, workers = _start(tmp_path)
    assert wait_for(lambda: _worker_ready(tmp_path), 20)
    os.kill(workers[0], signal.SIGTERM)
    time.sleep(1.0)
    assert psutil.Process(workers[0]).status() != psutil.STATUS_ZOMBIE, "a SIGTERM to the worker alone ended it"
    proc.send_signal(signal.SIGKILL)  # then the env process dies: the worker commits everything
    _end(proc, workers)
    manifest = _manifest(tmp_path)
    assert manifest["terminated_by"] == "SIGTERM"  # it had been asked to end, and did once its env process was gone
    assert _steps_read_back(tmp_path) == STEPS


def test_close_on_signals_closes_cleanly_then_dies_by_the_signal(tmp_path):
    proc, workers = _start(tmp_path, "--close-on-signals")
    proc.send_signal(signal.SIGTERM)
    _end(proc, workers)
    assert proc.returncode == -signal.SIGTERM  # the signal still ends the process as it would have
    manifest = _manifest(tmp_path)
    assert manifest["closed_cleanly"] and manifest["terminated_by"] is None
    assert manifest["stats"]["env_process"]  # the env process's own figures reached the manifest
    episodes = list(envrec.TraceReader(tmp_path))
    assert sum(ep.length for ep in episodes) == STEPS and episodes[-1].ended_by == "close"


@pytest.mark.parametrize("how", [pytest.param("SDL's own handlers off", marks=pytest.mark.slow), "close_on_signals"])
def test_sigterm_to_the_group_mid_clip_keeps_a_playable_clip(tmp_path, how):
    """CartPole renders with pygame, whose SDL takes SIGTERM over when nothing else handles it (the
    process then ignores it: see README, "When something fails"): either turn that off, or let
    ``close_on_signals`` handle it first."""
    from .support.video import decode, probe_size

    if how == "close_on_signals":
        proc, workers = _start(tmp_path, "--video", "--close-on-signals")
    else:
        proc, workers = _start(tmp_path, "--video", env={"SDL_NO_SIGNAL_HANDLERS": "1"})
    assert wait_for(lambda: _worker_ready(tmp_path), 20)
    os.killpg(proc.pid, signal.SIGTERM)
    _end(proc, workers)
    assert proc.returncode == -signal.SIGTERM
    assert _steps_read_back(tmp_path) == STEPS
    metas = sorted(n for n in os.listdir(tmp_path) if n.endswith(".meta.json"))
    with open(tmp_path / metas[-1]) as f:
        last = json.load(f)  # the clip of the episode left open
    if how == "close_on_signals":
        assert "terminated_by" not in last and _manifest(tmp_path)["closed_cleanly"]
    else:
        assert last["terminated_by"] == "SIGTERM" and last["ended_by"] == "terminated by SIGTERM"
    assert not last["broken"]
    frames = 0
    for m in metas:
        with open(tmp_path / m) as f:
            frames += json.load(f)["frames_written"]
    assert frames == STEPS + len(metas)  # a frame at each reset and one per step
    clip = tmp_path / os.path.basename(last["path"])
    assert len(decode(clip, *probe_size(clip))) == last["frames_written"]


RECORD_IN_A_NOTEBOOK = """
import gymnasium as gym, envrec
env = envrec.RecordTrace(gym.make("CartPole-v1"), {folder!r})
env.reset(seed=0)
for _ in range({steps}):
    _, _, terminated, truncated, _ = env.step(env.action_space.sample())
    if terminated or truncated:
        env.reset()
print(env.stats()["worker_pid"])
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["shutdown", "restart"])
@pytest.mark.slow
def test_a_jupyter_kernel_shut_down_or_restarted_with_an_open_recorder_keeps_every_step(tmp_path, how):
    """A real ipykernel, driven by jupyter_client as JupyterLab's server drives it; the recorder is never closed."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        reply = kc.execute_interactive(RECORD_IN_A_NOTEBOOK.format(folder=str(tmp_path / "rec"), steps=STEPS), timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
        kernel_pid = km.provisioner.pid
        ours = [p for p in psutil.Process(kernel_pid).children(recursive=True) if "envrec.workers" in " ".join(p.cmdline())]
        workers = [p.pid for p in ours]  # the serializer, and a spare started after it (gone with the kernel too)
        assert len([p for p in ours if p.name() != "envrec-spare"]) == 1
        if how == "restart":
            km.restart_kernel(now=False)
        else:
            km.shutdown_kernel(now=False)
        assert wait_for(lambda: _gone([kernel_pid, *workers]), 30)
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    assert _steps_read_back(tmp_path / "rec") == STEPS
    manifest = _manifest(tmp_path / "rec")
    assert manifest["complete"] and manifest["counters"]["steps"] == STEPS


def test_close_on_signals_waits_until_envrec_is_not_writing_a_record(monkeypatch):
    """A signal that lands inside envrec's code is sent again RETRY_S later instead of closing mid-record;
    one that lands in other code (the env stepping inside a wrapper's step) closes at once."""
    from envrec.supervision import signals

    as_envrecs = types.FunctionType((lambda: sys._getframe()).__code__, {"__name__": "envrec.record.recorder", "sys": sys})
    retried, closed = [], []
    monkeypatch.setattr(signals.threading, "Timer", lambda delay, fn, args: type("T", (), {"start": lambda self: retried.append((delay, args))})())
    monkeypatch.setattr(signals, "close_all", lambda why: closed.append(why))
    signals._on_signal(signal.SIGINT, as_envrecs(), previous=signal.SIG_IGN)  # a frame of envrec's code
    assert retried == [(signals.RETRY_S, (os.getpid(), signal.SIGINT))] and closed == []
    signals._on_signal(signal.SIGINT, sys._getframe(), previous=signal.SIG_IGN)
    assert closed == ["on SIGINT"] and len(retried) == 1


def test_a_drain_past_its_deadline_finalizes_what_it_has_and_counts_the_rest(tmp_path):
    """A ring too full to drain before Slurm's SIGKILL (here a throttled serializer and a 0.5 s deadline):
    the worker stops draining at the deadline, commits what it handled and counts what it left."""
    throttled = {"ENVREC_FAULTS": json.dumps({"sleep_per_record_s": 0.05}), "ENVREC_DRAIN_DEADLINE_S": "0.5"}
    proc, workers = _start(tmp_path, env=throttled)
    assert wait_for(lambda: _worker_ready(tmp_path), 20)
    os.killpg(proc.pid, signal.SIGTERM)
    signalled = time.monotonic()
    _end(proc, workers)
    took = time.monotonic() - signalled
    manifest = _manifest(tmp_path)
    assert manifest["terminated_by"] == "SIGTERM" and manifest["complete"]
    left = manifest["stats"]["serializer"]["records_not_drained"]
    read = _steps_read_back(tmp_path)
    assert left > 0 and read < STEPS and read + left >= STEPS  # every step written or counted (resets among the rest)
    assert manifest["stats"]["serializer"]["records"] + left > STEPS
    assert took < 0.5 + 5.0, f"the worker took {took:.1f} s after the signal"
