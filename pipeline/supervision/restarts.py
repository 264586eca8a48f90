"""Env side: what a stream does when its worker fails (``RestartPolicy``), each policy with its own rules.

A recorder chooses a policy and passes it to its ``Stream``; the stream asks
the policy for a ``Restarter``, its own bookkeeping under that policy, and
from then on only asks it questions — never which policy it is:

* ``may_hand_over(ring)``: a worker failed (or failed to finish at close):
  start a successor at once on the same ring? (``HandOver``, the trace
  serializer: it resumes from its predecessor's last checkpoint.)
* ``successor_config(ring, reason)``: what that successor is started with.
* ``may_start_fresh()``: the owner asks for a fresh worker and ring (the
  video encoder, before its next clip): may one be started?
  (``FreshPerClip``.)

``Never`` (the vector serializer, which keeps no checkpoints) answers no to
both. ``max_restarts`` bounds a hand-over's failures *in a row* — a row ends
when the failed worker committed a batch it did not inherit, or skipped a
poison record — and a fresh-per-clip stream's restarts in all.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from ..contract.protocol import Suspect
from ..contract.records import Status
from ..contract.ring import RingWriter

__all__ = ["FreshPerClip", "HandOver", "Never", "Restart", "RestartPolicy", "Restarter"]


class Restart(enum.Enum):
    """How a stream replaces a worker that failed (see ``RestartPolicy``)."""

    HAND_OVER = "hand over"  # at once, on the same ring: a successor resumes from the failed worker's checkpoint
    FRESH_PER_CLIP = "fresh per clip"  # when the owner asks (the video recorder: before its next clip), ring and all
    NEVER = "never"  # the stream stays broken


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """What a stream does when its worker fails; each recorder chooses one and passes it to ``Stream``.

    Build one with ``hand_over``, ``fresh_per_clip`` or ``never``; ``max_restarts``
    (``StreamOptions``) bounds how many replacements the first two start.

    Args:
        how: which of the three policies.
        config: what a replacement worker is started with (None for ``NEVER``).
    """

    how: Restart
    config: Any = None

    def __post_init__(self) -> None:
        if (self.config is None) != (self.how is Restart.NEVER):
            raise TypeError(f"RestartPolicy {self.how.value!r} takes a config exactly when it restarts workers")

    @classmethod
    def hand_over(cls, successor_config: Any) -> RestartPolicy:
        """Replace a failed worker at once by one started with ``successor_config``, on the same ring.

        ``max_restarts`` failures in a row are allowed (a row ends when a worker commits a batch it did not
        inherit, or skips a poison record).
        """
        return cls(Restart.HAND_OVER, successor_config)

    @classmethod
    def fresh_per_clip(cls, config: Any) -> RestartPolicy:
        """Replace a broken worker and its ring when the owner calls ``Stream.restart``, at most ``max_restarts`` times."""
        return cls(Restart.FRESH_PER_CLIP, config)

    @classmethod
    def never(cls) -> RestartPolicy:
        """Never replace a failed worker: the stream stays broken (a worker that keeps no checkpoints)."""
        return cls(Restart.NEVER)

    def restarter(self, max_restarts: int) -> Restarter:
        """One stream's bookkeeping under this policy, allowed ``max_restarts`` replacements."""
        return _RESTARTERS[self.how](self.config, max_restarts)


class Restarter:
    """One stream's restarts under its policy; this base replaces nothing (``Never``'s rules).

    Args:
        config: what a replacement worker is started with.
        max_restarts: how many replacements the policy allows (see its class).
    """

    def __init__(self, config: Any, max_restarts: int) -> None:
        self.config = config
        self.max_restarts = max_restarts
        self.count = 0  # workers replaced so far

    def may_hand_over(self, ring: RingWriter) -> bool:
        """Whether the failed worker of ``ring`` (its status words still there) is replaced at once, on that ring."""
        return False

    def successor_config(self, ring: RingWriter, reason: str) -> Any:
        """What the successor of the failed worker of ``ring`` is started with; ``reason``: the failure's last line."""
        raise NotImplementedError(f"{type(self).__name__} hands over to no successor")

    def handed_over(self) -> str:
        """Count a hand-over; what the log says of it."""
        raise NotImplementedError(f"{type(self).__name__} hands over to no successor")

    def may_start_fresh(self) -> bool:
        """Whether the owner may replace a broken worker by a fresh one, with a fresh ring."""
        return False

    def started_fresh(self) -> None:
        """Count a fresh worker started."""
        raise NotImplementedError(f"{type(self).__name__} starts no fresh worker")


class Never(Restarter):
    """``RestartPolicy.never``: a failed worker is not replaced; its stream stays broken."""


class HandOver(Restarter):
    """``RestartPolicy.hand_over``: a failed worker is replaced at once on its ring, ``max_restarts`` failures in
    a row; its successor is told which record it failed on, if one is to blame (``Suspect``)."""

    def __init__(self, config: Any, max_restarts: int) -> None:
        super().__init__(config, max_restarts)
        self.in_a_row = 0  # hand-overs since a worker last got further than the ones before it
        self._poisoned_seen = 0  # records skipped as poison when the last hand-over looked
        self._suspect: Suspect | None = None  # what the last successor was told

    def may_hand_over(self, ring: RingWriter) -> bool:
        """Yes while fewer than ``max_restarts`` failures are in a row. A row ends when the failed worker
        committed a batch it did not inherit, or skipped a poison record. (A batch it merely took over is
        no sign: with a disk that stays full, each successor re-commits its predecessor's pending batch,
        then fails.)"""
        if ring.closed:
            return False
        if ring.status(Status.BATCHES) > ring.status(Status.BATCHES_INHERITED):
            self.in_a_row = 0  # it got further than any worker before it: the failures before are another row
        poisoned = ring.status(Status.POISONED)
        if poisoned > self._poisoned_seen:
            self.in_a_row, self._poisoned_seen = 0, poisoned
        return self.in_a_row < self.max_restarts

    def successor_config(self, ring: RingWriter, reason: str) -> Any:
        """The config, told which record the failed worker failed on if one is to blame (none when it was
        killed, hung, or hit a disk error). A suspect blamed again by the worker that handled it alone is
        ``confirmed``: the next successor skips it."""
        failed_at = ring.status(Status.FAILED_AT)
        if not failed_at:
            return self.config
        first, end = failed_at - 1, ring.status(Status.FAILED_END)
        before = self._suspect
        confirmed = before is not None and not before.confirmed and before.covers(first)
        self._suspect = Suspect(first, max(end, failed_at), reason or "the worker failed", confirmed)
        return dataclasses.replace(self.config, suspect=self._suspect)

    def handed_over(self) -> str:
        self.count += 1
        self.in_a_row += 1
        return f"restart {self.count}, {self.in_a_row} of {self.max_restarts} in a row"


class FreshPerClip(Restarter):
    """``RestartPolicy.fresh_per_clip``: the owner replaces a broken worker and its ring (``Stream.restart``),
    ``max_restarts`` times in all."""

    def may_start_fresh(self) -> bool:
        return self.count < self.max_restarts

    def started_fresh(self) -> None:
        self.count += 1


_RESTARTERS: dict[Restart, type[Restarter]] = {
    Restart.HAND_OVER: HandOver,
    Restart.FRESH_PER_CLIP: FreshPerClip,
    Restart.NEVER: Never,
}
