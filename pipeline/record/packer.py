"""Env side: write trace records straight into the ring, one copy per array.

A ``RecordPacker`` knows, once and for all, where each fixed-size section of its
kind of record lies (its ``RecordLayout``, from ``envrec.contract.records``:
the worker reads the records by the same one); per call it reserves the record,
lets each leaf codec check and copy its value in place, appends the few
variable-size sections (infos, Text), then writes the header, the section sizes
and the record's scalar ``lead`` section (a STEP's reward and flags) with one
``pack_into``, and publishes. A value that fails its check raises
``RecordError`` before anything is published: the reservation is simply not
used.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ..contract.records import FRAME_SHAPE, RST, RecordLayout, TraceLayout, frame_layout
from ..contract.ring import REC_HEAD, REC_HEAD_BYTES, RingWriter
from ..formats.schema import LeafCodec, compile_flattener, int_out_of_range, leaf_codecs, reward_value

__all__ = ["DiscreteStepPacker", "FrameRecord", "RecordPacker", "ResetRecord", "StepRecord", "TracePacker", "frame_packer"]


class RecordPacker:
    """Writes one kind of record: an optional scalar lead section, fixed sections at precomputed offsets, then
    variable sections."""

    def __init__(
        self, layout: RecordLayout, puts: list[Callable], lead: struct.Struct | None = None, lead_sections: int = 1
    ) -> None:
        """Args:
            layout: where the record's sections lie (``envrec.contract.records``), its lead section first if it has one.
            puts: for each fixed section after the lead, ``put(value, buf, offset)`` that checks a value and copies it in place.
            lead: the lead's struct, packed with the header: the layout's first ``lead_sections`` fixed sections,
                their padding included.
            lead_sections: how many fixed sections the lead covers.
        """
        n_lead = lead_sections if lead is not None else 0
        assert len(puts) + n_lead == len(layout.fixed)
        assert lead is None or lead.size == layout.offsets[n_lead - 1] + layout.fixed[n_lead - 1] - layout.offsets[0]
        self.kind = layout.kind
        self.nsections = layout.nsections
        pad = layout.head_bytes - (REC_HEAD_BYTES + 4 * self.nsections)
        lead_format = lead.format.lstrip("<") if lead is not None else ""
        # The record header, the section sizes, padding to 8 bytes and the lead section: packed by one call.
        self._head = struct.Struct(f"{REC_HEAD.format}{self.nsections}I{pad}x{lead_format}")
        self.fixed_bytes = layout.fixed_bytes
        self._fns = tuple(puts)
        self._offs = layout.offsets[n_lead:]
        self._fixed_sizes = layout.fixed

    def write(self, ring: RingWriter, episode: int, step: int, values: list, variable: list, lead: tuple = ()) -> bool:
        """Write one record; False if the ring's policy dropped it. RecordError leaves nothing published."""
        fixed = self.fixed_bytes
        n = fixed
        for v in variable:
            n += (len(v) + 7) & -8
        off = ring.reserve(n)
        if off < 0:
            return False
        data = ring.data
        for put, o, x in zip(self._fns, self._offs, values, strict=True):
            put(x, data, off + o)
        pos = off + fixed
        sizes = []
        for v in variable:
            k = len(v)
            sizes.append(k)
            if k:
                data[pos : pos + k] = v
                pos += (k + 7) & -8
        self._head.pack_into(data, off, n, self.kind, self.nsections, episode, step, *self._fixed_sizes, *sizes, *lead)
        ring.publish()
        return True

    def write_single(self, ring: RingWriter, episode: int, step: int, value, lead: tuple) -> bool:
        """``write`` for a record of one fixed section after its lead and nothing else (a video FRAME)."""
        n = self.fixed_bytes
        off = ring.reserve(n)
        if off < 0:
            return False
        data = ring.data
        self._fns[0](value, data, off + self._offs[0])
        self._head.pack_into(data, off, n, self.kind, self.nsections, episode, step, *self._fixed_sizes, *lead)
        ring.publish()
        return True

    def write_one_each(self, ring: RingWriter, episode: int, step: int, a, b, info: bytes, lead: tuple) -> bool:
        """``write`` for a STEP of one action leaf and one observation leaf after its ``RST`` lead, and the info:
        the common STEP (a Box action; ``DiscreteStepPacker`` for a Discrete one), without the loops and lists."""
        k = len(info)
        n = self.fixed_bytes + ((k + 7) & -8)
        off = ring.reserve(n)
        if off < 0:
            return False
        data = ring.data
        put_a, put_b = self._fns
        off_a, off_b = self._offs
        put_a(a, data, off + off_a)
        put_b(b, data, off + off_b)
        if k:
            pos = off + self.fixed_bytes
            data[pos : pos + k] = info
        s0, s1, s2 = self._fixed_sizes
        reward, terminated, truncated = lead
        # every argument named: a call with * would build a list and a tuple per step
        self._head.pack_into(data, off, n, self.kind, self.nsections, episode, step, s0, s1, s2, k, reward, terminated, truncated)
        ring.publish()
        return True


