"""Facts about processes that both sides report: an exit status named as a signal, CPU and memory.

Shared by the env side (the supervisor, stats) and the workers (the encoder
reporting its ffmpeg), so that a worker never imports an env-side module.
"""

from __future__ import annotations

import signal

import psutil

__all__ = ["process_facts", "signal_name"]


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
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            cpu = p.cpu_times()
            return {"cpu_s": cpu.user + cpu.system, "rss_bytes": p.memory_info().rss}
    except psutil.Error:
        return None
