"""Recording code as RL code is really written: scripts without a guard, vector-env thunks, pool workers.

Module-level functions so that ``spawn`` contexts (AsyncVectorEnv, Pool) can pickle them by name.
"""

from __future__ import annotations

import multiprocessing as mp
import os

import gymnasium as gym
import numpy as np

import envrec

from .episodes import episode_lengths

# A user's training script, without an ``if __name__ == "__main__":`` guard. It notes each run of its
# top level in runs.txt (a worker that re-ran it would add a line) and prints its episode lengths.
UNGUARDED_SCRIPT = """\
import json, os, sys
import gymnasium as gym
import numpy as np
import envrec

out = sys.argv[1]
with open(os.path.join(out, "runs.txt"), "a") as f:
    f.write(f"{os.getpid()}\\n")
env = gym.make("CartPole-v1", render_mode="rgb_array")
env = envrec.RecordVideo(env, os.path.join(out, "video"), episode_trigger=lambda e: True)
env = envrec.RecordTrace(env, os.path.join(out, "trace"))
rng = np.random.default_rng(0)
lengths = []
env.reset(seed=0)
for episode in range(3):
    n, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        n, done = n + 1, terminated or truncated
    lengths.append(n)
    if episode < 2:
        env.reset()
env.close()
print(json.dumps(lengths))
"""


def actions_for(n_envs: int, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, (steps, n_envs))


def reference_episodes(seed: int, actions: np.ndarray) -> list[dict]:
    """A CartPole run alone, as a next-step-autoreset vector env runs its sub-env with ``actions``."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    episodes = [{"observations": [obs], "actions": [], "rewards": []}]
    pending_reset = False
    for a in actions:
        if pending_reset:  # the vector env spends this step on the reset; the action is ignored
            obs, _ = env.reset()
            episodes.append({"observations": [obs], "actions": [], "rewards": []})
            pending_reset = False
            continue
        obs, reward, terminated, truncated, _ = env.step(int(a))
        ep = episodes[-1]
        ep["observations"].append(obs)
        ep["actions"].append(int(a))
        ep["rewards"].append(reward)
        pending_reset = terminated or truncated
    env.close()
    return episodes


def assert_trace_equals(folder, reference: list[dict]) -> None:
    """Every episode of the trace in ``folder`` bit for bit equal to ``reference``."""
    reader = envrec.TraceReader(folder)
    assert len(reader) == len(reference), (len(reader), len(reference))
    for ep, ref in zip(reader, reference, strict=True):
        assert np.array_equal(ep.observations, np.array(ref["observations"], np.float32))
        assert ep.actions.tolist() == ref["actions"]
        assert ep.rewards.tolist() == ref["rewards"]


def recording_cartpole(folder: str, index: int, video: bool):
    """A sub-env thunk's body (CleanRL's ``make_env``): trace every sub-env, video of sub-env 0."""
    env = gym.make("CartPole-v1", render_mode="rgb_array" if video else None)
    if video:
        env = envrec.RecordVideo(env, os.path.join(folder, f"video{index}"), episode_trigger=lambda e: True)
    return envrec.RecordTrace(env, os.path.join(folder, f"env{index}"), batch_bytes=2_000)


class RecordingThunk:
    """A picklable thunk, for AsyncVectorEnv with the spawn context."""

    def __init__(self, folder: str, index: int) -> None:
        self.folder, self.index = folder, index

    def __call__(self):
        return recording_cartpole(self.folder, self.index, video=self.index == 0)


def record_in_pool_worker(folder: str) -> tuple[bool, list[int]]:
    """Runs in a ``multiprocessing.Pool`` worker (daemonic): two seeded episodes, closed here."""
    env = envrec.RecordTrace(gym.make("CartPole-v1"), folder)
    lengths = episode_lengths(env, 2, 3, reseed=False, action_seed=3)
    env.close()
    return mp.current_process().daemon, lengths
