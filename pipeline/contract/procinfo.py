"""Facts about processes that both sides report: an exit status named as a signal, CPU and memory; and
waiting for a child's exit.

Shared by the env side (the supervisor, stats) and the workers (the encoder
reporting its ffmpeg), so that a worker never imports an env-side module.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess

__all__ = ["process_facts", "signal_name", "wait_for_exit"]

REAP_S = 5.0  # how long reaping a child that exited may take (it is immediate)


def wait_for_exit(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """``proc``'s exit status once it exits, None if it still runs ``timeout_s`` from now. Woken by the exit
    itself (a pidfd), not by ``Popen.wait``'s polling, which sleeps up to 50 ms a look: a child that exits
    60 ms from now would be seen ~115 ms from now.

    Args:
        proc: a child of this process (not reaped yet while ``poll()`` is None, so its pid is still its own).
        timeout_s: how long to wait.
    """
    if proc.poll() is not None:
        return proc.returncode
    pidfd = None
    with contextlib.suppress(OSError, AttributeError):  # Linux 5.3+: else Popen.wait polls
        pidfd = os.pidfd_open(proc.pid)
    if pidfd is not None:
        try:
            exited, _, _ = select.select([pidfd], [], [], max(timeout_s, 0.0))
        finally:
            os.close(pidfd)
        if not exited:
            return None
        timeout_s = REAP_S
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None


def signal_name(exitcode: int | None) -> str:
    """'SIGKILL(-9)' for a process killed by a signal, 'exit code 3' otherwise."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"{signal.Signals(-exitcode).name}({exitcode})"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def process_facts(pid: int | None) -> dict[str, float] | None:
    """CPU seconds (user + system, threads included) and RSS of a live process, or None."""
    if not pid or pid < 0:  # never started (the launcher's -1)
        return None
    import psutil  # here: a worker starts ~15 ms sooner without it, and asks this only at a clip's end

    try:
        p = psutil.Process(pid)
        with p.oneshot():
            cpu = p.cpu_times()
            return {"cpu_s": cpu.user + cpu.system, "rss_bytes": p.memory_info().rss}
    except psutil.Error:
        return None
