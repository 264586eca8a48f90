"""PPO on CartPole with RLlib, every EnvRunner's envs recorded by envrec; then the traces read back with Ray Data.

Needs ``pip install 'envrec[ray]' 'ray[rllib]' torch`` (a CPU build is
enough). Usage: ``python scripts/examples/rllib_ppo.py [--iterations 3] [--runners 2]
[--envs-per-runner 2] [--out recordings/ppo]``. Prints the training return
per iteration, then how many steps the recordings hold per runner folder and
in all, counted by ``envrec.ray.read_traces``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import gymnasium as gym
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.tune.registry import register_env

from envrec.ray import read_traces, recording_env_creator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--runners", type=int, default=2)
    ap.add_argument("--envs-per-runner", type=int, default=2)
    ap.add_argument("--out", default="recordings/ppo")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    ray.init(num_cpus=max(2, args.runners + 1), include_dashboard=False, log_to_driver=False)
    register_env("recorded-cartpole", recording_env_creator(lambda config: gym.make("CartPole-v1"), out, compression="zstd"))
    config = (
        PPOConfig()
        .environment("recorded-cartpole")
        .env_runners(num_env_runners=args.runners, num_envs_per_env_runner=args.envs_per_runner)
        .training(train_batch_size_per_learner=2000, minibatch_size=250, num_epochs=3)
    )
    algo = config.build_algo()
    t0 = time.perf_counter()
    for i in range(args.iterations):
        result = algo.train()
        ret = result.get("env_runners", {}).get("episode_return_mean")
        steps = result.get("num_env_steps_sampled_lifetime") or result.get("env_runners", {}).get("num_env_steps_sampled_lifetime")
        print(f"iteration {i + 1}: episode_return_mean {ret}, env steps sampled (lifetime) {steps}", flush=True)
    algo.stop()  # closes every runner's envs: everything recorded is committed
    took = time.perf_counter() - t0
    folders = sorted(f for f in os.listdir(out) if f.startswith("runner-"))
    ds = read_traces(out)
    print(f"{len(folders)} runner folder(s) under {out}: {', '.join(folders)}")
    print(f"read_traces: {ds.count()} steps recorded in {took:.0f} s of training")
    ray.shutdown()


if __name__ == "__main__":
    main()
