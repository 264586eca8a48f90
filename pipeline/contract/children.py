"""Starting a child that a signal to this process's group must not reach.

A scheduler ends a job with SIGTERM to its whole process group, a terminal's
Ctrl-C sends SIGINT to its foreground group. The processes envrec starts for
itself (a worker's ffmpeg, a remux, ``ffmpeg -version``) run in a group of
their own, so those signals go to the env process and its workers, which
decide how the recording ends. A child is moved to its own group a moment
after the fork, and a group signal that comes in that moment would wait in
the child and kill it as it execs: under a storm of SIGTERMs 440 of 500
children started that way died of it. So the child is started with SIGTERM
and SIGINT blocked in the starting thread, and keeps them blocked: envrec
ends it by closing its input or with SIGKILL. The env side starts its
workers with the same two blocked (``envrec.supervision.launcher``) until a
worker's own handlers are in place.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

__all__ = ["TERMINATING", "blocked_in_this_thread", "popen_own_group", "run_own_group"]

TERMINATING = frozenset({signal.SIGTERM, signal.SIGINT})  # what schedulers and terminals send a whole group


@contextlib.contextmanager
def blocked_in_this_thread(signals: frozenset[signal.Signals]) -> Iterator[None]:
    """Block ``signals`` in the calling thread only (a child inherits the mask across exec); one that
    arrives meanwhile waits for another thread of this process, or for the unblock, and is then handled
    as the process always handles it.

    Args:
        signals: the signals to block.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def popen_own_group(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kwargs)`` in a process group of its own, SIGTERM and SIGINT blocked in it.

    Args:
        cmd: the program and its arguments.
        kwargs: the rest of ``Popen``'s arguments (not ``process_group``).
    """
    with blocked_in_this_thread(TERMINATING):
        return subprocess.Popen(cmd, process_group=0, **kwargs)


def run_own_group(cmd: list[str], timeout_s: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, timeout=timeout_s, **kwargs)``, started as ``popen_own_group``
    starts it; killed and ``subprocess.TimeoutExpired`` raised when it runs longer.

    Args:
        cmd: the program and its arguments.
        timeout_s: how long it may run.
        kwargs: the rest of ``Popen``'s arguments (``text``, ``pass_fds``...).
    """
    with popen_own_group(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
