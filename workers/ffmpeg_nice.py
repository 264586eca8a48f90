"""Which niceness a clip's ffmpeg runs at: ``VideoSettings.nice`` while the encoder keeps up with the env,
``VideoSettings.behind_nice`` while it is behind or not yet known to keep up.

ffmpeg runs niced so that on a busy machine the env gets the CPU first, and
the frame ring holds what ffmpeg has not encoded yet. But once the ring is
full the env waits for ffmpeg: a process of higher priority waiting on one of
lower priority, which the scheduler serves late, so the env waits in lumps of
20-50 ms (docs/performance.md, "Long calls"). So the encoder's ``Pace``:

* ``UNKNOWN`` at the start: ffmpeg runs at ``behind_nice`` until the encoder
  has handed it half a ring of frames (``PROBATION``) with the ring never
  half full; then ``KEEPING_UP``, and the open clip's ffmpeg is reniced.
* ``BEHIND`` from the moment the ring is half full (``BEHIND_AT``), until it
  is back under a quarter (``CAUGHT_UP_AT``): ``KEEPING_UP`` again.

An unprivileged process may raise a niceness but never lower it: an ffmpeg
runs at the niceness chosen when a clip takes it (``Encoder._take_standby``
starts another when the one started ahead has a higher one), and only a
clip's ffmpeg started while the pace was ``UNKNOWN`` is reniced during the
clip. A clip that starts ``KEEPING_UP`` and fills the ring before its end keeps
its niceness; the next clip's ffmpeg runs at ``behind_nice``.
"""

from __future__ import annotations

import enum
import os

from envrec.contract.protocol import RingGauge

__all__ = ["BEHIND_AT", "CAUGHT_UP_AT", "PROBATION", "NiceChoice", "Pace", "nice_of", "set_nice"]

BEHIND_AT = 0.5  # the share of the ring in use from which the encoder is behind
CAUGHT_UP_AT = 0.25  # ... and under which it has caught up again
PROBATION = 0.5  # rings' worth of frames handed to ffmpeg, the ring never BEHIND_AT, before the pace is known


class Pace(enum.Enum):
    UNKNOWN = "not known yet"
    KEEPING_UP = "keeping up"
    BEHIND = "behind"


class NiceChoice:
    """The encoder's ``Pace``, and the niceness it gives an ffmpeg.

    Args:
        nice: while the encoder keeps up (``VideoSettings.nice``).
        behind_nice: otherwise (``VideoSettings.behind_nice``); never above ``nice``.
    """

    def __init__(self, nice: int, behind_nice: int) -> None:
        self.nice = nice
        self.behind_nice = min(nice, behind_nice)
        self.pace = Pace.UNKNOWN
        self._handed = 0  # bytes of frames handed to ffmpeg while UNKNOWN

    def now(self, ring: RingGauge) -> int:
        """The niceness for an ffmpeg a clip takes now."""
        self._follow(ring.used_fraction())
        return self.nice if self.pace is Pace.KEEPING_UP else self.behind_nice

    def handed(self, ring: RingGauge, nbytes: int) -> bool:
        """Frames of ``nbytes`` in all went to ffmpeg; True when that ended the probation (``KEEPING_UP`` now:
        the open clip's ffmpeg may be reniced to ``nice``). Outside the probation the pace is looked at only
        when a clip takes an ffmpeg (``now``)."""
        if self.pace is not Pace.UNKNOWN:
            return False
        if ring.used_fraction() >= BEHIND_AT:
            self.pace = Pace.BEHIND
            return False
        self._handed += nbytes
        if self._handed < PROBATION * ring.capacity:
            return False
        self.pace = Pace.KEEPING_UP
        return True

    def _follow(self, used: float) -> None:
        if used >= BEHIND_AT:
            self.pace = Pace.BEHIND
        elif self.pace is Pace.BEHIND and used < CAUGHT_UP_AT:
            self.pace = Pace.KEEPING_UP


def set_nice(pid: int, nice: int) -> bool:
    """Give every thread of process ``pid`` the niceness ``nice`` (Linux keeps one per thread; threads started
    later inherit their creator's). False when it could not be set (the process is gone, or lowering it
    needs a privilege this process lacks)."""
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
        except OSError:
            return False
    return True


def nice_of(pid: int) -> int | None:
    """Process ``pid``'s niceness (its main thread's), None once it is gone."""
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None
