"""Recording a vector env: 8 CartPole-v1 sub-envs, every step, side by side in one run.

Variants, interleaved round by round: ``none``; ``trace`` (``RecordVectorTrace``:
one record per vector step, a trace per sub-env); ``trace+video`` (plus
``RecordVectorVideo`` of sub-env 0, every episode). Prints vector steps/s,
the ratio to ``none`` and the longest single step. Sub-envs are stepped in
this process (``--mode sync``, default) or in Gymnasium's worker processes
(``--mode async``). Usage: ``python scripts/bench/bench_vector.py [--rounds 7] [--seconds 1.5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import gymnasium as gym

import envrec


def make(n: int, mode: str, render: bool):
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode=mode, render_mode="rgb_array" if render else None)


def run_for(env, seconds: float) -> tuple[int, float, float]:
    pc = time.perf_counter
    steps, longest = 0, 0.0
    start = pc()
    while pc() - start < seconds:
        t0 = pc()
        env.step(env.action_space.sample())
        longest = max(longest, pc() - t0)
        steps += 1
    return steps, pc() - start, longest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--mode", choices=("sync", "async"), default="sync")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seconds", type=float, default=1.5)
    args = p.parse_args()
    n = args.num_envs
    with tempfile.TemporaryDirectory(prefix="envrec-bench-vector-") as folder:
        variants = {
            "none": make(n, args.mode, False),
            "trace": envrec.RecordVectorTrace(make(n, args.mode, False), f"{folder}/trace"),
            "trace+video": envrec.RecordVectorVideo(
                envrec.RecordVectorTrace(make(n, args.mode, True), f"{folder}/both"),
                f"{folder}/both",
                sub_envs=(0,),
                episode_trigger=lambda e: True,
            ),
        }
        for env in variants.values():
            env.reset(seed=0)
            run_for(env, 0.5)
        rates = {k: [] for k in variants}
        longest = {k: 0.0 for k in variants}
        for r in range(args.rounds):
            for k, env in variants.items():
                steps, secs, worst = run_for(env, args.seconds)
                rates[k].append(steps / secs)
                longest[k] = max(longest[k], worst)
            print(f"  round {r + 1}/{args.rounds}", end="\r", flush=True)
        for env in variants.values():
            env.close()
    base = statistics.median(rates["none"])
    print(f"{n} CartPole-v1 sub-envs ({args.mode}), {args.rounds} interleaved rounds of {args.seconds:g} s, medians")
    print(f"{'variant':<12} {'vector steps/s':>15} {'ratio':>7} {'+µs/step':>9} {'longest':>9}")
    for k in variants:
        med = statistics.median(rates[k])
        print(f"{k:<12} {med:>15.0f} {med / base:>6.2f}x {1e6 / med - 1e6 / base:>+9.1f} {longest[k] * 1e3:>7.1f}ms")


if __name__ == "__main__":
    main()
