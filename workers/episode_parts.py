"""Episode parts: when an open episode is cut so that its batch can be committed (docs/format.md, "Episode parts").

An episode is cut when its bytes in the open batch reach ``batch_bytes``, or
when the open batch has held data longer than ``commit_interval``. The part
written so far becomes a record of its own (``"part": {"index", "first_step",
"continues": true}``), the batch is committed, and the next part starts the
next batch with a row 0 that repeats the last observation and info of the
part before it. That row is read back once per part from where it was
written (``ArrayField.last_row``, ``JsonField.last_item``) and kept in the
episode's state (``carry``) until the next part has it: a checkpoint taken
in between holds it, so a successor starts the next part just the same.

``EpisodeParts`` decides when to cut and carries the row over; the
serializer does the cutting (``Serializer._cut_part``).
"""

from __future__ import annotations

import base64
import enum
import math
import time

from envrec.formats.replay_fields import EPISODE_KEYS

from .batch_writer import BatchWriter
from .episode_fields import EpisodeFields
from .field_sinks import ArrayField

__all__ = ["TIME_CHECK_STEPS", "EpisodeParts", "IdleCommit", "episode_record"]

TIME_CHECK_STEPS = 64  # steps between two looks at the clock while records keep coming
INFO_ITEM_BYTES = 3  # what an empty info adds to its spill ("{}" and a comma): a step's JSON at least


class IdleCommit(enum.Enum):
    """What a commit that falls due while no record comes does with the open episode (``idle_action``)."""

    COMMIT = "commit"  # no episode is open: the batch is committed as it is
    CUT = "cut"  # the open episode is cut, the batch committed
    END_EPISODE = "end"  # its last step ended it (its reset is still to come): it is written whole, then committed
    LIFT_RESET = "lift"  # an episode just reset, no step yet, holds back whole ones: its reset row moves to the next batch
    WAIT = "wait"  # an episode with no step yet holds the batch: look again an interval later


def episode_record(ep: dict, length: int, ended_by: str | None, continues: bool) -> dict:
    """The scalar keys of an episode's record (or of one of its parts; ``ep``: the serializer's ``_ep``)."""
    ret = ep["return"]
    meta = {
        "episode_id": ep["episode_id"],
        "seed": ep.get("seed"),
        "options": ep.get("options"),
        "length": length,
        "return": ret if math.isfinite(ret) else None,
        "ended_by": None if continues else ended_by,
        "complete": not continues and ended_by in ("terminated", "truncated"),
    }
    if continues or ep.get("part"):  # an episode written in one piece has no "part" key at all
        meta["part"] = {"index": ep.get("part", 0), "first_step": ep.get("first_step", 0), "continues": continues}
    meta.update((k, ep[k]) for k in EPISODE_KEYS if ep.get(k))  # what replay needs, when it was taken
    return meta


