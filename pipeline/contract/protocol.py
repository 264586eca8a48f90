"""The contract between the env process and its workers, in the one module both sides import.

* Record kinds and status words: ``Kind`` and ``Status`` (with the records'
  byte layouts in ``envrec.contract.records``; the ring's own layout is ``envrec.contract.ring``).
* The report pipe: a worker sends ``(ERROR, traceback)`` before it raises
  ``Status.BROKEN``, and ``(DONE, summary)`` when it finished cleanly.
* Worker configs: what each role needs, built by the recorder and pickled
  into the worker's memory file at start (see ``envrec.supervision.launcher``).
* ``Handler`` / ``CheckpointingHandler``: the base class of the object a
  role's main builds, what the worker loop calls on it, and when the ring
  space of a handled record goes back to the env process (``ReleasePolicy``).
* ``signal_name``: how both sides name an exit status.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from ..formats.ffmpeg import VideoSettings
from .faults import NO_FAULT, FaultSpec
from .procinfo import signal_name
from .records import Kind, Status

if TYPE_CHECKING:  # annotations only: an encoder worker never imports what traces need (~45 ms at its start)
    from ..formats.compression import Compression
    from ..formats.trace_format import BatchEntry

__all__ = [
    "DONE",
    "ERROR",
    "CheckpointingHandler",
    "EncoderConfig",
    "Handler",
    "Kind",
    "ReleasePolicy",
    "RingGauge",
    "SerializerConfig",
    "Status",
    "StatusSink",
    "Suspect",
    "VectorSerializerConfig",
    "signal_name",
]

DONE = "done"  # (DONE, summary dict): the worker finished cleanly
ERROR = "error"  # (ERROR, traceback text): the worker failed; sent before Status.BROKEN is raised


StatusSink = Callable[[int, int], None]  # sets a status word (``Status``) of the ring: RingReader.set_status


def _no_status(index: int, value: int) -> None:
    """A handler driven outside a ring (the vector serializer's sub-serializers, tests) keeps no status."""


class RingGauge(Protocol):
    """What a handler sees of its ring (a ``RingReader``): its size, and how much of it is in use."""

    capacity: int

    def used_fraction(self) -> float:
        """The share of the ring the env process cannot write into now: written, not yet released."""
        ...


class _NoRing:
    """A handler driven outside a ring: nothing in use."""

    capacity = 0

    def used_fraction(self) -> float:
        return 0.0


def _nothing() -> None:
    """A handler driven outside a ring has no room to give back."""


class ReleasePolicy(Enum):
    """When the worker loop gives a handled record's room in the ring back to the env process: one per
    handler class (``Handler.release``), chosen there once."""

    HANDLED = "handled"  # once ``handle`` returned (the vector serializer)
    RELEASE_POINT = "release point"  # up to the handler's ``release_point`` (the encoder: frames ffmpeg has yet to read)
    CHECKPOINTED = "checkpointed"  # once a checkpoint covers it; on a failure the rest waits for a successor (the serializer)


class Handler(abc.ABC):
    """What a worker role's object is to the worker loop (``envrec.workers.loop``): one per worker process.

    The loop builds it as ``cls(cfg, status=...)``, then calls ``handle`` for
    each record (or run of records) until one returns True (the recording's
    CLOSE), then ``summary``. It calls ``finish(clean=False)`` when the env
    process is gone without a CLOSE, and ``abort`` after ``handle`` raised.

    Args:
        cfg: the role's config (``SerializerConfig``, ``VectorSerializerConfig``, ``EncoderConfig``).
        status: sets one of the ring's status words for the env process; None: none are kept.
    """

    release: ClassVar[ReleasePolicy] = ReleasePolicy.HANDLED

    def __init__(self, cfg: Any, status: StatusSink | None = None) -> None:
        self.cfg = cfg
        self._status: StatusSink = status or _no_status
        self.takes_runs = True  # False: records come one at a time, never as a run (``run_template``)
        # ReleasePolicy.RELEASE_POINT: gives the room up to ``release_point`` back at once if the env process
        # waits for room; set by the worker loop, called while a run is being handed over (its frames one by one)
        self.release_now: Callable[[], None] = _nothing
        self.ring: RingGauge = _NoRing()  # set by the worker loop: its ring's reader
        self.records_not_drained = 0  # left in the ring when the drain after a SIGTERM ran out of time (workers.loop)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # (CheckpointingHandler itself, being defined here, is not named yet)
        if cls.__module__ != __name__ and (cls.release is ReleasePolicy.CHECKPOINTED) != issubclass(cls, CheckpointingHandler):
            raise TypeError(f"{cls.__name__}: records are released once checkpointed by a CheckpointingHandler, and only by one")

    @abc.abstractmethod
    def handle(self, rec: Any, position: int) -> bool:
        """Consume one record (a ``RecordView``) or run of records (a ``RecordRun``); True once the
        recording is over (its CLOSE). ``position``: the ring position where it starts."""

    @abc.abstractmethod
    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        """Finalize what is open; ``clean`` is False when the env process died, ``terminated_by`` names
        the signal (``"SIGTERM"``) that ended the job when the worker got one before its env process went."""

    @abc.abstractmethod
    def abort(self, error: str) -> None:
        """Give up after a failure, keeping what was committed."""

    @abc.abstractmethod
    def summary(self) -> dict:
        """Figures for the env process, sent with DONE."""

    @property
    def run_template(self) -> np.ndarray | None:
        """The header of the records the loop may hand over as one run (``RecordLayout.run_template``), or
        None: one record at a time. It may change between records (a clip's frame size)."""
        return None

    def release_point(self, cursor: int) -> int:
        """How far the ring may be released (``ReleasePolicy.RELEASE_POINT``); ``cursor``: all the loop has read."""
        return cursor

    def idle_in(self) -> float | None:
        """The ring ran dry: seconds until the handler has work to do all the same (a commit that is due,
        <= 0: now, then the loop calls ``on_idle``), or None: nothing until the next record."""
        return None

    def on_idle(self, cursor: int) -> None:
        """Do what ``idle_in`` said was due; ``cursor``: every record before it is handled."""
        return


class CheckpointingHandler(Handler):
    """A handler whose successor can take over its ring: records are released only once a checkpoint
    covers them, and on a failure the worker exits and leaves the rest to a successor that resumes from
    its last checkpoint (``resume_cursor``)."""

    release = ReleasePolicy.CHECKPOINTED

    def __init__(self, cfg: Any, status: StatusSink | None = None) -> None:
        super().__init__(cfg, status)
        self.checkpointed = 0  # ring position the last checkpoint covers
        self.resume_cursor = 0  # where this worker starts reading: what its predecessor's checkpoint covers
        self.suspect: Suspect | None = None  # the record its predecessor failed on (from its config)

    @abc.abstractmethod
    def checkpoint_due(self, held_bytes: int, capacity: int) -> bool:
        """Whether to checkpoint now, with ``held_bytes`` of the ring's ``capacity`` read but not released."""

    @abc.abstractmethod
    def idle_checkpoint_in(self) -> float:
        """The ring ran dry: seconds until what was handled should be checkpointed (<= 0: now)."""

    @abc.abstractmethod
    def checkpoint(self, cursor: int, pending: BatchEntry | None = None) -> None:
        """Make what was handled durable; the records before ring position ``cursor`` may then be released."""

    @abc.abstractmethod
    def discard_checkpoint(self) -> None:
        """No successor can come (the env process is gone): the checkpoint has no reader left."""

    @abc.abstractmethod
    def quarantine(self, rec: Any, reason: str) -> None:
        """Skip ``rec``, a record that made this handler's predecessors fail every time: count and name it."""


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
    commit_interval: float | None = 5.0  # seconds a handled record may stay uncommitted (None: by size only)
    env: dict | None = None  # the manifest's "env": what replay needs to recreate the env (None: not known)
    # (st_dev, st_ino) of the folder the env process opened: a serializer (a successor too) that finds another
    # folder at ``folder`` (swapped for a symlink since) writes nothing (see envrec.formats.ownfolder)
    folder_id: tuple[int, int] | None = None
    # shipping is on: the ledger (envrec.formats.ship_ledger) max_bytes waits for
    ship_ledger: str | None = None


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
    faults: FaultSpec = NO_FAULT  # injected on purpose, for tests: at "start" only (see envrec.contract.faults)
    commit_interval: float | None = 5.0  # as SerializerConfig's
    folder_id: tuple[int, int] | None = None  # as SerializerConfig's
    ship_url: str | None = None  # shipping is on: each sub-env's budget waits for its ledger for this store
    # the sub-envs whose traces are made at the start (None: all); with ``indexed``, each record names its rows
    # (sections ``indices``, ``episodes``, ``keep`` first: envrec.record.sub_env_selection) and a sub-env first
    # named there gets its trace then
    sub_envs: tuple[int, ...] | None = None
    indexed: bool = False
    env: dict | None = None  # each sub-env trace's manifest "env" (envrec.record.sub_env_replay.describe_sub_envs)


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
    # (st_dev, st_ino) of the folder the env process opened: an encoder that finds another folder at ``folder``
    # (swapped for a symlink since) writes nothing (see envrec.formats.ownfolder)
    folder_id: tuple[int, int] | None = None
    ship_ledger: str | None = None  # shipping is on: the ledger max_bytes and keep_last_clips wait for
