"""What a worker process has cost: its CPU and peak memory, and the CPU of the children it reaped (ffmpeg)."""

from __future__ import annotations

import resource

__all__ = ["peak_rss_bytes", "resources"]


def peak_rss_bytes() -> int | None:
    """This process's peak RSS since it started (VmHWM).

    Not ``ru_maxrss``: Linux carries that across fork and exec, so a spawned
    worker would report its parent's size.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def resources() -> dict[str, float | None]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "cpu_s": me.ru_utime + me.ru_stime,
        "max_rss_bytes": peak_rss_bytes(),
        "children_cpu_s": kids.ru_utime + kids.ru_stime,
    }
