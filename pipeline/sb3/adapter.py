"""Stable-Baselines3's VecEnv API seen as Gymnasium's vector API, for envrec's vector recorders.

An SB3 ``VecEnv`` steps in two calls (``step_async(actions)``, then
``step_wait() -> (obs, rewards, dones, infos)``), has one ``done`` per
sub-env and a list of info dicts, and resets a finished sub-env itself
within the step that ends its episode: the observation it returns is the
next episode's reset observation, the last one of the finished episode is in
``infos[i]["terminal_observation"]``, a time-limit end is
``infos[i]["TimeLimit.truncated"]`` and the reset's info is in the base
VecEnv's ``reset_infos[i]``. That is Gymnasium's *same-step* autoreset, told
differently; ``same_step`` tells it Gymnasium's way (``final_obs``,
``final_info``, per-key ``_key`` masks), so that ``RecordVectorTrace``'s
worker ends each sub-env's episode on its terminal observation and starts
the next one on its reset observation.

What SB3 cannot give back: a step that both terminated and was truncated is
``TimeLimit.truncated = False`` in SB3, so it is recorded terminated only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ..errors import ConfigError, RecordError
from ..extras import install_hint
from ..record.host_arrays import to_host
from ..record.replay_capture import generator_state

try:
    from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
except ModuleNotFoundError as exc:  # the sb3 extra is not installed
    raise ModuleNotFoundError(
        f"envrec.sb3 needs Stable-Baselines3 ({exc.name} is missing): {install_hint('sb3')}", name=exc.name
    ) from exc

__all__ = ["SB3_INFO_KEYS", "VecEnvView", "base_vec_env", "check_vec_env", "same_step", "sub_env_attr", "vector_info"]

logger = logging.getLogger(__name__)

# The keys SB3's VecEnvs add to a sub-env's own step info (DummyVecEnv, SubprocVecEnv): not the env's.
SB3_INFO_KEYS = ("terminal_observation", "TimeLimit.truncated")


def check_vec_env(owner: str, venv: Any) -> None:
    """A ``ConfigError`` naming what ``owner`` expected when ``venv`` is not an SB3 ``VecEnv``."""
    if isinstance(venv, VecEnv):
        return
    if isinstance(venv, gym.vector.VectorEnv):
        hint = "for a Gymnasium vector env use envrec.RecordVectorTrace / envrec.RecordVectorVideo"
    elif isinstance(venv, gym.Env):
        hint = "make it one first, e.g. DummyVecEnv([lambda: env]), or record it with envrec.RecordTrace / envrec.RecordVideo"
    else:
        hint = "e.g. DummyVecEnv([make_env] * 4) or SubprocVecEnv([make_env] * 4)"
    raise ConfigError(
        f"{owner}: venv must be a Stable-Baselines3 VecEnv (stable_baselines3.common.vec_env.VecEnv: DummyVecEnv, "
        f"SubprocVecEnv, or either wrapped in VecNormalize, VecFrameStack, ...), got {type(venv).__module__}."
        f"{type(venv).__qualname__}: {hint}"
    )


def base_vec_env(venv: VecEnv) -> VecEnv:
    """The VecEnv under every ``VecEnvWrapper``: the one that holds ``reset_infos`` and the next reset's seeds."""
    while isinstance(venv, VecEnvWrapper):
        venv = venv.venv
    return venv


def sub_env_attr(venv: VecEnv, name: str, default: Any = None) -> Any:
    """Sub-env 0's attribute ``name`` (its ``spec``, its ``metadata``), or ``default`` when it has none."""
    try:
        return venv.get_attr(name, indices=[0])[0]
    except AttributeError:
        return default


def vector_info(infos: Sequence[dict]) -> dict[str, Any]:
    """A list of per-sub-env info dicts as one Gymnasium vector info: a list per key, a ``_key`` mask when not all have it."""
    out: dict[str, Any] = {}
    keys = dict.fromkeys(k for info in infos for k in info)
    for k in keys:
        present = [k in info for info in infos]
        out[k] = [info.get(k) for info in infos]
        if not all(present):
            out["_" + k] = np.array(present)
    return out


def _own(info: dict) -> dict:
    """A sub-env's step info without what SB3 added to it."""
    if len(info) == 1 and "TimeLimit.truncated" in info:
        return {}  # the usual step: nothing but what SB3 adds to every one
    if not any(k in info for k in SB3_INFO_KEYS):
        return info
    return {k: v for k, v in info.items() if k not in SB3_INFO_KEYS}


