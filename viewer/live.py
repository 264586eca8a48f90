"""Whether a recording is still being written, told from what is on disk.

envrec writes no heartbeat, so the viewer reads the facts it leaves:

* the head manifest's ``complete`` (the final manifest: the recording
  ended), with ``closed_cleanly``, ``error`` and ``terminated_by`` saying how;
* the newest change of its files: the head manifest (rewritten at every
  commit, and a commit comes at least every ``commit_interval`` while steps
  come) and the serializer's hidden checkpoint slots;
* the manifest's ``writer.pid``, the serializer that wrote it: whether a
  process of that pid runs ``envrec.workers`` on this machine.

The state of a recording (``State``):

=============  ===================================================================
``complete``   its final manifest, closed by ``close()``
``ended``      its final manifest, not closed cleanly: its env process died, a
               signal ended the job, or its worker failed (``state_detail`` says)
``recording``  no final manifest yet, and a file changed within the staleness
               timeout or its worker runs here (an env paused between steps
               commits nothing, but its worker lives)
``interrupted`` no final manifest, nothing changed for the staleness timeout and
               no worker of it runs here: the env process and its worker were
               killed together (or the machine went down), and nothing will
               finalize it. It stays so unless a file changes again.
``unknown``    a trace envrec did not write (gym-recording's manifests say
               nothing of how far they got): read as it is, never polled
=============  ===================================================================

The staleness timeout is ``stale_after_s`` (``STALE_AFTER_S`` by default), or
three ``commit_interval``s of the recording when that is longer. A killed env
process alone is not ``interrupted``: its worker finalizes the manifest
(``ended``, its last episode ended by ``crash``) within moments.
"""

from __future__ import annotations

import os
import time
from enum import StrEnum
from typing import Any

import psutil

from envrec.formats.trace_format import FORMAT_NAME, Manifest, checkpoint_names

__all__ = ["STALE_AFTER_S", "State", "newest_change", "recording_state", "worker_running"]

STALE_AFTER_S = 30.0  # no file changed this long, no worker here: stopped (6 of the default 5 s commit intervals)
COMMITS_BEFORE_STALE = 3  # a recording committing every commit_interval seconds is stale after this many missed


class State(StrEnum):
    """What the index says of a recording (see the module's table)."""

    COMPLETE = "complete"
    ENDED = "ended"
    RECORDING = "recording"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"


def worker_running(pid: Any) -> bool:
    """Whether ``pid`` is a live ``envrec.workers`` process on this machine (not a zombie, not a reused pid)."""
    if type(pid) is not int or pid <= 0:
        return False
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            if p.status() == psutil.STATUS_ZOMBIE:
                return False
            return "envrec.workers" in p.cmdline()
    except psutil.Error:
        return False


def newest_change(directory: str, prefix: str | None, manifest_mtime: float) -> float:
    """The newest modification time (seconds) of a recording's head manifest and checkpoint slots."""
    newest = manifest_mtime
    if prefix:
        for name in checkpoint_names(prefix):
            try:
                newest = max(newest, os.stat(os.path.join(directory, name)).st_mtime)
            except OSError:
                continue  # none yet, or dropped when the recording ended
    return newest


def _stale_after(manifest: Manifest, stale_after_s: float) -> float:
    interval = (manifest.get("settings") or {}).get("commit_interval")
    if isinstance(interval, int | float) and interval > 0:
        return max(stale_after_s, COMMITS_BEFORE_STALE * float(interval))
    return stale_after_s


def recording_state(manifest: Manifest, changed_at: float, stale_after_s: float = STALE_AFTER_S,
                    now: float | None = None) -> dict[str, Any]:
    """``state`` (a ``State`` value), ``state_detail`` (a sentence for the page) and ``idle_s`` (seconds since a
    file of the recording last changed) of a recording.

    Args:
        manifest: its head manifest, as read.
        changed_at: the newest modification time of its files (``newest_change``).
        stale_after_s: the staleness timeout (see the module's docstring).
        now: the time to judge at (default: now).
    """
    idle = max(0.0, (time.time() if now is None else now) - changed_at)
    out: dict[str, Any] = {"idle_s": None}
    if manifest.get("format") != FORMAT_NAME:
        return {**out, "state": State.UNKNOWN.value, "state_detail": "not written by envrec: whether it is still written is not known"}
    if manifest.get("complete"):
        if manifest.get("closed_cleanly", True):
            return {**out, "state": State.COMPLETE.value, "state_detail": "complete"}
        why = [f"stopped by {manifest['terminated_by']}" if manifest.get("terminated_by") else None,
               f"error: {manifest['error']}" if manifest.get("error") else None]
        detail = "; ".join(w for w in why if w) or "its env process died"
        return {**out, "state": State.ENDED.value, "state_detail": f"ended, not closed cleanly ({detail})"}
    out["idle_s"] = round(idle, 1)
    pid = (manifest.get("writer") or {}).get("pid")
    alive = worker_running(pid)
    limit = _stale_after(manifest, stale_after_s)
    if idle < limit:
        return {**out, "state": State.RECORDING.value, "state_detail": "recording"}
    if alive:
        return {**out, "state": State.RECORDING.value,
                "state_detail": f"recording (nothing committed for {idle:.0f} s: its worker, pid {pid}, waits for steps)"}
    return {**out, "state": State.INTERRUPTED.value,
            "state_detail": f"interrupted: no file changed for {idle:.0f} s (timeout {limit:g} s), no worker of it runs "
                            "here, and its manifest was never finalized (killed with its worker?)"}
