"""Every step()/reset() call above a threshold while recording, and whether a full ring explains it.

Records CartPole-v1 (traces and a video of every episode, envrec's defaults)
for ``--runs`` runs of ``--steps`` steps and lists each call longer than
``--ms`` milliseconds with the time the recorders spent blocked on a full
ring during it (``blocked_s`` before and after the call). A long call with no
blocked time has another cause, which is what this script is for finding.
pygame is initialised before the runs (its first render takes ~0.2 s with or
without recording).
Usage: ``python scripts/soak/long_calls.py [--runs 3] [--steps 500] [--ms 20] [--nice N] [--behind-nice N]``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import tempfile
import time

import gymnasium as gym

import envrec


def blocked(env) -> float:
    total = 0.0
    while isinstance(env, gym.Wrapper):
        rec = getattr(env, "recorder", None)
        if rec is not None:
            total += rec.stats()["blocked_s"]
        env = env.env
    return total


def one_run(folder: str, steps: int, threshold_s: float, settings: envrec.VideoSettings) -> list[tuple[int, str, float, float]]:
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env = envrec.RecordVideo(env, os.path.join(folder, "video"), episode_trigger=lambda e: True, settings=settings)
    env = envrec.RecordTrace(env, os.path.join(folder, "trace"))
    env.action_space.seed(0)
    long_calls = []
    done = True
    in_episode = 0
    for t in range(steps):
        b0, t0 = blocked(env), time.perf_counter()
        what = "reset" if done else f"step {in_episode + 1} of its episode"
        if done:
            env.reset(seed=t)
            done, in_episode = False, 0
        else:
            in_episode += 1
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
        dt = time.perf_counter() - t0
        if dt > threshold_s:
            long_calls.append((t, what, dt, blocked(env) - b0))
    t0 = time.perf_counter()
    env.close()
    long_calls.append((steps, "close", time.perf_counter() - t0, 0.0))
    return long_calls


def clips_by_nice(folder: str) -> str:
    """How many clips ran their ffmpeg at each niceness (``ffmpeg_nice``: VideoSettings.nice or behind_nice)."""
    counts = collections.Counter()
    for path in glob.glob(os.path.join(folder, "video", "*.meta.json")):
        with open(path) as f:
            counts[json.load(f).get("ffmpeg_nice")] += 1
    return ", ".join(f"{n} at nice {nice}" for nice, n in sorted(counts.items(), key=lambda kv: str(kv[0])))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--ms", type=float, default=20.0)
    p.add_argument("--nice", type=int, help="VideoSettings.nice (default: envrec's)")
    p.add_argument("--behind-nice", type=int, help="VideoSettings.behind_nice (default: envrec's)")
    args = p.parse_args()
    chosen = {"nice": args.nice, "behind_nice": args.behind_nice}
    settings = envrec.VideoSettings(**{k: v for k, v in chosen.items() if v is not None})
    warm = gym.make("CartPole-v1", render_mode="rgb_array")  # pygame's first render takes ~0.2 s: not envrec's
    warm.reset(seed=0)
    warm.render()
    warm.close()
    unexplained = 0
    for r in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            calls = one_run(folder, args.steps, args.ms / 1e3, settings)
            clips = clips_by_nice(folder)
        print(f"run {r + 1}: {len(calls) - 1} call(s) above {args.ms:g} ms; clips: {clips}")
        for t, what, dt, blocked_s in calls:
            cause = "full ring" if blocked_s > 0.5 * dt else "close (not a step)" if what == "close" else "OTHER"
            unexplained += cause == "OTHER"
            print(f"  call {t:>4} {what:<25} {dt * 1e3:7.1f} ms, blocked {blocked_s * 1e3:7.1f} ms: {cause}")
    print(f"calls above {args.ms:g} ms not explained by a full ring: {unexplained}")


if __name__ == "__main__":
    main()
