"""The test tiers, and shared fixtures: every test must leave no child process, memfd, semaphore or temp file.

Tiers (docs/testing.md): plain ``pytest`` runs the development tier, every test not marked ``slow`` (and
of a parametrized test marked ``variants``, its first case);
``CI=true`` (what .ci/run sets) or ``--all`` runs the full tier, ``slow`` included; an explicit ``-m``
chooses for itself, and naming test files or ids runs all of them. A run of the whole suite (no file named)
is spread over two processes by pytest-xdist (``-n 2 --dist loadgroup``) unless ``-n`` is given: tests in
``xdist_group("serial")`` (bounded by wall-clock time) run one after another in one process, those in
``xdist_group("ray")`` share one process and its Ray cluster.

Every leak check is scoped to what this test run started: this process, its
descendants, and the processes that carry this run's ``ENVREC_TEST_RUN``
token in their environment (set below, inherited by every process the run
starts, so a worker orphaned by a killed child still counts as ours). An
envrec job running beside the suite on the same machine is none of these.
Each pytest-xdist worker imports this file and sets a token of its own: it is
a run of its own, and the tests of the other worker are not its tests.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time

import psutil
import pytest

from envrec.contract.ring import RingWriter
from envrec.contract.ring_reader import RingReader
from envrec.contract.shm import list_memfds

SEMAPHORE_SETTLE_S = 0.2  # how long a semaphore's name made by another process may take to be unlinked again
LEAK_GRACE_S = 5.0  # how long a test's children get to exit after it ends
RUN_ENV = "ENVREC_TEST_RUN"
NESTED = RUN_ENV in os.environ  # a pytest-xdist worker, or a run inside a test: never spread over processes again
os.environ[RUN_ENV] = f"{os.getpid()}-{time.time_ns()}"  # this run's token (a run inside a test gets its own)
PROCESSES = 2  # a whole-suite run's pytest-xdist workers: CI's 2 cores
_RUN_SEMAPHORES = pytest.StashKey[set]()  # the semaphores there when a run spread over workers started


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False,
                     help="run the full tier, the tests marked slow too (what CI=true runs)")


def full_tier(config) -> bool:
    """Whether this run is the full tier: ``CI=true`` or ``--all``."""
    return os.environ.get("CI") == "true" or config.getoption("--all")


def _whole_suite(config) -> bool:
    """No file or test named: pytest runs its testpaths (the tier)."""
    return config.args_source is pytest.Config.ArgsSource.TESTPATHS


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """A whole-suite run goes to ``PROCESSES`` pytest-xdist workers (before xdist reads its options)."""
    if NESTED or hasattr(config, "workerinput") or not _whole_suite(config) or config.getoption("collectonly"):
        return
    if not config.pluginmanager.hasplugin("xdist") or config.getoption("numprocesses", None) is not None:
        return  # -p no:xdist, or -n given: as asked
    if config.getoption("usepdb") or config.getoption("tx", None) or config.getoption("dist", "no") != "no":
        return
    config.option.numprocesses = PROCESSES
    config.option.dist = "loadgroup"
    config.option.tx = ["popen"] * PROCESSES


def _spread_over_workers(config) -> bool:
    """This is the controller of several pytest-xdist workers."""
    n = getattr(config.option, "numprocesses", None)
    return not hasattr(config, "workerinput") and (n in ("auto", "logical") or isinstance(n, int) and n > 1)


def pytest_sessionstart(session):
    if _spread_over_workers(session.config):
        session.config.stash[_RUN_SEMAPHORES] = _semaphores()


def pytest_sessionfinish(session, exitstatus):
    """Spread over workers, the run fails when semaphores its tests made are left once they all ended."""
    before = session.config.stash.get(_RUN_SEMAPHORES, None)
    left = _left_semaphores(before, LEAK_GRACE_S)  # time for a killed child's resource tracker to unlink its names
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"semaphores left in /dev/shm by this run's tests: {sorted(left)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _full_tier_only(item) -> bool:
    """Marked ``slow``, or a case of a ``variants`` test other than its first: left out of the development tier."""
    if item.get_closest_marker("slow"):
        return True
    callspec = getattr(item, "callspec", None)
    return bool(item.get_closest_marker("variants") and callspec is not None and any(callspec.indices.values()))


def pytest_collection_modifyitems(config, items):
    """The development tier leaves out the tests marked ``slow`` and the later cases of ``variants`` tests."""
    if full_tier(config) or config.getoption("markexpr") or not _whole_suite(config):
        return
    left_out = [item for item in items if _full_tier_only(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not _full_tier_only(item)]


def pytest_report_header(config):
    tier = "full (CI=true or --all)" if full_tier(config) else "development (not slow; --all or CI=true for all)"
    return f"envrec test tier: {tier}" if _whole_suite(config) or full_tier(config) else None


def ours() -> set[int]:
    """This process, its descendants, and processes this run started that were orphaned (they carry its token)."""
    me = psutil.Process()
    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
    token = os.environ[RUN_ENV]
    for p in psutil.process_iter():
        if p.pid not in pids:
            with contextlib.suppress(psutil.Error):
                if p.environ().get(RUN_ENV) == token:
                    pids.add(p.pid)
    return pids


def our_memfds() -> set[str]:
    """envrec memfds held by our processes (see ``ours``); another job's are not this test's."""
    return set(list_memfds(ours()))


def _children() -> set[int]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if "resource_tracker" in cmd:
                continue  # multiprocessing's own, started once per interpreter
            if "--spare-fd=" in cmd and not (p.name().startswith("envrec-") and p.name() != "envrec-spare"):
                continue  # an idle spare worker (still importing, or waiting): it lives as long as the process (test_spare.py)
            if cmd.startswith("ray::") or "/site-packages/ray/" in cmd:
                continue  # a Ray cluster's own processes (its idle workers outlive a test; envrec's workers are checked)
        except psutil.Error:
            continue
        out.add(p.pid)
    return out


def _encoders_writing_into(folder) -> list[int]:
    """ffmpeg processes (ours or orphaned) whose command line names ``folder``."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if "ffmpeg" in (p.info["name"] or "") and str(folder) in " ".join(p.info["cmdline"] or []):
                found.append(p.info["pid"])
        except psutil.Error:
            continue
    return found