class DiscreteStepPacker(RecordPacker):
    """STEP records of a Discrete action and one fixed observation leaf (CartPole's, Atari's): the action is
    packed with the header and the reward and flags by one ``pack_into``, the observation copied in place.

    Its ``write_one_each`` repeats the base's few lines of reservation rather than calling a shared helper:
    the path runs once a step, and a call is what this class saves.
    """

    def __init__(self, layout: RecordLayout, action: LeafCodec, put_obs: Callable) -> None:
        """Args:
            layout: the STEP's layout (``RST``, the action's 8 bytes, the observation, the info).
            action: the action's codec (its ``to_int`` checks a value).
            put_obs: the observation codec's ``put``.
        """
        pad = layout.offsets[1] - layout.offsets[0] - RST.size
        super().__init__(layout, [put_obs], struct.Struct(f"{RST.format}{pad}xq"), lead_sections=2)
        assert action.to_int is not None  # a Discrete leaf's codec
        self._to_int, self._where = action.to_int, action.where
        self._put_obs, self._off_obs = put_obs, self._offs[0]
        self._pack_into = self._head.pack_into
        assert len(self._fixed_sizes) == 3 and self.nsections == 4  # RST, action, observation; the info

    def write_one_each(self, ring: RingWriter, episode: int, step: int, a, b, info: bytes, lead: tuple) -> bool:
        """``RecordPacker.write_one_each`` with the action ``a`` packed in the lead."""
        a = a if type(a) is int else self._to_int(a)
        k = len(info)
        n = self.fixed_bytes + ((k + 7) & -8)
        off = ring.reserve(n)
        if off < 0:
            return False
        data = ring.data
        self._put_obs(b, data, off + self._off_obs)
        if k:
            pos = off + self.fixed_bytes
            data[pos : pos + k] = info
        s0, s1, s2 = self._fixed_sizes
        reward, terminated, truncated = lead
        try:
            self._pack_into(data, off, n, self.kind, 4, episode, step, s0, s1, s2, k, reward, terminated, truncated, a)
        except struct.error:
            if -(1 << 63) <= a < 1 << 63:
                raise
            raise int_out_of_range(self._where, a) from None
        ring.publish()
        return True


class TracePacker:
    """RESET and STEP records of one (observation space, action space) pair."""

    def __init__(self, obs_spec: dict, act_spec: dict) -> None:
        obs = leaf_codecs(obs_spec, "observation")
        act = leaf_codecs(act_spec, "action")
        self._flat_obs = compile_flattener(obs_spec, "observation")
        self._flat_act = compile_flattener(act_spec, "action")
        self._obs_text = [c.size is None for c in obs]
        self._act_text = [c.size is None for c in act]
        self._has_text = any(self._obs_text) or any(self._act_text)
        self._obs_enc = [c.encode for c in obs if c.size is None]
        self._act_enc = [c.encode for c in act if c.size is None]
        put_obs: list[Callable] = [c.put for c in obs if c.put is not None]
        put_act: list[Callable] = [c.put for c in act if c.put is not None]
        layout = TraceLayout.from_specs(obs_spec, act_spec)
        step = layout.step_record()
        assert step.fixed[1:] == tuple(c.size for c in act + obs if c.put is not None)  # the codecs write what it says
        # One leaf each (no Dict, Tuple or Text): the values are the leaves, no flattening needed.
        self.single_leaves = act_spec["type"] not in ("Dict", "Tuple", "Text") and obs_spec["type"] not in ("Dict", "Tuple", "Text")
        if self.single_leaves and act_spec["type"] == "Discrete":
            self.step: RecordPacker = DiscreteStepPacker(step, act[0], put_obs[0])
        else:
            self.step = RecordPacker(step, put_act + put_obs, lead=RST)
        self.reset = RecordPacker(layout.reset_record(), put_obs)

    def min_step_bytes(self) -> int:
        """The size of the smallest possible STEP record (empty texts and info)."""
        return self.step.fixed_bytes

    def _split(self, values: list, is_text: list[bool], encoders: list) -> tuple[list, list]:
        fixed = [v for v, t in zip(values, is_text, strict=True) if not t]
        texts = [enc(v) for enc, v in zip(encoders, (v for v, t in zip(values, is_text, strict=True) if t), strict=True)]
        return fixed, texts

    def write_step(self, ring, episode, step, action, observation, reward, terminated, truncated, info: bytes) -> bool:
        lead = (reward if type(reward) is float else reward_value(reward), terminated, truncated)
        if self.single_leaves:
            return self.step.write_one_each(ring, episode, step, action, observation, info, lead)
        acts = self._flat_act(action)
        obs = self._flat_obs(observation)
        if not self._has_text:
            return self.step.write(ring, episode, step, [*acts, *obs], [info], lead)
        a_fixed, a_text = self._split(acts, self._act_text, self._act_enc)
        o_fixed, o_text = self._split(obs, self._obs_text, self._obs_enc)
        return self.step.write(ring, episode, step, [*a_fixed, *o_fixed], [*a_text, *o_text, info], lead)

    def write_reset(self, ring, episode, observation, meta: bytes, info: bytes) -> bool:
        obs = self._flat_obs(observation)
        o_fixed, o_text = self._split(obs, self._obs_text, self._obs_enc)
        return self.reset.write(ring, episode, 0, o_fixed, [*o_text, meta, info])