class EpisodeParts:
    """When the open episode is to be cut, and the row it carries over to its next part.

    Args:
        fields: the episode's fields.
        obs_keys: the field keys of the observation's leaves, in record order.
        batch_bytes: an episode's bytes in one batch that make it a part.
        commit_interval: seconds an episode (or part) may run before it is cut, and whole episodes may wait in
            the open batch; None: no limit.
    """

    def __init__(self, fields: EpisodeFields, obs_keys: list[tuple], batch_bytes: int, commit_interval: float | None) -> None:
        self.fields = fields
        self.obs = [fields.sinks[k] for k in obs_keys]
        self.batch_bytes = batch_bytes
        self.interval = commit_interval
        self.opened_at = 0.0  # when the open batch was started (time.monotonic)
        self.episode_at = 0.0  # when the open episode (or its part) was started
        self._countdown = TIME_CHECK_STEPS
        raw = [f for f in fields.arrays if f.packer is None]  # their bytes: their rows' (N a step, and row 0)
        self._raw_step = sum(f.row_bytes for f in raw)
        self._raw_row0 = sum(f.row_bytes for f in raw if any(f is o for o in self.obs))
        self._packed = [f for f in fields.arrays if f.packer is not None]
        self._packers = [f.packer for f in fields.arrays if f.packer is not None]
        self._spills = [jf.spill for jf in fields.jsons]
        # what a step of a run adds to the episode's bytes until a chunk is compressed (its info: empty)
        self._step_bytes = self._raw_step + INFO_ITEM_BYTES

    # -- when ----------------------------------------------------------------
    def episode_bytes(self) -> int:
        """The open episode's bytes written so far (rows waiting in a chunk buffer not counted): looked at
        before each step, so counted from the rows where it can be."""
        n = self.fields.rewards.rows * self._raw_step + self._raw_row0
        for f in self._packed:
            n += f.stored
        for spill in self._spills:
            n += spill.tell()
        return n

    def full(self) -> bool:
        return self.episode_bytes() >= self.batch_bytes

    def steps_until_full(self) -> int:
        """How many steps of a run to write before looking again whether the episode is full (at least 1):
        where its bytes reach ``batch_bytes``, or sooner where a chunk is compressed (its stored size known
        only then), so a run is cut where steps one by one would be."""
        k = math.ceil((self.batch_bytes - self.episode_bytes()) / self._step_bytes)
        for packer in self._packers:
            k = min(k, packer.rows_per_chunk - packer.rows)
        return max(1, k)

    def batch_opened(self) -> None:
        self.opened_at = time.monotonic()
        self._countdown = TIME_CHECK_STEPS

    def episode_opened(self) -> None:
        self.episode_at = time.monotonic()

    def time_due(self, steps: int) -> bool:
        """Whether the open episode (its part) has run longer than the commit interval, so it is cut; the clock
        is read only every ``TIME_CHECK_STEPS`` steps (``steps``: how many are about to be written). An
        episode shorter than the interval is never cut by time: whole episodes before it wait for its end."""
        if self.interval is None:
            return False
        self._countdown -= steps
        if self._countdown > 0:
            return False
        self._countdown = TIME_CHECK_STEPS
        return time.monotonic() - self.episode_at >= self.interval

    def batch_due(self) -> bool:
        """Whether the open batch is older than the commit interval (looked at when an episode ends)."""
        return self.interval is not None and time.monotonic() - self.opened_at >= self.interval

    def due_in(self, batch: BatchWriter | None, episode_open: bool) -> float | None:
        """Seconds until a commit is due while no record comes: the open episode's cut, or the open batch's
        commit when no step of an episode is open; None without an interval or with nothing to commit."""
        if self.interval is None or batch is None:
            return None
        if episode_open and self.fields.rewards.rows:
            return self.episode_at + self.interval - time.monotonic()
        return self.opened_at + self.interval - time.monotonic() if batch.episodes else None

    def idle_action(self, batch: BatchWriter | None, episode_open: bool, ep: dict) -> IdleCommit:
        """What to do when ``due_in`` says the commit is due and no record came."""
        if episode_open and self.fields.rewards.rows:
            return IdleCommit.END_EPISODE if ep["terminated"] or ep["truncated"] else IdleCommit.CUT
        if batch is not None and batch.episodes:
            return IdleCommit.LIFT_RESET if episode_open else IdleCommit.COMMIT
        self.batch_opened()  # held back by an episode with no step yet
        return IdleCommit.WAIT

    # -- cutting -------------------------------------------------------------------
    def close_part(self, batch: BatchWriter, ep: dict) -> dict:
        """Write the open episode so far into ``batch`` as a part that continues; the episode's state for its
        next part (``ep``: the serializer's), holding the row carried over."""
        carry, length = self.read_carry(batch), self.fields.rewards.rows
        batch.write_episode(episode_record(ep, length, None, continues=True), self.fields)
        batch.continues = True
        self.fields.rewind()
        part, first_step = ep.get("part", 0) + 1, ep.get("first_step", 0) + length
        kept = {k: v for k, v in ep.items() if k not in EPISODE_KEYS}  # the reset's belong to part 0, snapshots to their part
        return {**kept, "return": 0.0, "part": part, "first_step": first_step, "carry": carry}

    def lift_reset(self, batch: BatchWriter, ep: dict) -> dict:
        """Take the open episode, reset but with no step yet, out of ``batch`` (its reset row carried to the next
        batch, as a part's row 0), so the whole episodes before it can be committed; its state, as ``close_part``'s."""
        carry = self.read_carry(batch)
        start = next((f.offset for f in self.fields.arrays if f.direct), batch.bin_size)
        batch.truncate_bin(min(start, batch.bin_size))
        self.fields.rewind()
        self.fields.start_episode(0)
        return {**ep, "carry": carry}

    # -- the row carried over ----------------------------------------------------
    def read_carry(self, batch: BatchWriter) -> dict:
        """The part's last observation and info, read back (JSON-ready: kept in checkpoints until used)."""
        obs = [
            base64.b64encode(f.last_row(batch)).decode("ascii") if isinstance(f, ArrayField) else f.last_item().decode("utf-8")
            for f in self.obs
        ]
        return {"obs": obs, "info": self.fields.infos.last_item().decode("utf-8")}

    def write_carry(self, carry: dict, batch: BatchWriter) -> None:
        """Row 0 of the next part: the observation and info ``read_carry`` read."""
        for f, value in zip(self.obs, carry["obs"], strict=True):
            if isinstance(f, ArrayField):
                f.write(base64.b64decode(value), batch)
            else:
                f.write_json_text(value.encode("utf-8"))
        self.fields.infos.write_json_text(carry["info"].encode("utf-8"))

    # -- checkpoints -------------------------------------------------------------
    def checkpoint_ep(self, ep: dict) -> dict:
        """The episode's state for a checkpoint, with what the JSON fields need to read their last item back."""
        return {**ep, "json_last": [jf.last_len for jf in self.fields.jsons]}

    def resume_ep(self, ep: dict) -> dict:
        """``checkpoint_ep`` undone (a successor's)."""
        ep = dict(ep)
        for jf, n in zip(self.fields.jsons, ep.pop("json_last", []), strict=False):
            jf.last_len = n
        return ep
