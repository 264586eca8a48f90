"""A batched simulator in the style of Isaac Lab / ManiSkill (one gymnasium.Env, ``num_envs`` copies, batched
tensors), on torch or JAX, and the same dynamics for one sub-env in numpy, stepped one by one.

Each sub-env's episode length depends on the sub-env and its episode count (``episode_length``), so sub-envs
end at their own, scattered steps. Every value is a small integer in float32: the batched and the one-by-one
arithmetic agree bit for bit whatever the framework fuses.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np

OBS = 3
FRAME = 16  # frames are FRAME x FRAME x 3


def episode_length(i, episode):
    """Steps of sub-env ``i``'s episode ``episode`` (2..18); works on ints and on arrays of any framework."""
    return 2 + (i * 7 + episode * 13) % 17


def reset_obs(i, episode):
    return np.array([i % 50, episode % 50, 0], np.float32)


class Torchy:
    """The array calls the simulator needs, for torch."""

    def __init__(self, device="cpu"):
        import torch

        self.m, self.device = torch, device

    def arange(self, n):
        return self.m.arange(n, device=self.device)

    def zeros(self, shape, dtype):
        return self.m.zeros(shape, dtype=getattr(self.m, dtype), device=self.device)

    def asarray(self, x, dtype):
        return self.m.as_tensor(np.asarray(x), dtype=getattr(self.m, dtype), device=self.device)

    def astype(self, x, dtype):
        return x.to(getattr(self.m, dtype))

    def where(self, c, a, b):
        return self.m.where(c, a, b)

    def stack(self, xs, axis):
        return self.m.stack(xs, dim=axis)


class Jaxy:
    """The array calls the simulator needs, for JAX (int64 asked: int32, JAX's default without x64)."""

    def __init__(self):
        import jax.numpy as jnp

        self.m = jnp

    def _dt(self, dtype):
        return self.m.int32 if dtype == "int64" else getattr(self.m, dtype)

    def arange(self, n):
        return self.m.arange(n)

    def zeros(self, shape, dtype):
        return self.m.zeros(shape, dtype=self._dt(dtype))

    def asarray(self, x, dtype):
        return self.m.asarray(np.asarray(x), dtype=self._dt(dtype))

    def astype(self, x, dtype):
        return x.astype(self._dt(dtype))

    def where(self, c, a, b):
        return self.m.where(c, a, b)

    def stack(self, xs, axis):
        return self.m.stack(xs, axis=axis)


