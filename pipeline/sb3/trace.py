"""``VecRecordTrace``: a trace per sub-env of any Stable-Baselines3 VecEnv, through ``RecordVectorTrace``'s worker."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from ..record.vector import RecordVectorTrace
from .adapter import VecEnvView, base_vec_env, batched_actions, check_vec_env, same_step, vector_info

__all__ = ["VecRecordTrace"]


class VecRecordTrace(VecEnvWrapper):
    """Records every sub-env of an SB3 VecEnv as its own trace (``PREFIX.envI.manifest.json`` ...).

    Wraps any ``VecEnv`` (``DummyVecEnv``, ``SubprocVecEnv``, one wrapped in
    ``VecNormalize``, ``VecFrameStack``...) and records what it returns, as
    the agent sees it: each step is copied into the ring once and
    ``RecordVectorTrace``'s worker writes one trace per sub-env. SB3's
    autoreset is followed: an episode ends on the step's
    ``infos[i]["terminal_observation"]`` (with that step's info, without the
    keys SB3 adds) and the next one starts on the reset observation SB3
    returned (with the reset's info and the seed and options SB3 reset it
    with), so sub-env I's trace is what a ``RecordTrace`` inside its
    ``make_env`` records. ``close()`` flushes the traces, then closes
    ``venv``. Read sub-env I with ``TraceReader(directory, prefix=wrapper.prefix_of(I))``.

    Args:
        venv: the SB3 VecEnv (its spaces hold no Text space).
        directory: the output folder, created if needed.
        options: ``RecordVectorTrace``'s keyword arguments (``name_prefix``,
            ``batch_bytes``, ``compression``, ``max_bytes``,
            ``commit_interval``, ``options`` and ``StreamOptions`` fields).

    Raises:
        ConfigError: ``venv`` is not an SB3 VecEnv, a bad option (naming it),
            a folder that cannot be written, a name prefix already used there.
        RecordError: from ``step_wait()``/``reset()``, a value of the wrong
            dtype or shape, a done sub-env without ``terminal_observation``.
        ClosedError: a step or reset after ``close()``.
        WorkerError: only with ``strict=True``: the serializer failed.
    """

    def __init__(self, venv: VecEnv, directory: str | os.PathLike, **options: Any) -> None:
        check_vec_env("VecRecordTrace", venv)
        VecEnvWrapper.__init__(self, venv)
        self.recorder = RecordVectorTrace(VecEnvView(venv), directory, **options)
        self.directory: str = self.recorder.directory
        self.prefix: str = self.recorder.prefix
        self._base = base_vec_env(venv)
        self._actions: Any = None

    def prefix_of(self, sub_env: int) -> str:
        """The file prefix of sub-env ``sub_env``'s trace (for ``TraceReader(directory, prefix=...)``)."""
        return self.recorder.prefix_of(sub_env)

    def stats(self) -> dict[str, Any]:
        """The stream's counters (every key: docs/reference.md, "Stats")."""
        return self.recorder.stats()

    def reset(self) -> VecEnvObs:
        """Reset every sub-env (SB3's ``reset()``) and record each one's reset, with the seeds and options it got."""
        seeds = list(getattr(self._base, "_seeds", None) or [None] * self.num_envs)  # read before: reset() clears them
        options = [o or None for o in getattr(self._base, "_options", None) or [None] * self.num_envs]
        rng = self.recorder.rng_before_reset(seeds)
        obs = self.venv.reset()
        infos = getattr(self._base, "reset_infos", None) or [{}] * self.num_envs
        self.recorder.record_reset(obs, vector_info([dict(i) for i in infos]), seed=seeds, options=options, rng=rng)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions
        self.venv.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        """Step every sub-env (SB3's ``step_wait()``) and record the step, its autoresets as described above."""
        obs, rewards, dones, infos = self.venv.step_wait()
        actions = batched_actions(self._actions, self.action_space, self.num_envs)
        terminations, truncations, info = same_step(dones, infos, getattr(self._base, "reset_infos", ()))
        self.recorder.record_step(actions, obs, rewards, terminations, truncations, info)
        return obs, rewards, dones, infos

    def close(self) -> None:
        """Flush and close the traces (waiting for the serializer), then close ``venv``."""
        try:
            self.recorder.close()
        finally:
            self.venv.close()