def frame_packer(shape: tuple[int, int, int]) -> RecordPacker:
    """FRAME records of one (height, width, channels) shape: ``write_single(ring, episode, step, frame,
    shape)`` with a uint8 array of that many bytes (checked by the caller)."""
    nbytes = shape[0] * shape[1] * shape[2]

    def put_pixels(frame, buf, off: int) -> None:
        if frame.flags.c_contiguous:
            buf[off : off + nbytes] = frame.data.cast("B")
        else:  # a view (flipped, strided, Fortran order): still one copy, laid out in C order in the ring
            np.copyto(np.frombuffer(buf, np.uint8, nbytes, off).reshape(frame.shape), frame)

    return RecordPacker(frame_layout(shape), [put_pixels], lead=FRAME_SHAPE)


@dataclasses.dataclass(slots=True)
class StepRecord:
    """A trace STEP for ``Stream.send``, written in place by its recorder's ``TracePacker``.

    Args:
        packer: the recorder's packer (its spaces' layout).
        episode: the episode's number in this recording.
        step: the step's number in the episode, from 1.
        action, observation, reward, terminated, truncated: as ``env.step`` took and returned them.
        info: the step's info, packed (``envrec.formats.infos.pack_info``), or b"".
    """

    packer: TracePacker
    episode: int
    step: int
    action: Any
    observation: Any
    reward: Any
    terminated: bool
    truncated: bool
    info: bytes

    def write_to(self, ring: RingWriter) -> bool:
        packer = self.packer
        if packer.single_leaves:  # the common case, one call layer fewer (it runs per step)
            reward = self.reward
            lead = (reward if type(reward) is float else reward_value(reward), self.terminated, self.truncated)
            return packer.step.write_one_each(ring, self.episode, self.step, self.action, self.observation, self.info, lead)
        return packer.write_step(
            ring, self.episode, self.step, self.action, self.observation, self.reward, self.terminated,
            self.truncated, self.info,
        )


@dataclasses.dataclass(slots=True)
class ResetRecord:
    """A trace RESET for ``Stream.send``, written in place by its recorder's ``TracePacker``.

    Args:
        packer: the recorder's packer (its spaces' layout).
        episode: the episode's number in this recording.
        observation: the reset's observation.
        meta: the reset's seed, options and replay fields, packed, or b"".
        info: the reset's info, packed (``envrec.formats.infos.pack_info``), or b"".
    """

    packer: TracePacker
    episode: int
    observation: Any
    meta: bytes
    info: bytes

    def write_to(self, ring: RingWriter) -> bool:
        return self.packer.write_reset(ring, self.episode, self.observation, self.meta, self.info)


@dataclasses.dataclass(slots=True)
class FrameRecord:
    """A video FRAME for ``Stream.send``, written in place by its clip's ``frame_packer``.

    Args:
        packer: the clip's frame packer (its frame shape).
        episode: the clip's episode id (0 when none).
        step: the frame's step.
        frame: a uint8 array of the packer's shape (checked by the caller).
        shape: the frame's (height, width, channels).
    """

    packer: RecordPacker
    episode: int
    step: int
    frame: Any
    shape: tuple

    def write_to(self, ring: RingWriter) -> bool:
        return self.packer.write_single(ring, self.episode, self.step, self.frame, self.shape)
