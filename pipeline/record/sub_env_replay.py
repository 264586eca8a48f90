"""What replay needs of a vector env's sub-envs, taken on the env side: their spec (each sub-env trace's
manifest ``env``) and their ``np_random`` states at resets and episode ends (docs/format.md, "What replay
needs"; docs/vector.md, "Replaying vector recordings").

A vector env exposes its sub-envs in one of three ways:

* Gymnasium's ``SyncVectorEnv``: its ``envs``, read in this process;
* Gymnasium's ``AsyncVectorEnv``: ``get_attr("spec")`` and ``get_attr("np_random")``, one round trip to each
  sub-process;
* any vector env with a ``sub_env_rng_states(indices)`` method (``envrec.sb3``'s view of an SB3 VecEnv,
  through SB3's ``get_attr``).

Others (a numpy-vectorized env, a batched simulator) have no sub-envs to read: their sub-env traces carry no
spec and no states, and say why.

The states are read only at resets and episode ends, for the recorded sub-envs whose episode ended:

* before an explicit unseeded ``reset()``: the reset's exact ``rng``;
* after a step that ended episodes, with next-step autoreset (Gymnasium's default): the sub-env resets on
  its next step, so the state read is exactly that reset's;
* with same-step autoreset (SB3, Gymnasium's ``SAME_STEP``): the sub-env has already reset within the step.
  The state read is the new episode's after its reset; it stands for the state before the next autoreset
  (``rng_inferred``), which holds for envs that draw no random numbers while stepping (classic control,
  MuJoCo). Replay holds it to the recorded reset observation and says "cannot replay" when it differs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from .action_names import action_meanings
from .replay_capture import env_description, generator_state, rng_state, spec_json

__all__ = ["SubEnvRng", "describe_sub_envs"]

logger = logging.getLogger(__name__)

NO_SUB_ENVS = ("the vector env does not expose its sub-envs (not a SyncVectorEnv, an AsyncVectorEnv or an SB3 "
               "VecEnv): its sub-envs cannot be made one by one")


def _base(env: Any) -> Any:
    """The vector env under every ``VectorWrapper``."""
    while isinstance(env, gym.vector.VectorWrapper):
        env = env.env
    return env


def _sub_env_spec(base: Any) -> EnvSpec | None:
    if isinstance(base, gym.vector.SyncVectorEnv):
        return base.envs[0].spec
    if isinstance(base, gym.vector.AsyncVectorEnv):
        return base.get_attr("spec")[0]
    spec = getattr(base, "sub_env_spec", None)
    return spec if isinstance(spec, EnvSpec) else None


def describe_sub_envs(env: Any) -> dict:
    """The manifest's ``env`` of each sub-env trace: sub-env 0's spec (what ``gym.make_vec`` gave every
    sub-env, its ``max_episode_steps``, kwargs and wrappers included), versions and action names.

    Args:
        env: the vector env as the recorder wraps it.
    """
    base = _base(env)
    try:
        spec = _sub_env_spec(base)
    except Exception as exc:  # noqa: BLE001  (a sub-process that cannot answer: the recording goes on without it)
        return env_description(None, f"its sub-envs' spec could not be read: {exc!r}")
    if spec is None:
        if _exposes(base):
            return env_description(None, "the sub-envs were not made by gymnasium.make (their spec is None)")
        return env_description(None, _not_exposed(base))
    described, error = spec_json(spec)
    meanings = action_meanings(base.envs[0]) if isinstance(base, gym.vector.SyncVectorEnv) else None
    return env_description(described, error, meanings=meanings)


def _not_exposed(base: Any) -> str:
    """Why a vector env's sub-envs cannot be made one by one, and what would record ones that can."""
    spec = getattr(base, "spec", None)
    if spec is not None and (spec.kwargs or {}).get("vectorization_mode") in ("vector_entry_point", None) and spec.vector_entry_point:
        return (f"{type(base).__name__} steps all its sub-envs as one array (gym.make_vec's default for {spec.id}: "
                "vectorization_mode='vector_entry_point'), so they cannot be made one by one; "
                "gym.make_vec(..., vectorization_mode='sync') or 'async' records sub-envs that replay")
    return NO_SUB_ENVS


def _exposes(base: Any) -> bool:
    return isinstance(base, gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv) or hasattr(base, "sub_env_rng_states")


class SubEnvRng:
    """Reads the ``np_random`` states of chosen sub-envs (None for one that has none).

    Built with ``SubEnvRng.of(env)``, which is None for a vector env that does not expose its sub-envs.
    A read that fails (a sub-process gone) is logged once and gives no states: the recording goes on.

    Args:
        base: the vector env under its wrappers.
    """

    def __init__(self, base: Any) -> None:
        self.base = base
        self.reads = 0  # how many times states were read (at resets and episode ends only)
        self._failed = False

    @classmethod
    def of(cls, env: Any) -> SubEnvRng | None:
        """A reader for ``env``'s sub-envs, or None when it does not expose them.

        Args:
            env: the vector env as the recorder wraps it.
        """
        base = _base(env)
        return cls(base) if _exposes(base) else None

    def states(self, indices: Sequence[int]) -> dict[int, dict]:
        """``{sub_env: bit_generator.state}`` of the sub-envs ``indices`` that have an ``np_random``.

        Args:
            indices: sub-env indices.
        """
        if not len(indices):
            return {}
        self.reads += 1
        try:
            found = self._read([int(i) for i in indices])
        except Exception as exc:  # noqa: BLE001  (reading is for replay only: it must not stop the user's job)
            if not self._failed:
                self._failed = True
                logger.warning("envrec: the sub-envs' np_random states could not be read (%r): episodes that start "
                               "without a seed are recorded without them and cannot be replayed", exc)
            return {}
        return {i: s for i, s in found.items() if s is not None}

    def _read(self, indices: list[int]) -> dict[int, dict | None]:
        base = self.base
        if isinstance(base, gym.vector.SyncVectorEnv):
            return {i: rng_state(base.envs[i]) for i in indices}
        if isinstance(base, gym.vector.AsyncVectorEnv):
            generators = base.get_attr("np_random")  # every sub-process answers: read at episode ends only
            return {i: generator_state(generators[i]) for i in indices}
        return dict(zip(indices, base.sub_env_rng_states(indices), strict=True))

