"""Env side: what a stream counts across the rings and workers it used (``Stream.stats``).

A stream writes into one ring at a time; a fresh-per-clip restart replaces
the ring (and its worker), a hand-over keeps it. ``StreamCounters`` keeps
the env side's own counts, folds in the figures of each ring replaced
(``retire``), and reads the last worker's status words once when its ring
is closed (``freeze``), so every figure is the stream's over its whole life.
"""

from __future__ import annotations

import dataclasses

from ..contract.records import Status
from ..contract.ring import RingWriter

__all__ = ["StreamCounters"]


@dataclasses.dataclass
class StreamCounters:
    """A stream's counters; the figures of the ring in use are added by the methods that take it."""

    records_dropped: int = 0  # not written: the ring full (drop, block timeout), or the stream broken
    records_lost: int = 0  # written, never handled: left in the ring of a worker that failed for good
    control_records: int = 0  # CLOSE records written: not the user's
    retired_records: int = 0  # records written into rings since replaced
    retired_blocked_s: float = 0.0  # time spent waiting for room in them
    retired_high_water: int = 0  # the most bytes any of them held
    retired_status: dict[int, int] = dataclasses.field(default_factory=dict)  # their workers' status words, summed
    final_status: dict[int, int] = dataclasses.field(default_factory=dict)  # the last worker's, read as its ring closed
    final_unreleased: int = 0  # the user's records still in the last ring then

    def retire(self, ring: RingWriter) -> None:
        """Fold in the figures of ``ring`` and its worker, about to be replaced; what it still holds is lost."""
        for i in range(len(Status)):
            self.retired_status[i] = self.retired_status.get(i, 0) + ring.status(i)
        self.records_lost += ring.unreleased()  # sent to the dead worker, never handled
        self.retired_records += ring.records
        self.retired_blocked_s += ring.blocked_s
        self.retired_high_water = max(self.retired_high_water, ring.high_water)

    def freeze(self, ring: RingWriter, close_sent: bool) -> None:
        """Read the last worker's status words and what ``ring`` still holds, before the ring is closed."""
        self.final_status = {i: ring.status(i) for i in range(len(Status))}
        unreleased = ring.unreleased()
        if close_sent and unreleased:
            unreleased -= 1  # the CLOSE record, still in the ring: not the user's
        self.final_unreleased = unreleased

    def records_sent(self, ring: RingWriter) -> int:
        """Records of the user's calls written into rings (not the CLOSE records)."""
        return self.retired_records + ring.records - self.control_records

    def blocked_s(self, ring: RingWriter) -> float:
        return self.retired_blocked_s + ring.blocked_s

    def high_water(self, ring: RingWriter) -> int:
        return max(self.retired_high_water, ring.high_water)

    def status(self, ring: RingWriter, index: int) -> int:
        """A status word of the workers, summed over those replaced with their ring (its last value after close)."""
        now = self.final_status.get(index, 0) if ring.closed else ring.status(index)
        return self.retired_status.get(index, 0) + now