def _semaphores() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")}
    except OSError:
        return set()


def _mapped_by_others(names: set[str]) -> set[str]:
    """Those of the /dev/shm files ``names`` that a process not ours has mapped: another job's, in use."""
    if not names:
        return set()
    mine, found = ours(), set()
    for pid in psutil.pids():
        if pid in mine:
            continue
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            found |= {n for line in maps for n in names if line.rstrip().endswith("/dev/shm/" + n)}
    return found


def _left_semaphores(before: set[str] | None, settle_s: float = SEMAPHORE_SETTLE_S) -> set[str]:
    """Semaphores new since ``before`` that stay: not another job's in use, and still there ``settle_s`` later
    (none when ``before`` is None: not checked per test).

    multiprocessing creates a semaphore's name and unlinks it at once; a process beside this one (an xdist
    worker, another job) that does so while we look shows a name for an instant, gone when we look again.
    """
    if before is None:
        return set()
    new, deadline = _semaphores() - before, time.monotonic() + settle_s
    while new and time.monotonic() < deadline:
        time.sleep(min(0.05, settle_s))
        new &= _semaphores()
    return new - _mapped_by_others(new)


def _tmp_files(root) -> list[str]:
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.join(folder, n) for n in names if n.endswith(".tmp")]
    return found


def _semaphores_per_test(config) -> bool:
    """Whether a test's semaphores can be told from those of the tests beside it: not in one of several
    pytest-xdist workers. There a semaphore of the other worker's child, killed by its test before its resource
    tracker unlinked the name, is mapped by no process and named by no token, and would be this test's; the
    controller checks the whole run's instead (``pytest_sessionfinish``)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is None or workerinput.get("workercount", 1) <= 1


def _seems_leaked(children: set[int], memfds: set[str], sems: set[str] | None, tmp_path) -> bool:
    """Whether anything seems left: the cheap look, without the heap walk of ``gc.collect``."""
    return bool(_tmp_files(tmp_path) or sems is not None and _semaphores() - sems or _children() - children
                or our_memfds() - memfds or _encoders_writing_into(tmp_path))


@pytest.fixture
def ring():
    """A small ring (8192 bytes) and a reader on it, both closed after the test."""
    w = RingWriter(8192)
    r = RingReader(w.spec)
    yield w, r
    r.close()
    w.close()


@pytest.fixture(autouse=True)
def no_leaks(request, tmp_path):
    """Fail a test that leaves a child process, an ffmpeg, an envrec memfd, a semaphore or a temp file.

    A test that left nothing passes at the first look. Only when something seems left is the garbage
    collected (an unreferenced recorder's finalizer may still close it: 40-160 ms a call once torch, Ray and
    pyarrow are loaded, so not for every test), and the children, memfds and encoders get ``LEAK_GRACE_S``
    to go before each is reported.
    """
    children, memfds = _children(), our_memfds()
    sems = _semaphores() if _semaphores_per_test(request.config) else None
    yield
    if not _seems_leaked(children, memfds, sems, tmp_path):
        return
    gc.collect()
    deadline = time.monotonic() + LEAK_GRACE_S
    while time.monotonic() < deadline and (
        _children() - children or our_memfds() - memfds or _encoders_writing_into(tmp_path)
    ):
        time.sleep(0.05)
        gc.collect()
    leaked_children = _children() - children
    for pid in leaked_children:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    leaked_memfds = our_memfds() - memfds
    for name in leaked_memfds:  # memfds die with their holders (killed above); files of older versions go here
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join("/dev/shm", name))
    leaked_encoders = _encoders_writing_into(tmp_path)
    for pid in leaked_encoders:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    leaked_sems = _left_semaphores(sems)
    leaked_tmp = _tmp_files(tmp_path)
    assert not leaked_children, f"child processes left running: {leaked_children}"
    assert not leaked_encoders, f"ffmpeg processes left running: {leaked_encoders}"
    assert not leaked_memfds, f"envrec memfds left: {leaked_memfds}"
    assert not leaked_sems, f"semaphores left in /dev/shm: {leaked_sems}"
    assert not leaked_tmp, f"temporary files left: {leaked_tmp}"
