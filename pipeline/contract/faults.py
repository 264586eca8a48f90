"""Faults injected on purpose, for tests and soak scripts: a picklable spec that travels to the worker.

A ``FaultSpec`` rides in a worker's config, so a fault takes the real path
(no monkeypatching across processes). ``ENVREC_FAULTS`` (JSON of the same
fields) sets one for recorders built without one, for tests that run the env
process as a child. The worker calls ``point(name)`` at named places:

``start``               once, after the worker attached to its ring and before it opens its output
``record``              before each record is handled
``commit:bin-written``  a batch's .bin written, not yet fsynced
``commit:bin``          the .bin fsynced and in place, the .json not yet
``commit:json``         both batch files in place, the folder not yet fsynced
``commit:manifest``     the batch committed, the manifest not yet replaced
``commit:done``         the manifest replaced and its folder fsynced
``commit:segment``      a full manifest segment written to its own file, the head not yet replaced
``evict:manifest``      a disk budget's eviction: the manifest no longer names the batches, their files remain
``evict:files``         after each evicted batch's files are deleted
``part:cut``            an episode cut: its part written into the open batch, the batch not yet committed
``part:next``           the cut committed, the next part's row 0 written into a new batch no checkpoint names yet
``clip:open``           (encoder) a clip's ffmpeg has its output (the video, opened by the worker), no frame yet
``clip:evict``          (encoder) a clip complete, its recorder's clip budget not yet enforced

and the fault fires at the ``after``-th visit of ``at`` (``how``: ``raise``
an exception, ``exit`` via ``os._exit(3)``, ``kill`` itself with SIGKILL, or
``hang``). ``sleep_per_record_s`` slows the worker down (a throttled consumer).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["FAULTS_ENV_VAR", "FaultSpec", "from_env"]

FAULTS_ENV_VAR = "ENVREC_FAULTS"
HANG_NAP_S = 3600.0  # a hang sleeps until it is killed, in naps this long (the nap's length does not matter)


class InjectedFault(RuntimeError):
    """The exception a ``how="raise"`` fault raises."""


@dataclass(frozen=True)
class FaultSpec:
    at: str | None = None
    after: int = 1
    how: str = "raise"
    sleep_per_record_s: float = 0.0

    def __post_init__(self) -> None:
        if self.how not in ("raise", "exit", "kill", "hang"):
            raise ConfigError(f"FaultSpec.how must be raise, exit, kill or hang, not {self.how!r}")

    def injector(self) -> Injector:
        return Injector(self)

    def sees_each_record(self, *points: str) -> bool:
        """Whether the fault must see records one at a time: it is at one of ``points`` (visited per
        record) or it throttles each record. A worker then takes no runs of records."""
        return self.at in points or bool(self.sleep_per_record_s)


class Injector:
    """The worker-side state of a fault spec: counts visits and fires."""

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self.visits: dict[str, int] = {}

    def point(self, name: str) -> None:
        spec = self.spec
        if name == "record" and spec.sleep_per_record_s:
            time.sleep(spec.sleep_per_record_s)
        if spec.at != name:
            return
        n = self.visits[name] = self.visits.get(name, 0) + 1
        if n != spec.after:
            return
        if spec.how == "raise":
            raise InjectedFault(f"injected fault at {name} (visit {n})")
        if spec.how == "exit":
            os._exit(3)
        if spec.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang
            time.sleep(HANG_NAP_S)


NO_FAULT = FaultSpec()


def from_env() -> FaultSpec | None:
    """The spec in ``ENVREC_FAULTS``, if any."""
    text = os.environ.get(FAULTS_ENV_VAR)
    return FaultSpec(**json.loads(text)) if text else None
