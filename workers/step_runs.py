"""Steps handled in runs: many STEP records of one episode written out as columns (and the sections of a
single STEP record that are not a field's row as it is: ``write_rst``, ``write_info``).

When a STEP record has only fixed-size sections and an empty info (CartPole,
Atari, most Box/Discrete envs), consecutive steps of one episode look the
same in the ring but for their values. The worker loop takes them as one
``RecordRun`` (see ``RingReader.poll_run``), and ``StepRunWriter`` hands each
field its column at once: one copy or one ``writev`` per field and run, where
a step at a time costs several Python calls per field and step. The files it
writes are byte for byte those of the step-at-a-time path.
"""

from __future__ import annotations

import numpy as np

from envrec.contract.faults import FaultSpec
from envrec.contract.records import RecordLayout, TraceLayout
from envrec.formats.infos import encode_json, unpack_info
from envrec.formats.replay_fields import episode_keys, pop_snapshot
from envrec.formats.schema import decode_reward

from .batch_writer import BatchWriter
from .episode_fields import EpisodeFields
from .field_sinks import ArrayField, JsonField

__all__ = ["EMPTY_INFO_JSON", "StepRunWriter", "read_reset_meta", "write_info", "write_rst"]

EMPTY_INFO_JSON = b"{}"


def write_rst(fields: EpisodeFields, mv, batch: BatchWriter | None, ep: dict) -> None:
    """One step's reward, termination and truncation (its ``RST`` section) into their fields and ``ep``'s figures."""
    fields.rewards.write(mv[0:8], batch)
    fields.terms.write(mv[8:9], batch)
    fields.truncs.write(mv[9:10], batch)
    ep["return"] += decode_reward(mv[0:8])
    ep["terminated"] = mv[8] != 0
    ep["truncated"] = mv[9] != 0


def write_info(infos: JsonField, mv, ep: dict) -> None:
    """One step's (or reset's) packed info into the infos field, as JSON; a snapshot it carried
    (``envrec.formats.replay_fields``) taken out of it into ``ep``'s (the serializer's open episode's)."""
    if not len(mv):  # the common case, an empty info: its JSON is known
        infos.write_json_text(EMPTY_INFO_JSON)
        return
    try:
        info = unpack_info(mv)
    except Exception as exc:  # noqa: BLE001  (never let a strange info stop the recording)
        info = {"__envrec_error__": f"info could not be read: {exc!r}"}
    snapshot = pop_snapshot(info)
    if snapshot is not None:
        ep.setdefault("snapshots", []).append(snapshot)
    infos.write(encode_json(info))


def read_reset_meta(mv) -> dict:
    """A RESET's meta section: the episode record's ``seed``, ``options`` and replay keys."""
    meta = unpack_info(mv)
    return {"seed": meta.get("seed"), "options": encode_json(meta.get("options")), **episode_keys(meta)}


class StepRunWriter:
    """Writes the columns of a run of STEP records into an episode's fields."""

    def __init__(self, fields: EpisodeFields, arrays: list[ArrayField], record: RecordLayout) -> None:
        """Args:
            fields: the episode's fields, written column by column.
            arrays: the fields of the record's fixed sections after its ``RST``, in record order.
            record: the STEP records' layout (``TraceLayout.step_record``): only fixed sections and the info.
        """
        assert record.variable == 1 and record.fixed[1:] == tuple(f.row_bytes for f in arrays)
        self.fields = fields
        self.template = record.run_template()  # the info empty
        self.rst = record.offsets[0]
        self.columns = [(f, pos, f.row_bytes) for f, pos in zip(arrays, record.offsets[1:], strict=True)]

    @classmethod
    def for_layout(cls, layout: TraceLayout, fields: EpisodeFields, faults: FaultSpec) -> StepRunWriter | None:
        """A writer when steps can come in runs; None when they have Text sections, or when a fault is to be
        injected per record (it must see each one)."""
        sections = layout.step_sections()  # ("rst",), the leaves, ("infos",)
        leaves = [fields.sinks.get(k) for k in sections[1:-1]]
        arrays = [f for f in leaves if isinstance(f, ArrayField)]
        if len(arrays) != len(leaves) or faults.sees_each_record("record"):
            return None
        return cls(fields, arrays, layout.step_record())

    def write(self, rows: np.ndarray, batch: BatchWriter, ep: dict) -> None:
        """Write the run's ``rows`` (one per step) and update the episode's return and end flags."""
        fields, rst = self.fields, self.rst
        rewards = np.ascontiguousarray(rows[:, rst : rst + 8])  # one copy: for the file and for the return
        fields.rewards.write_rows(rewards, batch)
        fields.terms.write_rows(rows[:, rst + 8 : rst + 9], batch)
        fields.truncs.write_rows(rows[:, rst + 9 : rst + 10], batch)
        ret = ep["return"]
        for reward in rewards.view("<f8").ravel().tolist():
            ret += reward  # one by one, in order: the same float sum as step by step
        ep["return"] = ret
        ep["terminated"] = bool(rows[-1, rst + 8])
        ep["truncated"] = bool(rows[-1, rst + 9])
        for field, pos, size in self.columns:
            field.write_rows(rows[:, pos : pos + size], batch)
        fields.infos.write_json_repeated(EMPTY_INFO_JSON, len(rows))
