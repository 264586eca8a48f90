"""Replaying one recorded episode: start it from its recorded reset state, step its actions.

How an episode starts (``plan_start``; see docs/replay.md):

1. ``reset_snapshot`` recorded (a snapshot hook was on): the hook restores it into the env;
2. a reset without a seed whose ``np_random`` state was recorded (``rng``): that state becomes the
   env's ``np_random`` (``env.unwrapped._np_random``, a fresh ``Generator`` of the recorded bit generator);
3. ``env.reset(seed=episode.seed, options=episode.options)``.

A reset without a seed, without ``rng`` and without ``reset_snapshot`` (the autoreset of a vector env that does not
expose its sub-envs, or an older envrec) cannot be replayed: ``CannotReplay`` says why and what would make it replayable. An episode whose start
was evicted (``first_step > 0``), or a replay asked to start mid-episode, starts from a recorded
``SavedState``: after a reset, the hook restores its state, its ``rng`` becomes ``np_random`` and every
``TimeLimit`` wrapper counts its ``step`` steps.

Stable API (``envrec render`` builds on it):

* ``plan_start(episode, snapshot=None, from_step=None) -> Start`` (raises ``CannotReplay``), no env needed;
* ``Replay(env, episode, start, snapshot=None)``: iterating it resets the env and steps every recorded
  action, yielding a ``ReplayStep`` first for the start (step ``start.from_step``: the reset observation
  and info, reward, terminated and truncated None on both sides; the replayed observation and info are
  ``UNKNOWN`` when started from a snapshot) and then one per step;
* ``compare(step, atol=0.0, infos=False) -> Difference | None``: the first difference in that step;
* ``snapshot_hook(manifest, snapshot=None)``: the recording's snapshot hook, or None.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from ..record.snapshots import resolve_snapshot
from .compare import UNKNOWN, Difference, first_difference
from .trust import Refused, recorded_snapshot

__all__ = ["INFERRED_RNG", "NO_RNG", "UNKNOWN", "CannotReplay", "Difference", "Replay", "ReplayStep", "Start", "Transition", "compare",
           "plan_start", "restore_rng", "snapshot_hook"]

logger = logging.getLogger(__name__)

_BIT_GENERATORS = {c.__name__: c for c in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937,
                                             np.random.Philox, np.random.SFC64)}
NO_RNG = (("reset without a seed, and the recording has no np_random state (the autoreset of a vector env that does "
           "not expose its sub-envs, or a recording of an older envrec)"),
          "seed the reset, or record each env with RecordTrace (it records np_random before each reset it sees)")


INFERRED_RNG = (("it started from the np_random state read after the previous episode's reset (a same-step "
                 "autoreset, as SB3's VecEnvs': the state just before its reset cannot be read), which holds only "
                 "for envs that draw no random numbers while stepping"),
                "record with next-step autoreset (Gymnasium's default) or seed the sub-envs' resets")


class CannotReplay(Exception):
    """An episode cannot be replayed.

    Attributes:
        reason: why not.
        hint: what would make it replayable, or None.
    """

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason + (f"; {hint}" if hint else ""))
        self.reason = reason
        self.hint = hint


@dataclass(frozen=True)
class Start:
    """How a replay starts.

    Attributes:
        how: ``"seed"`` (the reset's seed), ``"rng"`` (the recorded ``np_random`` state) or ``"snapshot"``
            (a recorded ``reset_snapshot``, or ``state``).
        from_step: the episode step it starts at (0: the reset).
        state: the ``SavedState`` it starts from, None for a start at the reset.
    """

    how: str
    from_step: int
    state: Any = None


@dataclass(frozen=True)
class Transition:
    """One step's outcome; at a start, ``reward``, ``terminated`` and ``truncated`` are None.

    Attributes:
        observation, reward, terminated, truncated, info: as ``env.step`` returns them (``observation``
            ``UNKNOWN`` when a replay starts from a snapshot: restoring gives no observation).
    """

    observation: Any
    reward: Any
    terminated: Any
    truncated: Any
    info: Any


@dataclass(frozen=True)
class ReplayStep:
    """What was recorded and what the replay gave at one step.

    Attributes:
        step: the episode step (``start.from_step`` for the start, then after each action: s after s actions).
        recorded, replayed: the two ``Transition``s.
    """

    step: int
    recorded: Transition
    replayed: Transition


def snapshot_hook(manifest: Mapping[str, Any], snapshot: Any = None) -> Any:
    """The snapshot hook that restores the recording's snapshots: ``snapshot`` when the user gives one (a
    ``Snapshot`` or its ``module:qualname``, imported), else the built-in hook (``"ale"``, ``"mujoco"``) the
    manifest's ``env.snapshot.name`` names; None without one. A recorded name of another hook is never
    imported (``envrec.replay.trust``): the user names it with ``--snapshot``.

    Args:
        manifest: the recording's head manifest.
        snapshot: a hook to use instead of the recorded name (the user's choice).

    Raises:
        CannotReplay: ``snapshot`` does not resolve to a hook, or the recorded name is not a built-in hook.
    """
    if snapshot is None:
        env = manifest.get("env")
        recorded = env.get("snapshot") if isinstance(env, Mapping) else None
        name = recorded.get("name") if isinstance(recorded, Mapping) else None
        if name is None:
            return None
        found = recorded_snapshot(name)
        if isinstance(found, Refused):
            raise CannotReplay(found.reason, found.hint)
        return found
    try:
        return resolve_snapshot(snapshot)
    except Exception as exc:  # the user's name, resolved by importing it
        raise CannotReplay(f"the snapshot hook {snapshot!r} cannot be loaded: {exc}",
                           "pass --snapshot module:object (snapshot= in Python): the hook the recording used") from exc


def plan_start(episode: Any, snapshot: Any = None, from_step: int | None = None) -> Start:
    """How ``episode`` will be started (no env needed).

    Args:
        episode: an ``Episode`` from ``TraceReader`` (``seed``, ``first_step`` and the recorded ``rng``,
            ``reset_snapshot``, ``snapshots``).
        snapshot: the recording's snapshot hook (``snapshot_hook``), None when it has none.
        from_step: start from the last ``SavedState`` at or before this step instead of the reset.

    Raises:
        CannotReplay: the reset cannot be reproduced (no seed, no ``rng``, no ``reset_snapshot``), or the
            start was evicted and no snapshot kept after it.
    """
    states = tuple(getattr(episode, "snapshots", None) or ())
    first = episode.first_step
    if from_step is not None or first > 0:
        wanted = [s for s in states if s.step >= first and (from_step is None or s.step <= from_step)]
        if wanted and snapshot is not None:
            state = wanted[-1] if from_step is not None else wanted[0]  # the latest before from_step, the first kept
            return Start("snapshot", state.step, state)
        if first > 0:
            why = "no snapshot hook" if wanted else "no snapshot kept after them"
            raise CannotReplay(f"its first {first} steps were not kept (evicted by a disk budget), and {why}",
                               "record with snapshot=... and snapshot_every=N to replay episodes whose start is evicted")
    if getattr(episode, "reset_snapshot", None) is not None and snapshot is not None:
        return Start("seed" if episode.seed is not None else "snapshot", 0)
    if episode.seed is not None:
        return Start("seed", 0)
    if getattr(episode, "rng", None) is not None:
        return Start("rng", 0)
    if getattr(episode, "reset_snapshot", None) is not None:
        raise CannotReplay("reset without a seed: its reset snapshot was recorded but no snapshot hook restores it",
                           "pass --snapshot module:object (snapshot= in Python): the hook the recording used")
    raise CannotReplay(*NO_RNG)


def restore_rng(env: gym.Env, state: Mapping[str, Any]) -> None:
    """Make ``state`` (a recorded ``bit_generator.state``) the env's ``np_random``, keeping its recorded seed.

    Args:
        env: the env (its ``unwrapped`` gets the generator).
        state: e.g. ``{"bit_generator": "PCG64", "state": {...}, ...}``.

    Raises:
        CannotReplay: not the state of a numpy bit generator.
    """
    name = state.get("bit_generator") if isinstance(state, Mapping) else None
    if name not in _BIT_GENERATORS:
        raise CannotReplay(f"the recorded np_random state is not a numpy bit generator's (bit_generator {name!r})")
    bits: Any = _BIT_GENERATORS[name]()
    try:
        bits.state = dict(state)
    except Exception as exc:  # numpy raises TypeError/ValueError/KeyError for bad states
        raise CannotReplay(f"the recorded np_random state does not load into {name}: {exc}") from exc
    env.unwrapped._np_random = np.random.Generator(bits)  # the setter would forget _np_random_seed


def _set_elapsed(env: gym.Env, steps: int) -> None:
    e: Any = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, gym.wrappers.TimeLimit):
            setattr(e, "_elapsed_steps", steps)  # noqa: B010  (typed None in gymnasium, an int at run time)
        e = e.env


def _row(tree: Any, i: int) -> Any:
    if isinstance(tree, Mapping):
        return {k: _row(v, i) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_row(v, i) for v in tree)
    value = tree[i]
    return np.array(value) if isinstance(value, np.ndarray) else value


class Replay:
    """Iterating it replays ``episode`` in ``env`` from ``start``: a ``ReplayStep`` for the start, then one
    per recorded action (all of them, also after a difference: the caller stops when it wants).

    Args:
        env: a recreated env (``envrec.replay.recreate``); reused envs are fine: the start resets it.
        episode: the ``Episode`` to replay.
        start: from ``plan_start``.
        snapshot: the snapshot hook (needed when ``start`` restores a snapshot).
    """

    def __init__(self, env: gym.Env, episode: Any, start: Start, snapshot: Any = None) -> None:
        self.env = env
        self.episode = episode
        self.start = start
        self.snapshot = snapshot

    @property
    def steps(self) -> int:
        """The steps the replay takes."""
        return self.episode.first_step + self.episode.length - self.start.from_step

    def recorded(self, step: int) -> Transition:
        """What was recorded at episode step ``step``.

        Args:
            step: from ``episode.first_step`` to ``first_step + length``.
        """
        ep, i = self.episode, step - self.episode.first_step
        if i == 0:
            return Transition(_row(ep.observations, 0), None, None, None, ep.infos[0])
        return Transition(_row(ep.observations, i), ep.rewards[i - 1], bool(ep.terminations[i - 1]),
                          bool(ep.truncations[i - 1]), ep.infos[i])

    def __iter__(self) -> Iterator[ReplayStep]:
        at = self.recorded(self.start.from_step)  # at a start only the observation (and info) are compared
        yield ReplayStep(self.start.from_step, Transition(at.observation, None, None, None, at.info), self._begin())
        ep = self.episode
        for i in range(self.start.from_step - ep.first_step, ep.length):
            obs, reward, terminated, truncated, info = self.env.step(_row(ep.actions, i))
            step = ep.first_step + i + 1
            yield ReplayStep(step, self.recorded(step), Transition(obs, reward, terminated, truncated, info))

    def _begin(self) -> Transition:
        ep, state = self.episode, self.start.state
        reset_snapshot = getattr(ep, "reset_snapshot", None)
        if state is None and reset_snapshot is not None and self.snapshot is not None:
            self.snapshot.restore(self.env, reset_snapshot)
        if state is None and ep.seed is None and getattr(ep, "rng", None) is not None:
            restore_rng(self.env, ep.rng)
        obs, info = self.env.reset(seed=ep.seed if state is None else (ep.seed or 0), options=ep.options)
        if state is None:
            return Transition(obs, None, None, None, info)
        self.snapshot.restore(self.env, state.state)
        if state.rng is not None:
            restore_rng(self.env, state.rng)
        _set_elapsed(self.env, state.step)
        return Transition(UNKNOWN, None, None, None, UNKNOWN)


def compare(step: ReplayStep, *, atol: float = 0.0, infos: bool = False) -> Difference | None:
    """The first difference between ``step.recorded`` and ``step.replayed``, None when they agree.

    Fields in order: observations, rewards, terminated, truncated, infos (only with ``infos=True``).

    Args:
        step: a ``ReplayStep`` from ``Replay``.
        atol: absolute tolerance for numbers (0: exact; NaN equals NaN).
        infos: compare the infos too.
    """
    rec, rep = step.recorded, step.replayed
    fields: list[tuple[str, Any, Any]] = [("observations", rec.observation, rep.observation)]
    if rec.reward is not None:
        fields += [("rewards", rec.reward, rep.reward), ("terminated", rec.terminated, bool(rep.terminated)),
                   ("truncated", rec.truncated, bool(rep.truncated))]
    if infos:
        fields.append(("infos", rec.info, rep.info))
    for name, recorded, replayed in fields:
        found = first_difference(recorded, replayed, atol if name in ("observations", "rewards", "infos") else 0.0)
        if found is not None:
            where, a, b, largest = found
            return Difference(step.step, name, where or None, a, b, largest)
    return None
