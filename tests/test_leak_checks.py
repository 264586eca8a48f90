"""The suite's leak checks (tests/conftest.py) see this run's leaks, and only this run's.

An inner pytest run with this suite's conftest runs three tests: one leaks a
memfd held by its own process, one leaks a memfd held by a process it
started that left the tree (a double fork: orphaned, but carrying the run's
token), and one passes while an unrelated envrec job, started outside the
inner run's process tree (double fork, new session, its own environment),
creates and frees rings all through it — which the old machine-wide check
counted as the test's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))

# Starts argv[1:] as a grandchild in a new session, writes its pid to argv[1], and returns at once:
# the grandchild is reparented away from whoever started this (init, or a subreaper above us).
DOUBLE_FORK = """
import os, sys
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid:
        open(sys.argv[1], "w").write(str(pid))
        os._exit(0)
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
os.wait()
"""

# An envrec job: a recorder opened, stepped and closed again and again, until STOP exists (60 s at most).
JOB = """
import os, sys, time
import gymnasium as gym, envrec
folder, stop = sys.argv[1], sys.argv[2]
t0, n = time.monotonic(), 0
while not os.path.exists(stop) and time.monotonic() - t0 < 60:
    with envrec.TraceRecorder(os.path.join(folder, str(n)), gym.spaces.Discrete(2), gym.spaces.Discrete(2)) as rec:
        rec.add_reset(0)
        for _ in range(10):
            rec.add_step(1, 0, 1.0, False, False)
        time.sleep(0.2)
    n += 1
"""

# A process holding an envrec memfd for 30 s (or until STOP exists).
HOLDER = """
import os, sys, time
from envrec.contract.shm import create_memfd
seg = create_memfd(1 << 16)
t0 = time.monotonic()
while not os.path.exists(sys.argv[1]) and time.monotonic() - t0 < 30:
    time.sleep(0.05)
