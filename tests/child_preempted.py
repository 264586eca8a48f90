"""An env process for the preemption tests: records, prints its workers' pids and "ready", then waits.

Usage: python child_preempted.py FOLDER STEPS [--video] [--close-on-signals] [--ship-to URL]
The last episode stays open (no reset after it) and nothing is closed: what
the workers hold when the signal comes is all the recording there is.
"""

import argparse
import json

import gymnasium as gym
from support.processes import end_as_told

import envrec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("steps", type=int)
    parser.add_argument("--video", action="store_true")
    parser.add_argument("--close-on-signals", action="store_true")
    parser.add_argument("--ship-to", default=None)
    args = parser.parse_args()
    if args.close_on_signals:
        envrec.close_on_signals()
    env = gym.make("CartPole-v1", render_mode="rgb_array" if args.video else None)
    env = envrec.RecordTrace(env, args.folder, ship_to=args.ship_to)
    if args.video:
        env = envrec.RecordVideo(env, args.folder, episode_trigger=lambda e: True, ship_to=args.ship_to)
    pids = [env.stats()["worker_pid"]] if not args.video else [env.stats()["worker_pid"], env.env.stats()["worker_pid"]]
    env.reset(seed=0)
    for _ in range(args.steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    print(json.dumps(pids), flush=True)
    end_as_told("wait")


if __name__ == "__main__":
    main()
