"""The contract between the env process and its workers, in the one module both sides import.

* Record kinds and status words: ``Kind`` and ``Status`` (with the records'
  byte layouts in ``envrec.contract.records``; the ring's own layout is ``envrec.contract.ring``).
* The report pipe: a worker sends ``(ERROR, traceback)`` before it raises
  ``Status.BROKEN``, and ``(DONE, summary)`` when it finished cleanly.
* Worker configs: what each role needs, built by the recorder and pickled
  into the worker's memory file at start (see ``envrec.supervision.launcher``).
* ``Handler`` / ``CheckpointingHandler``: what the worker loop calls on the
  object a role's main builds.
* ``signal_name``: how both sides name an exit status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..formats.compression import Compression
from ..formats.ffmpeg import VideoSettings
from ..formats.trace_format import BatchEntry
from .faults import NO_FAULT, FaultSpec
from .procinfo import signal_name
from .records import Kind, Status

__all__ = [
    "DONE",
    "ERROR",
    "CheckpointingHandler",
    "EncoderConfig",
    "Handler",
    "Kind",
    "SerializerConfig",
    "Status",
    "Suspect",
    "VectorSerializerConfig",
    "signal_name",
]

DONE = "done"  # (DONE, summary dict): the worker finished cleanly
ERROR = "error"  # (ERROR, traceback text): the worker failed; sent before Status.BROKEN is raised


class Handler(Protocol):
    """What a worker role's object offers the worker loop (``envrec.workers.entry``)."""

    def handle(self, rec: Any) -> bool:
        """Consume one record; True once the recording is over (its CLOSE)."""
        ...

    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        """Finalize what is open; ``clean`` is False when the env process died, ``terminated_by`` names
        the signal (``"SIGTERM"``) that ended the job when the worker got one before its env process went."""
        ...

    def abort(self, error: str) -> None:
        """Give up after a failure, keeping what was committed."""
        ...

    def summary(self) -> dict:
        """Figures for the env process, sent with DONE."""
        ...


class CheckpointingHandler(Handler, Protocol):
    """A handler whose successor can take over its ring (``hands_over``): records are released only
    once a checkpoint covers them."""

    hands_over: bool
    position: int  # ring position of the record being handled (set by the loop)
    checkpointed: int  # ring position the last checkpoint covers
    resume_cursor: int  # where a successor starts reading
    suspect: Suspect | None  # the record its predecessor failed on (from its config)

    def checkpoint_due(self, held_bytes: int, capacity: int) -> bool: ...

    def idle_checkpoint_in(self) -> float: ...

    def checkpoint(self, cursor: int, pending: BatchEntry | None = None) -> None: ...

    def discard_checkpoint(self) -> None: ...

    def quarantine(self, rec: Any, reason: str) -> None:
        """Skip ``rec``, a record that made this handler's predecessors fail every time: count and name it."""
        ...


@dataclass(frozen=True)
class Suspect:
    """A record (or run of records) whose handling made a worker fail, for its successor: ring
    positions ``first`` to ``end``. ``confirmed``: a successor failed at ``first`` again, so the record
    there is poison and is skipped; else the successor checkpoints before each record of the range
    and tries again, so that a second failure pins the one record down."""

    first: int
    end: int
    reason: str  # the last line of the failure's traceback
    confirmed: bool = False

    def covers(self, position: int) -> bool:
        return self.first <= position < self.end


@dataclass(frozen=True)
class SerializerConfig:
    """What the serializer needs to know; built by the recorder, pickled at spawn."""

    folder: str
    prefix: str
    observation_space: dict
    action_space: dict
    batch_bytes: int = 5_000_000
    env_id: str | None = None
    settings: dict = field(default_factory=dict)
    resume: bool = False  # a restarted serializer: go on from the manifest a dead one left
    faults: FaultSpec = NO_FAULT  # injected on purpose, for tests (see envrec.contract.faults)
    checkpoints: bool = True  # off where no successor can take over (the vector serializer's sub-writers)
    compression: Compression | None = None  # arrays compressed in chunks (see envrec.formats.compression)
    max_bytes: int | None = None  # disk budget: the oldest batches are evicted beyond it
    suspect: Suspect | None = None  # a successor's: the record its predecessor failed on


@dataclass(frozen=True)
class VectorSerializerConfig:
    folder: str
    prefix: str
    num_envs: int
    autoreset_mode: str  # "NextStep", "SameStep" or "Disabled"
    observation_space: dict
    action_space: dict
    batch_bytes: int = 5_000_000
    env_id: str | None = None
    settings: dict = field(default_factory=dict)
    compression: Compression | None = None
    max_bytes: int | None = None


@dataclass(frozen=True)
class EncoderConfig:
    folder: str
    ffmpeg: str
    backend: str
    settings: VideoSettings = field(default_factory=VideoSettings)
    env_id: str | None = None
    faults: FaultSpec = NO_FAULT  # injected on purpose, for tests (see envrec.contract.faults)
    recorder: str = ""  # the recorder's id, in every clip's metadata (its successors find its clips by it)
    max_bytes: int | None = None  # disk budget of the recorder's clips (see clip_budget)
    keep_last_clips: int | None = None