"""

INNER = '''
import os, subprocess, sys, time
from envrec.contract.shm import create_memfd, list_memfds
from conftest import RUN_ENV, ours, our_memfds

HERE = os.path.dirname(os.path.abspath(__file__))
kept = []


def _double_fork(pidfile, *argv, env=None):
    subprocess.run([sys.executable, os.path.join(HERE, "double_fork.py"), pidfile, *argv], env=env, check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not os.path.exists(pidfile) or not open(pidfile).read():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return int(open(pidfile).read())


def test_a_memfd_held_by_this_process():
    kept.append(create_memfd(1 << 16))  # never closed: the fixture must call it a leak


def test_a_memfd_held_by_an_orphan_of_this_run():
    pid = _double_fork(os.path.join(HERE, "holder.pid"), os.path.join(HERE, "holder.py"), os.path.join(HERE, "STOP-holder"))
    assert pid not in {p.pid for p in __import__("psutil").Process().children(recursive=True)}  # it left the tree
    deadline = time.monotonic() + 20
    while not [s for s in our_memfds() if s.startswith(f"envrec_{pid}_")]:
        assert time.monotonic() < deadline, "the orphan, carrying this run's token, is ours"
        time.sleep(0.05)


def test_an_envrec_job_outside_the_tree_is_not_this_tests(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}  # another job: not this run's
    # the job writes outside this test's tmp_path: its files are not this test's either
    pid = _double_fork(os.path.join(HERE, "job.pid"), os.path.join(HERE, "job.py"), os.path.join(HERE, "job-out"),
                       os.path.join(HERE, "STOP-job"), env=env)
    assert pid not in ours()
    theirs, deadline = set(), time.monotonic() + 30
    while len(theirs) < 3:  # rings of the other job, created while this test runs
        assert time.monotonic() < deadline, "the outside job never created a ring"
        theirs |= {s for s in list_memfds() if s.startswith(f"envrec_{pid}_")}
        time.sleep(0.05)
    assert not theirs & our_memfds()
    # the job goes on creating rings past this test's end, through the fixture's check
'''


def _stop(folder, name: str) -> None:
    """Tell a helper started by the inner run to finish, and wait for it by its pid."""
    open(os.path.join(folder, f"STOP-{name}"), "w").close()
    pidfile = os.path.join(folder, f"{name}.pid")
    if not os.path.exists(pidfile):
        return
    pid = int(open(pidfile).read())
    deadline = time.monotonic() + 20
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        if time.monotonic() > deadline:
            psutil.Process(pid).kill()
            break
        time.sleep(0.05)
    while _writing(os.path.join(folder, f"{name}-out")) and time.monotonic() < deadline:
        time.sleep(0.05)  # its workers finish what it recorded after it exited


def _writing(folder) -> bool:
    """Whether files are still being written in ``folder`` (their temporaries are there)."""
    return any(n.endswith(".tmp") for _, _, names in os.walk(folder) for n in names)


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "2"]], ids=["one-process", "xdist"])
def test_leak_checks_see_this_runs_leaks_and_no_other_jobs(tmp_path, workers):
    """Alone, and in two pytest-xdist workers: each worker is a run of its own (its own token), its tests' leaks
    are seen and the other worker's processes and the outside job are not its tests'."""
    inner = tmp_path / "inner"
    inner.mkdir()
    shutil.copy(os.path.join(HERE, "conftest.py"), inner / "conftest.py")
    for name, text in (("double_fork.py", DOUBLE_FORK), ("job.py", JOB), ("holder.py", HOLDER), ("test_inner.py", INNER)):
        (inner / name).write_text(textwrap.dedent(text))
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *workers, str(inner / "test_inner.py")],
                             cwd=inner, capture_output=True, text=True, timeout=100, env=dict(os.environ, COLUMNS="400"))
        # The outside job must still be running now: the fixture checked while it created rings.
        job = int((inner / "job.pid").read_text())
        assert psutil.pid_exists(job), out.stdout
    finally:
        _stop(inner, "job")
        _stop(inner, "holder")
    text = out.stdout
    assert "3 passed, 2 errors" in text, text  # a test whose teardown fails counts as passed and errored
    assert "ERROR test_inner.py::test_an_envrec_job_outside_the_tree_is_not_this_tests" not in text, text
    for test in ("test_a_memfd_held_by_this_process", "test_a_memfd_held_by_an_orphan_of_this_run"):
        assert f"ERROR test_inner.py::{test} - AssertionError: envrec memfds left" in text, text


SEMAPHORE_INNER = '''
import os, time


def test_leaves_a_semaphore():
    open(os.path.join("/dev/shm", os.environ["LEAKED_NAME"]), "w").close()  # a name nothing maps, never unlinked


def test_beside_it():
    time.sleep(1.0)
'''


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "2"]], ids=["one-process", "xdist"])
def test_a_semaphore_left_fails_its_test_alone_and_the_run_beside_other_workers(tmp_path, workers):
    """Alone, the test that left a semaphore fails; in several workers no test can be blamed for a name nothing
    maps (the other worker's killed child may have left it), so the run fails at its end, naming it."""
    inner = tmp_path / "inner"
    inner.mkdir()
    shutil.copy(os.path.join(HERE, "conftest.py"), inner / "conftest.py")
    (inner / "test_inner.py").write_text(textwrap.dedent(SEMAPHORE_INNER))
    name = f"sem.mp-envrec-test-{os.getpid()}-{len(workers)}"
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *workers, str(inner / "test_inner.py")],
                             cwd=inner, capture_output=True, text=True, timeout=100,
                             env=dict(os.environ, COLUMNS="400", LEAKED_NAME=name))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join("/dev/shm", name))
    text = out.stdout
    assert out.returncode == 1, text
    if workers:
        assert "2 passed" in text and "error" not in text, text
        assert f"semaphores left in /dev/shm by this run's tests: ['{name}']" in text, text
    else:
        assert "2 passed, 1 error" in text, text
        assert f"ERROR test_inner.py::test_leaves_a_semaphore - AssertionError: semaphores left in /dev/shm: {{'{name}'}}" in text, text
