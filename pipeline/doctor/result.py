"""What a check reports (``Result``: a ``CheckStatus``, what was found, what to fix) and the two bounds every check runs
under: a time limit on the check itself (``bounded``) and on each process it starts (``run_process``)."""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["CheckStatus", "Finished", "Result", "Status", "allow_running", "bounded", "kill_running", "run_process", "tail",
           "wait_for"]

KILLED_WAIT_S = 5.0  # how long the output of a process killed at its time limit is still read
WAIT_SLICE_S = 0.1  # the longest the main thread waits without running Python code (its Ctrl-C handler) in between
_running: set[int] = set()  # the process groups run_process has started and not yet ended
_running_lock = threading.Lock()
_stopped = threading.Event()  # set by kill_running (Ctrl-C): a process run_process starts after it is killed at once


T = TypeVar("T")


class CheckStatus(enum.Enum):
    """How a check ended. ``WARN``, ``SKIP`` and ``INFO`` count as passed for the exit status."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    INFO = "info"


Status = CheckStatus  # the old name, kept for one release (``envrec.contract.records.Status`` is the ring's status words)


@dataclass
class Result:
    """One check's outcome.

    Args:
        name: the check, e.g. ``"env render_fps"``.
        status: how it ended.
        message: what was found, one line.
        fix: for a failure or a warning, what to do about it (a command or a setting); empty otherwise.
        seconds: how long the check took.
        facts: what the check measured, for ``--json`` (names to JSON values).
    """

    name: str
    status: CheckStatus
    message: str
    fix: str = ""
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The result as a JSON object: name, status (``"pass"``...), message, fix, seconds, facts."""
        return {"name": self.name, "status": self.status.value, "message": self.message, "fix": self.fix,
                "seconds": round(self.seconds, 3), "facts": self.facts}


def bounded(name: str, check: Callable[[], list[Result]], timeout_s: float) -> list[Result]:
    """``check()``'s results, or one FAIL when it raises or does not return within ``timeout_s``.

    The check runs in a daemon thread, so a check stuck in a call that no timeout of its own covers cannot
    hang the doctor; every process a check starts is bounded by ``run_process`` and killed there.

    Args:
        name: the check's name, for the failure reported in its place.
        check: returns the check's results.
        timeout_s: how long it may take.
    """
    box: list[list[Result] | BaseException] = []
    started = time.monotonic()

    def run() -> None:
        try:
            box.append(check())
        except Exception as exc:  # noqa: BLE001  (a check that breaks is reported as a failure, never raised)
            box.append(exc)

    thread = threading.Thread(target=run, name=f"envrec-doctor-{name}", daemon=True)
    thread.start()
    while thread.is_alive() and time.monotonic() - started < timeout_s:  # in slices: see wait_for
        thread.join(min(WAIT_SLICE_S, max(0.0, timeout_s - (time.monotonic() - started))))
    took = time.monotonic() - started
    if not box:
        return [Result(name, CheckStatus.FAIL, f"did not finish within {timeout_s:g} s",
                       "run it again with -v to see where it stops; the doctor gave up on it", took)]
    outcome = box[0]
    if isinstance(outcome, BaseException):
        return [Result(name, CheckStatus.FAIL, f"the check itself failed: {type(outcome).__name__}: {outcome}",
                       "this is a bug of envrec doctor or of this machine's setup: report it with this line", took)]
    for result in outcome:
        result.seconds = result.seconds or took
    return outcome


def wait_for(future: Future[T]) -> T:
    """``future.result()``, waited for in slices of ``WAIT_SLICE_S`` so that Ctrl-C is seen within one.

    The kernel hands SIGINT to any thread of the process. When one of the checks' threads takes it, Python
    only sets a flag for the main thread, and a main thread blocked in one long wait on a lock (an unbounded
    ``result()``, a ``join``) never looks at the flag until the wait ends: the doctor would go on, silent,
    until its slowest check ended (90 s for a hanging env).
    """
    while True:
        try:
            return future.result(timeout=WAIT_SLICE_S)
        except FutureTimeout:
            continue


@dataclass(frozen=True)
class Finished:
    """A process ``run_process`` ran: its exit status (None: killed at the time limit), stdout, stderr."""

    returncode: int | None
    stdout: str
    stderr: str
    raw: bytes = b""  # stdout as bytes


def run_process(cmd: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None,
                stdin: bytes | None = None) -> Finished:
    """Run ``cmd`` in its own process group; past ``timeout_s`` the whole group is killed and waited for.

    Args:
        cmd: the command line.
        timeout_s: how long it may run.
        env: its environment (default: this process's).
        stdin: bytes for its standard input (default: none, /dev/null).

    Raises:
        OSError: the program cannot be started (missing, not executable).
    """
    proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=None if env is None else dict(env),
                            process_group=0)
    with _running_lock:
        _running.add(proc.pid)
        stopped = _stopped.is_set()
    try:
        if stopped:  # started by a check that had not yet seen Ctrl-C: it goes as those running then went
            _kill_group(proc.pid)
        return _finish(proc, stdin, timeout_s)
    finally:
        with _running_lock:
            _running.discard(proc.pid)


def kill_running() -> None:
    """Ctrl-C: kill every process group ``run_process`` is running, and every one it starts from now on until
    ``allow_running``, so the checks waiting on them end at once.

    A check's thread may be about to start a process when Ctrl-C comes (the MuJoCo GL probes start after the
    env's, ffmpeg's steps one after another): killing only the groups running at that instant would leave that
    one to run to its time limit (90 s for the env), and the doctor waiting for its check.
    """
    with _running_lock:  # a process registered after this sees the flag; one registered before is in the list
        _stopped.set()
        groups = list(_running)
    for pgid in groups:
        _kill_group(pgid)


def allow_running() -> None:
    """Let ``run_process`` run processes again after ``kill_running`` (a new run of the checks)."""
    _stopped.clear()


def _finish(proc: subprocess.Popen[bytes], stdin: bytes | None, timeout_s: float) -> Finished:
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        try:
            out, err = proc.communicate(timeout=KILLED_WAIT_S)
        except subprocess.TimeoutExpired:  # something that left the group holds the pipes: stop reading them
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
            out, err = b"", b""
        return Finished(None, out.decode(errors="replace"), err.decode(errors="replace"), out)
    except BaseException:
        _kill_group(proc.pid)
        proc.wait()
        raise
    _kill_group(proc.pid)  # whatever it left running in its group goes with it
    return Finished(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), out)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def tail(text: str, lines: int = 1, width: int = 300) -> str:
    """The last ``lines`` non-empty lines of ``text``, joined and cut to ``width`` characters (for messages)."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    joined = " | ".join(kept)
    return joined if len(joined) <= width else joined[: width - 3] + "..."
