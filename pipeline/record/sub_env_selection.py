"""Which sub-envs of a vector env a trace records, step by step (``RecordVectorTrace(sub_envs=...)``).

``sub_envs`` is a list of sub-env indices (recorded from the first reset on)
or a picker, ``pick(indices) -> chosen``, asked with the sub-envs whose
next episode is to be decided (all of them at the first reset, then those
whose episode just ended, or that a ``reset_mask`` reset) and answering with
the indices to record for that episode (or a boolean mask as long as its
argument). The recorder then copies only the rows of recorded sub-envs into
its ring: the cost follows what is recorded, not ``num_envs``.

Each record of such a trace carries three more sections, one row per sub-env
it holds: ``indices`` (int64, the sub-env of each row), ``episodes`` (int64,
the sub-env's episode count, counted over all its episodes, recorded or not)
and ``keep`` (bool: whether the sub-env's *next* episode is recorded, when
its episode ends in this record). The vector serializer cuts each sub-env's
episodes from them (``envrec.workers.vector_serializer``).

A fixed list tracks only its sub-envs (their flags are the only ones read);
a picker tracks all of them (it reads every sub-env's done flags, one byte
each, to know whose episode ended).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, RecordError

__all__ = ["Picker", "RowPlan", "SubEnvSelection"]

Picker = Callable[[np.ndarray], Iterable[int] | np.ndarray]


@dataclass(frozen=True)
class RowPlan:
    """The rows one record holds: their sub-envs, episode counts and whether each one's next episode is recorded."""

    rows: np.ndarray  # int64 sub-env indices, ascending
    episodes: np.ndarray  # int64
    keep: np.ndarray  # bool
    positions: np.ndarray  # where the rows lie among the tracked sub-envs (``flag_rows()``)

    def sections(self) -> list[memoryview]:
        return [a.data.cast("B") for a in (self.rows, self.episodes, self.keep)]


class SubEnvSelection:
    """The recorded sub-envs' state: which record now, their episode counts, which reset at the next step.

    Args:
        num_envs: the vector env's sub-env count.
        sub_envs: a list of indices, or a picker (see the module docstring).
        autoreset_mode: ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``.

    Raises:
        ConfigError: an index out of range, a repeated index, an empty list.
    """

    def __init__(self, num_envs: int, sub_envs: Sequence[int] | Picker, autoreset_mode: str) -> None:
        self.num_envs = num_envs
        self.mode = autoreset_mode
        if callable(sub_envs):
            self.picker: Picker | None = sub_envs
            self.tracked = np.arange(num_envs, dtype=np.int64)
        else:
            self.picker = None
            if not isinstance(sub_envs, list | tuple | range | np.ndarray) or not all(
                isinstance(j, int | np.integer) and not isinstance(j, bool) for j in sub_envs
            ):
                raise ConfigError(f"sub_envs={sub_envs!r}: expected a list of sub-env indices or a picker function")
            idx = [int(j) for j in sub_envs]
            bad = [j for j in idx if not 0 <= j < num_envs]
            if bad or not idx:
                raise ConfigError(f"sub_envs {bad or '[]'}: expected indices in [0, {num_envs}) (at least one)")
            if len(set(idx)) != len(idx):
                raise ConfigError(f"sub_envs {idx}: an index is named twice")
            self.tracked = np.array(sorted(idx), dtype=np.int64)
        t = len(self.tracked)
        self.recording = np.zeros(t, bool)  # per tracked sub-env: its current episode is recorded
        self.episodes = np.full(t, -1, np.int64)
        self.resets_next = np.zeros(t, bool)  # next-step mode: the next step is its reset
        self._fixed_plan: RowPlan | None = None  # a fixed list's plan, until an episode count changes

    @property
    def fixed(self) -> bool:
        """Whether the recorded sub-envs are a fixed list (then every tracked row is in every record)."""
        return self.picker is None

    def flag_rows(self) -> np.ndarray:
        """The rows whose done flags ``on_step`` needs (the tracked sub-envs)."""
        return self.tracked

    def _pick(self, positions: np.ndarray) -> np.ndarray:
        """Whether each tracked position in ``positions`` records its next episode."""
        if self.picker is None or not len(positions):
            return np.ones(len(positions), bool)
        candidates = self.tracked[positions]
        try:
            chosen = np.asarray(self.picker(candidates.copy()))
        except Exception as exc:
            raise RecordError(f"sub_envs: the picker raised {exc!r} for sub-envs {candidates.tolist()[:16]}") from exc
        if chosen.dtype == bool and chosen.shape == candidates.shape:
            return chosen
        if chosen.size and not np.issubdtype(chosen.dtype, np.integer):
            raise RecordError(f"sub_envs: the picker returned {chosen!r}: expected indices or a mask as long as its argument")
        return np.isin(candidates, chosen.reshape(-1))

    # The state arrays are replaced, never written in place: a plan may hold them, and ``save`` is free.
    def on_reset(self, mask: np.ndarray | None) -> RowPlan:
        """A reset of the sub-envs in ``mask`` (all for None): their next episode begins, recorded as picked."""
        begin = np.ones(len(self.tracked), bool) if mask is None else np.asarray(mask, bool)[self.tracked]
        pos = np.flatnonzero(begin)
        was = self.recording
        self.episodes = self.episodes + begin
        self.resets_next = self.resets_next & ~begin
        recording = was.copy()
        recording[pos] = self._pick(pos)
        self.recording = recording
        self._fixed_plan = None
        return self._plan(np.flatnonzero(begin & (was | recording)))  # an episode recorded until now is ended too

    def on_step(self, terminated: np.ndarray, truncated: np.ndarray) -> RowPlan:
        """A step whose done flags at ``flag_rows()`` are given: the rows its record holds."""
        ended = np.logical_or(terminated, truncated)
        if self.mode == "NextStep":
            begin = self.resets_next
            if begin.any():
                self.episodes = self.episodes + begin
                self._fixed_plan = None
            ended &= ~begin
            self.resets_next = ended
        elif self.mode == "SameStep" and ended.any():
            self.episodes = self.episodes + ended
            self._fixed_plan = None
        if self.fixed:
            if self._fixed_plan is None:
                every = np.arange(len(self.tracked))
                self._fixed_plan = RowPlan(self.tracked, self.episodes, self.recording[every], every)
            return self._fixed_plan
        was = self.recording
        if self.mode != "Disabled" and ended.any():  # reset-mask: episodes begin at reset(options=...)
            pos = np.flatnonzero(ended)
            recording = was.copy()
            recording[pos] = self._pick(pos)
            self.recording = recording
        # next-step: an episode's last step is sent when its next one is recorded, even if it is not: the
        # worker learns from it that the sub-env's next step is a reset
        return self._plan(np.flatnonzero(was | self.recording))

    def _plan(self, positions: np.ndarray) -> RowPlan:
        return RowPlan(self.tracked[positions], self.episodes[positions], self.recording[positions], positions)

    def save(self) -> tuple:
        """The state, for ``restore`` when a record could not be made."""
        return self.recording, self.episodes, self.resets_next, self._fixed_plan

    def restore(self, state: tuple) -> None:
        self.recording, self.episodes, self.resets_next, self._fixed_plan = state

    def describe(self) -> Any:
        """What the settings say of it: the list, or ``"picker"``."""
        return self.tracked.tolist() if self.fixed else "picker"