def same_step(dones: np.ndarray, infos: Sequence[dict], reset_infos: Sequence[dict]) -> tuple[np.ndarray, np.ndarray, dict]:
    """SB3's ``(dones, infos)`` of a step, and the base VecEnv's ``reset_infos``, as Gymnasium's same-step autoreset.

    Args:
        dones: one bool per sub-env.
        infos: the step's info dicts, one per sub-env.
        reset_infos: the infos of the resets SB3 did within the step (only a done sub-env's is read).

    Returns:
        ``(terminations, truncations, info)``: ``info`` holds each sub-env's own step info, or for a
        sub-env whose episode ended its reset info, and then ``final_obs`` / ``final_info`` for it.

    Raises:
        RecordError: a done sub-env whose info has no ``terminal_observation`` (not an SB3 VecEnv's step).
    """
    n = len(infos)
    ended = to_host(dones, None, "dones").astype(bool).reshape(n)
    truncations = np.zeros(n, bool)
    now: list[dict] = []
    final_obs: list[Any] = [None] * n
    final_info: list[dict] = [{} for _ in range(n)]
    for i, info in enumerate(infos):
        if not ended[i]:
            now.append(_own(info))
            continue
        if "terminal_observation" not in info:
            raise RecordError(f"sub-env {i} is done but its info has no 'terminal_observation': not an SB3 VecEnv's autoreset")
        truncations[i] = bool(info.get("TimeLimit.truncated", False))
        final_obs[i], final_info[i] = info["terminal_observation"], _own(info)
        now.append(dict(reset_infos[i]) if i < len(reset_infos) and reset_infos[i] else {})
    out = vector_info(now) if any(now) else {}
    if ended.any():
        out.update(final_obs=final_obs, _final_obs=ended, final_info=vector_info(final_info), _final_info=ended)
    return ended & ~truncations, truncations, out


def batched_actions(actions: Any, space: gym.Space, n: int) -> Any:
    """The actions as an array of ``(n, *space.shape)`` when they hold that many values (SB3 passes Discrete ones as (n,) or (n, 1))."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return actions
    a = to_host(actions, None, "actions")
    shape = (n, *(space.shape or ()))
    return a.reshape(shape) if a.shape != shape and a.size == int(np.prod(shape)) else a


class VecEnvView(gym.vector.VectorEnv):
    """What ``RecordVectorTrace`` reads of a vector env, taken from an SB3 VecEnv: its sub-envs' spaces, their
    number, their spec, same-step autoreset. Never stepped: ``envrec.sb3.VecRecordTrace`` steps the VecEnv
    and hands the results to the recorder (``record_step``, ``record_reset``).

    Args:
        venv: the SB3 VecEnv.
    """

    def __init__(self, venv: VecEnv) -> None:
        self.venv = venv
        self.num_envs = venv.num_envs
        self.single_observation_space = venv.observation_space
        self.single_action_space = venv.action_space
        self.observation_space = batch_space(venv.observation_space, venv.num_envs)
        self.action_space = batch_space(venv.action_space, venv.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = venv.render_mode
        spec = sub_env_attr(venv, "spec")
        self.spec = spec if isinstance(spec, gym.envs.registration.EnvSpec) else None

    @property
    def sub_env_spec(self) -> gym.envs.registration.EnvSpec | None:
        """The sub-envs' spec (what ``envrec.record.sub_env_replay`` reads): SB3's sub-envs are whole envs."""
        return self.spec

    def sub_env_rng_states(self, indices: list[int]) -> list[dict | None]:
        """The ``np_random`` states of sub-envs ``indices`` (SB3's ``get_attr``: one round trip to each of a
        ``SubprocVecEnv``'s processes), None for one that has none."""
        generators = self.venv.get_attr("np_random", indices=indices)
        return [generator_state(g) for g in generators]

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        raise NotImplementedError("a VecEnvView is not stepped: reset the SB3 VecEnv (VecRecordTrace.reset)")

    def step(self, actions):
        raise NotImplementedError("a VecEnvView is not stepped: step the SB3 VecEnv (VecRecordTrace.step)")

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing: the VecEnv is its wrapper's to close."""