class BatchedSim(gym.Env):
    """``num_envs`` copies stepped at once; ``autoreset``: ``"same-step"`` (with ``final_obs`` in the info when
    ``final_obs``, as ManiSkill; without, as Isaac Lab), ``"next-step"`` or ``"reset-mask"`` (reset by
    ``reset(options={"reset_mask": ...})`` or ``{"env_idx": ...}``). ``render()``: B x 16 x 16 x 3 uint8."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, xp, num_envs, autoreset="same-step", final_obs=True, final_obs_key="final_observation"):
        self.xp, self.num_envs, self.autoreset, self.final_obs, self.final_obs_key = xp, num_envs, autoreset, final_obs, final_obs_key
        self.render_mode = "rgb_array"
        self.single_observation_space = gym.spaces.Box(-1e6, 1e6, (OBS,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.ids = xp.arange(num_envs)
        self.episode = xp.zeros(num_envs, "int64") - 1
        self.pending = xp.zeros(num_envs, "bool")

    def _reset_rows(self, mask):
        xp = self.xp
        self.episode = xp.where(mask, self.episode + 1, self.episode)
        self.t = xp.where(mask, xp.zeros(self.num_envs, "int64"), self.t)
        self.length = xp.where(mask, episode_length(self.ids, self.episode), self.length)
        fresh = xp.stack([xp.astype(self.ids % 50, "float32"), xp.astype(self.episode % 50, "float32"),
                          xp.zeros(self.num_envs, "float32")], 1)
        self.pos = xp.where(mask[:, None], fresh, self.pos)

    def reset(self, *, seed=None, options=None):
        xp, n = self.xp, self.num_envs
        options = options or {}
        if not hasattr(self, "t"):
            self.t, self.length, self.pos = xp.zeros(n, "int64"), xp.zeros(n, "int64"), xp.zeros((n, OBS), "float32")
        if options.get("reset_mask") is not None:
            mask = xp.asarray(options["reset_mask"], "bool")
        elif options.get("env_idx") is not None:
            m = np.zeros(n, bool)
            m[np.asarray(options["env_idx"])] = True
            mask = xp.asarray(m, "bool")
        else:
            mask = xp.zeros(n, "bool") | True
        self._reset_rows(mask)
        self.pending = xp.where(mask, xp.zeros(n, "bool"), self.pending)
        return self.pos, {}

    def step(self, actions):
        xp, n = self.xp, self.num_envs
        a = xp.astype(actions, "int64")
        resetting = self.pending
        if self.autoreset == "next-step":
            self._reset_rows(resetting)
        moving = ~resetting if self.autoreset == "next-step" else xp.zeros(n, "bool") | True
        t = xp.where(moving, self.t + 1, self.t)
        delta = xp.stack([xp.astype(a, "float32"), xp.astype(t, "float32"), xp.zeros(n, "float32") + 1], 1)
        self.pos = xp.where(moving[:, None], self.pos + delta, self.pos)
        self.t = t
        over = moving & (t >= self.length)
        term = over & (self.length % 2 == 0)
        trunc = over & (self.length % 2 == 1)
        reward = xp.where(moving, xp.astype(a, "float32") - 0.5, xp.zeros(n, "float32"))
        info = {}
        if self.autoreset == "same-step":
            final = self.pos
            self._reset_rows(over)
            if self.final_obs:
                info = {self.final_obs_key: final, "_" + self.final_obs_key: over}
        else:
            self.pending = over
        return self.pos, reward, term, trunc, info

    def render(self):
        xp, n = self.xp, self.num_envs
        base = xp.astype((self.ids + 10 * self.t) % 200, "int64")
        img = xp.stack([base, base + 20, base + 40], 1)  # n x 3
        img = img[:, None, None, :] + xp.zeros((n, FRAME, FRAME, 3), "int64")
        return xp.astype(img, "uint8")


def reference(i, autoreset, actions):
    """Sub-env ``i``'s episodes as the single env steps them: dicts of obs (reset + steps), act, rew, term, trunc.

    ``actions``: the batched actions, one array per step; a reset-mask loop resets ended sub-envs after each step.
    """
    episode = 0
    pos, t, length = reset_obs(i, episode), 0, episode_length(i, episode)
    episodes = [{"obs": [pos.copy()], "act": [], "rew": [], "term": [], "trunc": []}]
    pending = False
    for acts in actions:
        a = int(acts[i])
        if pending:
            episode += 1
            pos, t, length = reset_obs(i, episode), 0, episode_length(i, episode)
            episodes.append({"obs": [pos.copy()], "act": [], "rew": [], "term": [], "trunc": []})
            pending = False
            if autoreset == "next-step":
                continue
        t += 1
        pos = pos + np.array([a, t, 1], np.float32)
        ep = episodes[-1]
        over = t >= length
        ep["obs"].append(pos.copy()), ep["act"].append(a), ep["rew"].append(a - 0.5)
        ep["term"].append(bool(over and length % 2 == 0)), ep["trunc"].append(bool(over and length % 2 == 1))
        if over:
            if autoreset == "same-step":
                episode += 1
                pos, t, length = reset_obs(i, episode), 0, episode_length(i, episode)
                episodes.append({"obs": [pos.copy()], "act": [], "rew": [], "term": [], "trunc": []})
            else:
                pending = True
    if autoreset == "reset-mask" and pending:
        episode += 1
        episodes.append({"obs": [reset_obs(i, episode)], "act": [], "rew": [], "term": [], "trunc": []})
    return episodes
