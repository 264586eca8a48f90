"""The children envrec starts for itself (ffmpeg, its remux, ``ffmpeg -version``) are out of reach of a signal to
the job's process group, even one that comes while the child is being started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest

import envrec
from envrec.contract.children import TERMINATING, popen_own_group, run_own_group
from envrec.contract.records import Status

from .support.video import decode, meta
from .support.waiting import wait_for

STORM = textwrap.dedent("""
    import os, signal, subprocess, sys, threading, time
    from envrec.contract.children import popen_own_group
    os.setpgid(0, 0)  # the storm hits this process's own group, never pytest's
    signals = []
    signal.signal(signal.SIGTERM, lambda *_: signals.append(1))
    done = threading.Event()

    def storm():
        while not done.is_set():
            os.killpg(0, signal.SIGTERM)
            time.sleep(0.00005)

    def plain(cmd, **kw):
        return subprocess.Popen(cmd, process_group=0, **kw)

    start = popen_own_group if sys.argv[1] == "own" else plain
    threading.Thread(target=storm, daemon=True).start()
    statuses = []
    for _ in range(int(sys.argv[2])):
        p = start(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        p.stdin.close()
        statuses.append(p.wait())
    done.set()
    print(statuses.count(-signal.SIGTERM), len(signals), sorted(set(statuses)))
""")


def _storm(how: str, children: int) -> tuple[int, int, str]:
    out = subprocess.run([sys.executable, "-c", STORM, how, str(children)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    killed, signals, statuses = out.stdout.split(" ", 2)
    return int(killed), int(signals), statuses.strip()


def test_a_storm_of_sigterms_to_the_group_kills_no_child_started_in_its_own_group():
    killed, signals, statuses = _storm("own", 300)
    assert killed == 0 and statuses == "[0]" and signals > 300  # every child ended by its input's end
    # the same storm against children only moved to their own group after the fork: the race it closes
    plain_killed, _, _ = _storm("plain", 300)
    assert plain_killed > 0, "the storm no longer reaches a child between its fork and its own group: CPython changed?"


def test_the_child_keeps_sigterm_and_sigint_blocked_and_the_caller_its_own_mask():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with popen_own_group(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL) as proc:
        assert _blocked(proc.pid) >= TERMINATING and os.getpgid(proc.pid) == proc.pid
        proc.stdin.close()
    assert proc.returncode == 0 and signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before


def test_run_own_group_returns_the_output_and_kills_what_outlives_its_timeout(tmp_path):
    out = run_own_group([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 30,
                        text=True)
    assert (out.returncode, out.stdout, out.stderr) == (3, "out\n", "err\n")
    pid_file = tmp_path / "pid"
    slow = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired):
        run_own_group([sys.executable, "-c", slow], 2.0)
    pid = int(pid_file.read_text())
    assert not psutil.pid_exists(pid), pid  # killed and reaped, not left behind


def test_a_recorders_ffmpeg_ignores_a_sigterm_sent_to_it_and_ends_with_its_clip(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25)
    rec.start_clip("clip")
    for i in range(10):
        rec.add_frame(_frame(i), i)
    assert wait_for(lambda: rec._stream.status(Status.ENCODER_PID) > 0)
    ffmpeg = psutil.Process(rec._stream.status(Status.ENCODER_PID))
    assert "ffmpeg" in ffmpeg.name() and _blocked(ffmpeg.pid) >= TERMINATING
    assert os.getpgid(ffmpeg.pid) != os.getpgid(0)
    ffmpeg.send_signal(signal.SIGTERM)  # what a group signal in the moment of its start would have done
    for i in range(10, 20):
        rec.add_frame(_frame(i), i)
    rec.end_clip()
    rec.close()
    m = meta(tmp_path, "clip")
    assert not m["broken"] and m["frames_written"] == 20 and len(decode(tmp_path / "clip.mp4", 64, 48)) == 20


def _blocked(pid: int) -> set[signal.Signals]:
    """The signals blocked in a process's main thread, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        mask = int(next(line.split()[1] for line in f if line.startswith("SigBlk:")), 16)
    return {s for s in signal.Signals if s < 65 and mask >> (s - 1) & 1}


def _frame(i: int) -> np.ndarray:
    f = np.zeros((48, 64, 3), np.uint8)
    f[..., 0] = i
    return f
