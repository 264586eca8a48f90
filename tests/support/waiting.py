"""Waiting in tests: poll a condition with a deadline, so a hang fails instead of stalling."""

from __future__ import annotations

import time

import envrec


def wait_for(cond, timeout_s: float = 10.0, every_s: float = 0.02) -> bool:
    """Poll ``cond`` until it is true or ``timeout_s`` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every_s)
    return cond()


def committed_episodes(folder) -> list:
    """The episodes a recording in ``folder`` has committed so far; none before its first manifest."""
    try:
        return list(envrec.TraceReader(folder))
    except envrec.TraceError:
        return []
