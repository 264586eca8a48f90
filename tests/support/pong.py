"""A short real ALE Pong recording (ale-py ships its ROM): traces and a clip of each episode, as the viewer's tests need."""

from __future__ import annotations

import gymnasium as gym

import envrec

PONG_STEPS = 40  # steps per episode (max_episode_steps): a few seconds of clip at PONG_FPS
PONG_FPS = 10


def record_pong(folder, episodes: int = 2, *, name_prefix: str = "pong") -> list:
    """Record ``episodes`` Pong episodes of ``PONG_STEPS`` steps, the first reset with ``seed=3``, the others unseeded,
    with a clip of each at ``PONG_FPS``; the episodes as ``TraceReader`` reads them back."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", render_mode="rgb_array", max_episode_steps=PONG_STEPS)
    env = envrec.RecordVideo(env, str(folder), episode_trigger=lambda e: True, fps=PONG_FPS)
    env = envrec.RecordTrace(env, folder, name_prefix=name_prefix)
    env.action_space.seed(5)
    for k in range(episodes):
        env.reset(seed=3 if k == 0 else None)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    env.close()
    return list(envrec.TraceReader(folder))
