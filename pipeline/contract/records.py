"""The records a trace stream sends through its ring, shared by both sides.

Kinds and their sections, in order (fixed-size sections first, so the env side
can write them at offsets computed once; then the variable-size ones):

* ``RESET`` (episode, step=0): the fixed observation leaves, the Text
  observation leaves, the pickled ``{"seed", "options"}`` of the reset
  (empty when both are None), the pickled info.
* ``STEP`` (episode, step=1..N): one 10-byte section of reward (f8),
  terminated (b1) and truncated (b1) packed together (``RST``: first, so the
  env side packs it with the record's header in one call), the fixed action
  leaves, the fixed observation leaves, the Text action leaves, the Text
  observation leaves, the info.
* ``CLOSE``: no sections; the recorder is closing, finalize and exit.

The vector trace stream's kinds (one record per vector call, each batched
array copied once; the worker splits them per sub-env):

* ``VRESET``: the reset mask (N x b1), each batched observation leaf, the
  pickled ``{"seed", "options"}`` with the replay fields ``rng`` and ``rng_next``
  (``{sub_env: np_random state}``, see ``envrec.record.sub_env_replay``), the
  pickled vector info.
* ``VSTEP``: each batched action leaf, each batched observation leaf,
  rewards (N x f8), terminations (N x b1), truncations (N x b1), the
  pickled vector info, the pickled ``{sub_env: np_random state}`` read after
  the step for the sub-envs whose episode ended (empty when none was read).

With ``sub_envs=`` (``VectorSerializerConfig.indexed``) both start with three
sections naming their rows (sub-env indices, episode counts, keep flags), and
their batched sections hold those rows only.

The video stream's kinds:

* ``CLIP_START``: one section, the clip's JSON description (name, fps, episode, kind).
* ``FRAME`` (episode, step): ``FRAME_SHAPE`` (height, width, channels), then the pixels (uint8, C order).
* ``TEXT_FRAME`` (episode, step): the frame's text, UTF-8.
* ``CLIP_BROKEN``: one section, why the env side stopped the clip (a bad frame).
* ``CLIP_END``: one section, JSON of what the env side knows (frames it dropped).

Leaves are those of ``envrec.formats.schema.leaves`` for the observation and action
spaces, in that order. Where each section of a FRAME, STEP or RESET record lies
is a ``RecordLayout`` (``frame_layout``, ``TraceLayout.step_record``,
``TraceLayout.reset_record``): the env side's packer writes by it
(``envrec.record.packer``), the worker reads runs of records by it
(``envrec.workers.step_runs``, ``envrec.workers.encoder``).

The status words (``ring.STATUS_WORDS``) a worker keeps up to date for the
env process are listed in ``Status``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from ..formats.schema import Leaf, leaves
from .ring import REC_HEAD_BYTES, align, record_size
from .ring_reader import run_template

__all__ = ["FRAME_SHAPE", "RST", "Kind", "RecordLayout", "Status", "TraceLayout", "frame_layout"]

RST = struct.Struct("<d??")  # reward, terminated, truncated: one section, written by one call
FRAME_SHAPE = struct.Struct("<III")  # height, width, channels of a video frame


class Kind(IntEnum):
    RESET = 1
    STEP = 2
    CLOSE = 3
    CLIP_START = 10
    FRAME = 11
    TEXT_FRAME = 12
    CLIP_BROKEN = 13
    CLIP_END = 14
    VRESET = 20
    VSTEP = 21


class Status(IntEnum):
    """Indices of the status words a worker keeps up to date for the env process.

    The first four mean the same for every stream; the rest belong to one stream.
    """

    READY = 0  # 1 once the worker has attached and opened its output
    BROKEN = 1  # 1 once the worker has failed; records are then discarded
    DISCARDED = 2  # records discarded because the stream is broken
    RECORDS = 3  # records handled
    # trace stream
    STEPS = 4  # step records handled
    EPISODES = 5  # episodes finished (written into a batch)
    BATCHES = 6  # batches committed
    BYTES = 7  # bytes committed (batch files)
    STEPS_COMMITTED = 8  # steps inside committed batches
    # video stream
    CLIPS = 9  # clips finished
    FRAMES_WRITTEN = 10  # frames handed to an encoder
    FRAMES_DROPPED = 11  # frames the worker could not encode (broken clip, bad frame)
    ENCODER_PID = 12  # pid of the running ffmpeg, 0 when none
    CLIPS_BROKEN = 13  # clips that ended broken
    HEARTBEAT = 14  # bumped at least every PARENT_CHECK_S by a live worker loop (hang detection)
    # disk budgets and commit cost
    COMMITS = 15  # batch commits (trace stream)
    COMMIT_US = 16  # microseconds spent in those commits, in total (batch files, manifest, eviction)
    EVICTED = 17  # batches (trace) or clips (video) deleted to keep the folder within max_bytes / keep_last_clips
    BYTES_EVICTED = 18  # bytes of files so deleted
    CLIPS_DISCARDED = 19  # clips deleted because keep_if said so (video stream)
    # poison records (a worker that hands over, see envrec.workers.loop)
    FAILED_AT = 20  # 1 + ring position of the record (or run) whose handling failed; 0 when none
    FAILED_END = 21  # ring position just past that record or run
    POISONED = 22  # records skipped because they made a worker fail every time (quarantined)
    # restarts in a row (a trace serializer that hands over, see envrec.supervision.stream)
    BATCHES_INHERITED = 23  # batches committed when this worker took over its ring (a predecessor's pending one included)
    # shipping (a trace recorder with ship_to)
    HELD_FOR_SHIPPING = 24  # bytes beyond max_bytes kept because their batches are not shipped yet (at the last commit)
    # video stream
    STANDBY_PID = 25  # pid of the ffmpeg started ahead for the next clip, 0 when none


@dataclass(frozen=True)
class RecordLayout:
    """Where the sections of one kind of record lie in the ring (see ``envrec.contract.ring`` for a record's header).

    Its fixed-size sections come first, each at an offset from the record's start
    known once for all records of the layout; then ``variable`` sections whose
    sizes each record says. The first fixed section is a record's *lead* where it
    has one (a STEP's ``RST``, a FRAME's ``FRAME_SHAPE``): the env side packs
    it with the header in one call.

    Args:
        kind: the records' ``Kind``.
        fixed: the sizes of the fixed sections, in record order.
        variable: how many variable-size sections follow them.
    """

    kind: int
    fixed: tuple[int, ...]
    variable: int = 0
    offsets: tuple[int, ...] = field(init=False)  # where each fixed section starts, from the record's start

    def __post_init__(self) -> None:
        pos, offsets = self.head_bytes, []
        for size in self.fixed:
            offsets.append(pos)
            pos += align(size)
        object.__setattr__(self, "offsets", tuple(offsets))

    @property
    def nsections(self) -> int:
        return len(self.fixed) + self.variable

    @property
    def head_bytes(self) -> int:
        """The header and its section sizes, padded to the ring's alignment: where the first section starts."""
        return align(REC_HEAD_BYTES + 4 * self.nsections)

    @property
    def fixed_bytes(self) -> int:
        """Where the variable sections start: the size of a record whose variable sections are all empty."""
        return record_size([*self.fixed, *[0] * self.variable])

    def run_template(self) -> np.ndarray:
        """The header words of the records a worker may take as a run (``RingReader.poll_run``): those of
        this layout whose variable sections are all empty."""
        return run_template(self.kind, [*self.fixed, *[0] * self.variable])


def frame_layout(shape: tuple[int, int, int]) -> RecordLayout:
    """A FRAME record of a (height, width, channels) frame: its ``FRAME_SHAPE``, then its pixels."""
    return RecordLayout(Kind.FRAME, (FRAME_SHAPE.size, shape[0] * shape[1] * shape[2]))


@dataclass(frozen=True)
class TraceLayout:
    """Where each field sits among a record's sections."""

    obs_leaves: tuple[Leaf, ...]
    act_leaves: tuple[Leaf, ...]

    @classmethod
    def from_specs(cls, obs_spec: dict, act_spec: dict) -> TraceLayout:
        return cls(tuple(leaves(obs_spec)), tuple(leaves(act_spec)))

    def step_record(self) -> RecordLayout:
        """Where the sections of a STEP record lie: ``RST``, the fixed action and observation leaves; then the
        Text leaves and the info (in the order of ``step_sections``)."""
        arrays = [leaf.nbytes for lvs in (self.act_leaves, self.obs_leaves) for leaf in lvs if leaf.kind == "array"]
        texts = sum(leaf.kind == "text" for leaf in self.act_leaves + self.obs_leaves)
        return RecordLayout(Kind.STEP, (RST.size, *arrays), texts + 1)

    def reset_record(self) -> RecordLayout:
        """Where the sections of a RESET record lie: the fixed observation leaves; then the Text leaves, the
        reset's meta and the info (in the order of ``reset_sections``)."""
        arrays = [leaf.nbytes for leaf in self.obs_leaves if leaf.kind == "array"]
        texts = sum(leaf.kind == "text" for leaf in self.obs_leaves)
        return RecordLayout(Kind.RESET, tuple(arrays), texts + 2)

    def _keyed(self, root: str, lvs: tuple[Leaf, ...], kind: str) -> list[tuple]:
        return [(root, *leaf.path) for leaf in lvs if leaf.kind == kind]

    def step_sections(self) -> list[tuple]:
        """The field each section of a STEP record belongs to, in record order."""
        return (
            [("rst",)]
            + self._keyed("actions", self.act_leaves, "array")
            + self._keyed("observations", self.obs_leaves, "array")
            + self._keyed("actions", self.act_leaves, "text")
            + self._keyed("observations", self.obs_leaves, "text")
            + [("infos",)]
        )

    def reset_sections(self) -> list[tuple]:
        """The field each section of a RESET record belongs to, in record order."""
        return (
            self._keyed("observations", self.obs_leaves, "array")
            + self._keyed("observations", self.obs_leaves, "text")
            + [("meta",), ("infos",)]
        )
