"""What does recording every frame cost? envrec vs Gymnasium's RecordVideo vs a synchronous pipe.

Runs ``envrec bench`` with the video variants on CartPole-v1 (rgb_array,
600x400) and, when ale-py is installed (``pip install '.[atari]'``),
ALE/Pong-v5 (210x160), and prints ratios to ``render`` — the env stepped with
``render()`` called each step and the frame thrown away — since producing
frames is the env's cost, not the recorder's. Usage:
``python scripts/bench/bench_video.py [--rounds 7] [--seconds 1.5] [--env ID ...]``.
"""

from __future__ import annotations

import argparse

import gymnasium as gym

from envrec.bench import format_table, rows_json, run_bench
from envrec.env_ids import load_env_namespace

VARIANTS = ("none", "render", "envrec-video", "gymnasium-video", "sync-pipe")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seconds", type=float, default=1.5, help="seconds per variant per round")
    p.add_argument("--env", action="append", help="env id (repeatable; default CartPole-v1 and ALE/Pong-v5)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    envs = args.env or ["CartPole-v1", "ALE/Pong-v5"]
    missing = [e for e in envs if load_env_namespace(e)]
    if missing:
        print(f"ale-py is not installed: skipping {', '.join(missing)} (pip install '.[atari]')")
        envs = [e for e in envs if e not in missing]
    for env_id in envs:
        rows = run_bench(lambda env_id=env_id: gym.make(env_id, render_mode="rgb_array"), VARIANTS, args.rounds, args.seconds)
        render = next(r for r in rows if r.variant == "render")
        if args.json:
            print(rows_json(rows))
            continue
        print(f"\n{env_id}: {args.rounds} interleaved rounds of {args.seconds:g} s per variant, medians")
        print(format_table(rows))
        print("relative to 'render' (frames produced, not recorded):")
        for r in rows:
            print(f"  {r.variant:<16} {r.steps_per_s / render.steps_per_s:5.2f}x")


if __name__ == "__main__":
    main()
