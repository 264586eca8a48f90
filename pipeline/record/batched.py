"""Batched simulators that are not Gymnasium ``VectorEnv``s, seen as one (``BatchedEnv``).

Isaac Lab's ``DirectRLEnv``/``ManagerBasedRLEnv``, ManiSkill3's GPU
simulation, MuJoCo Playground or Brax behind a Gymnasium-like API: one
``gymnasium.Env`` holding ``num_envs`` copies, whose ``reset``/``step`` take
and return batched tensors (torch or JAX, on the CPU or a GPU).
``BatchedEnv(env)`` presents such an env as a ``gymnasium.vector.VectorEnv``
(``num_envs``, ``single_observation_space``, ``single_action_space``, its
autoreset mode in ``metadata``) without converting anything it passes: the
training loop gets the simulator's own tensors back, and ``RecordVectorTrace``
/ ``RecordVectorVideo`` wrap it as any vector env, copying only the rows they
record (``envrec.record.host_arrays``).

Autoreset, as the simulator does it (``autoreset=``):

* ``"same-step"`` (Isaac Lab, ManiSkill's ``ManiSkillVectorEnv``): a sub-env
  whose episode ends is reset inside ``step``; the observation returned is
  its next episode's first. With the terminal observation in the info
  (``final_obs``, or the key ``final_obs_key`` names, e.g. ManiSkill's
  ``"final_observation"``) the episode ends on it; without (Isaac Lab gives
  none) the step that ends an episode carries the returned observation.
* ``"next-step"``: Gymnasium's default (envpool, Gymnasium's own).
* ``"reset-mask"``: nothing resets by itself; the loop resets sub-envs by
  ``reset(options={"reset_mask": mask})`` (or ManiSkill's
  ``options={"env_idx": indices}``, turned into a mask for the recorders).

Frames come from ``env.render()`` (a B×H×W×C uint8 batch: ManiSkill's
``render_mode="rgb_array"``) or from ``frames(env)``, a function returning a
camera's batch (Isaac Lab: ``env.unwrapped.scene["tiled_camera"].data.output["rgb"]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from ..errors import ConfigError, RecordError
from ..option_checks import CALLABLE, STR, Accepts, check_options, optional
from .host_arrays import HostArrays

__all__ = ["AUTORESET_STYLES", "BatchedEnv", "check_frame_batch", "reset_mask_of", "unbatched_space"]

AUTORESET_STYLES = {
    "same-step": AutoresetMode.SAME_STEP,
    "next-step": AutoresetMode.NEXT_STEP,
    "reset-mask": AutoresetMode.DISABLED,
}

BATCHED_ENV_OPTIONS = {
    "autoreset": Accepts(f"one of {', '.join(map(repr, AUTORESET_STYLES))}", lambda v: v in AUTORESET_STYLES),
    "frames": optional(CALLABLE),
    "final_obs_key": optional(STR),
    "single_observation_space": Accepts("a gymnasium Space or None", lambda v: v is None or isinstance(v, gym.Space)),
    "single_action_space": Accepts("a gymnasium Space or None", lambda v: v is None or isinstance(v, gym.Space)),
}


def unbatched_space(space: gym.Space, n: int, what: str) -> gym.Space:
    """One sub-env's space from a batched space whose arrays lead with ``n`` rows (Box, Discrete kinds, Dict, Tuple).

    Raises:
        ConfigError: a space that does not lead with ``n`` (``what`` names it).
    """
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: unbatched_space(s, n, f"{what}[{k!r}]") for k, s in space.spaces.items()})
    if isinstance(space, gym.spaces.Tuple):
        return gym.spaces.Tuple([unbatched_space(s, n, f"{what}[{k}]") for k, s in enumerate(space.spaces)])
    shape = space.shape or ()
    if not shape or shape[0] != n:
        raise ConfigError(
            f"{what}: {space} does not lead with the {n} sub-envs; pass single_observation_space= / single_action_space="
        )
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(space.low[0], space.high[0], shape[1:], space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = space.nvec[0]
        return gym.spaces.Discrete(int(nvec)) if nvec.ndim == 0 else gym.spaces.MultiDiscrete(nvec)
    if isinstance(space, gym.spaces.MultiBinary):
        return gym.spaces.MultiBinary(list(shape[1:]) or 1)
    raise ConfigError(f"{what}: cannot tell one sub-env's space from {space}; pass single_observation_space= / single_action_space=")


def _single(env: gym.Env, name: str, given: gym.Space | None, n: int) -> gym.Space:
    if given is not None:
        return given
    for holder in (env, env.unwrapped):
        space = getattr(holder, f"single_{name}", None)
        if isinstance(space, gym.Space):
            return space
    return unbatched_space(getattr(env, name), n, name)


def reset_mask_of(options: dict | None, n: int, host: HostArrays | None = None) -> np.ndarray | None:
    """Which sub-envs a ``reset(options=...)`` resets: ``reset_mask`` (n booleans) or ``env_idx`` (indices); None: all.

    Raises:
        RecordError: a mask of the wrong length, an index out of range.
    """
    if not options:
        return None
    host = host or HostArrays(n)
    if options.get("reset_mask") is not None:
        return host.to_host(options["reset_mask"], None, "reset_mask").astype(bool)
    if options.get("env_idx") is not None:
        idx = host.to_host(options["env_idx"], None, "env_idx", batched=False).astype(np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise RecordError(f"env_idx: indices {idx.tolist()[:8]} out of range for {n} sub-envs")
        mask = np.zeros(n, bool)
        mask[idx] = True
        return mask
    return None


def check_frame_batch(frames: np.ndarray, rows: int, field: str = "frames") -> np.ndarray:
    """A host batch of frames, checked: ``rows`` images of H×W×C (C 1, 3 or 4) or H×W, uint8.

    Raises:
        RecordError: another shape or dtype (naming ``field``).
    """
    shape, dtype = frames.shape, frames.dtype
    if dtype != np.uint8:
        raise RecordError(f"{field}: expected uint8 frames (RGB values 0-255), got {dtype} of shape {shape}")
    ok = len(shape) == 3 or (len(shape) == 4 and shape[3] in (1, 3, 4))
    if not ok or shape[0] != rows or 0 in shape[1:3]:
        raise RecordError(f"{field}: expected {rows} frames of height x width x 3 (B x H x W x C), got shape {shape}")
    return frames


class BatchedEnv(gym.vector.VectorEnv):
    """A batched simulator (a ``gymnasium.Env`` with ``num_envs``) as a ``VectorEnv`` the recorders can wrap.

    Nothing is converted on the way through: ``step`` and ``reset`` return the
    simulator's own values. Wrap it in ``RecordVectorTrace`` /
    ``RecordVectorVideo`` (``sub_envs=`` to record a few of many).

    Args:
        env: the simulator: ``num_envs`` (on it or its ``unwrapped``), batched
            ``reset``/``step``, its spaces.
        autoreset: how it resets finished sub-envs: ``"same-step"`` (the
            default: Isaac Lab, ManiSkill), ``"next-step"`` or ``"reset-mask"``
            (see the module docstring).
        frames: ``frames(env) -> batch``: a camera's B×H×W×C uint8 frames.
            Default None: ``env.render()``.
        final_obs_key: the info key of the terminal observations in same-step
            mode, when not Gymnasium's ``"final_obs"`` (ManiSkill:
            ``"final_observation"``); copied under ``"final_obs"`` in the info.
        single_observation_space: one sub-env's observation space. Default:
            the env's ``single_observation_space``, else its batched space
            without the leading ``num_envs``.
        single_action_space: likewise for actions.

    Raises:
        ConfigError: no ``num_envs``, a bad option, spaces whose sub-env part cannot be told.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        autoreset: str = "same-step",
        frames: Callable[[gym.Env], Any] | None = None,
        final_obs_key: str | None = None,
        single_observation_space: gym.Space | None = None,
        single_action_space: gym.Space | None = None,
    ) -> None:
        check_options("BatchedEnv", BATCHED_ENV_OPTIONS, locals())
        n = getattr(env, "num_envs", None) or getattr(env.unwrapped, "num_envs", None)
        if not isinstance(n, int | np.integer) or n < 1:
            raise ConfigError(f"BatchedEnv: {type(env).__name__} has no num_envs (got {n!r}): not a batched simulator")
        self.env = env
        self.num_envs = int(n)
        self.single_observation_space = _single(env, "observation_space", single_observation_space, self.num_envs)
        self.single_action_space = _single(env, "action_space", single_action_space, self.num_envs)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**getattr(env, "metadata", {}), "autoreset_mode": AUTORESET_STYLES[autoreset]}
        self.render_mode = "rgb_array" if frames is not None else env.render_mode
        self.spec = env.spec
        self.frames = frames
        self.final_obs_key = final_obs_key

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        """The simulator's ``reset``, options passed as given (``reset_mask`` / ``env_idx`` among them)."""
        return self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]  # batched simulators take lists too

    def step(self, actions):
        """The simulator's ``step``; in same-step mode its terminal observations also under ``info["final_obs"]``."""
        obs, rewards, terminations, truncations, info = self.env.step(actions)
        key = self.final_obs_key
        if key is not None and isinstance(info, dict) and key in info and "final_obs" not in info:
            info = {**info, "final_obs": info[key]}
            if "_" + key in info:
                info["_final_obs"] = info["_" + key]
        return obs, rewards, terminations, truncations, info

    def render(self) -> Any:
        """The batch of frames: ``frames(env)``, or the simulator's ``render()``."""
        return self.frames(self.env) if self.frames is not None else self.env.render()

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()
