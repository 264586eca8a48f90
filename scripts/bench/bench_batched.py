"""The env side's cost per batched step as ``num_envs`` grows: 16 sub-envs recorded, all recorded, none.

A batched simulator's step is stood in for by tensors made beforehand (torch CPU by default: observations of
``--obs`` float32 per sub-env, one action each, rewards, done flags with scattered per-sub-env episode ends),
so what is timed is ``RecordVectorTrace.record_step`` alone: the rows gathered, copied to the host and into the
ring. ``none`` times the same loop without a recorder. Time is the env thread's CPU time
(``time.thread_time``): neither the worker's (another process) nor a wait for ring room counts, so the figures
hold on a busy machine. With ``--backpressure drop`` a record that finds the ring full is dropped (counted,
printed) instead of waited for.

Prints, per ``num_envs``, microseconds per step (median of ``--repeats`` runs, the cases taken in turn) for
each case, the ratio all/16, and how each grew from the smallest ``num_envs`` to the largest. One vector
serializer writing every one of thousands of sub-envs keeps several files open per sub-env; where that passes
the process's open-file limit, the worker fails and the case prints ``nan`` with the reason.

Usage: ``python scripts/bench/bench_batched.py [--sizes 64 256 1024 2048 4096] [--steps 300] [--obs 48]
[--framework torch|numpy] [--backpressure drop|block]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import gymnasium as gym
import numpy as np

from envrec.record.batched import BatchedEnv
from envrec.record.vector import RecordVectorTrace

RECORDED = 16


class Stand(gym.Env):
    """Only what ``BatchedEnv`` reads: ``num_envs`` and the batched spaces."""

    def __init__(self, n: int, obs: int) -> None:
        self.num_envs = n
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (n, obs), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(np.full(n, 3))


def batches(n: int, obs: int, count: int, framework: str) -> list[tuple]:
    """``count`` steps' (actions, obs, rewards, terminations, truncations) with ~1/50 of sub-envs ending each."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        done = rng.random(n) < 0.02
        step = (rng.integers(0, 3, n), rng.standard_normal((n, obs)).astype(np.float32),
                rng.standard_normal(n).astype(np.float32), done & (rng.random(n) < 0.5), done & (rng.random(n) >= 0.5))
        if framework == "torch":
            import torch

            step = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in step)
        out.append(step)
    return out


def run(n: int, case: str, args: argparse.Namespace, pool: list[tuple]) -> float:
    """Microseconds per ``record_step`` (or per loop turn without a recorder)."""
    env = BatchedEnv(Stand(n, args.obs), autoreset="same-step")
    rec = None
    if case != "none":
        sub_envs = list(np.linspace(0, n - 1, RECORDED).astype(int)) if case == "16" else None
        rec = RecordVectorTrace(env, tempfile.mkdtemp(prefix="bench_batched."), sub_envs=sub_envs,
                                backpressure=args.backpressure, batch_bytes=20_000_000)
        rec.record_reset(pool[0][1], {})
    t0 = time.thread_time()
    for k in range(args.steps):
        a, o, r, te, tr = pool[k % len(pool)]
        if rec is not None:
            rec.record_step(a, o, r, te, tr, {})
    dt = time.thread_time() - t0
    if rec is not None:
        rec.close()
        stats = rec.stats()
        if stats["broken"]:
            print(f"    ({case} at {n}: the worker failed: {str(stats['broken'])[:120]})")
            return float("nan")
        if stats["records_dropped"]:
            print(f"    ({case} at {n}: {stats['records_dropped']} of {args.steps} records dropped: the worker fell behind)")
    return dt / args.steps * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 2048, 4096])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--obs", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--framework", choices=["torch", "numpy"], default="torch")
    p.add_argument("--backpressure", choices=["drop", "block"], default="block")
    args = p.parse_args()
    table: dict[int, dict[str, float]] = {}
    for n in args.sizes:
        pool = batches(n, args.obs, 32, args.framework)
        times: dict[str, list[float]] = {"none": [], "16": [], "all": []}
        for _ in range(args.repeats):  # the cases in turn, so that a busy moment of the machine hits each alike
            for case, got in times.items():
                got.append(run(n, case, args, pool))
        table[n] = {case: statistics.median(got) for case, got in times.items()}
    print(f"{args.framework} CPU batches, {args.obs} float32 observations per sub-env; us per batched step (env side)")
    print(f"{'num_envs':>9} {'none':>8} {'16 rec':>8} {'all rec':>9} {'all/16':>7}")
    for n, row in table.items():
        print(f"{n:>9} {row['none']:>8.1f} {row['16']:>8.1f} {row['all']:>9.1f} {row['all'] / row['16']:>7.1f}")
    lo, hi = args.sizes[0], args.sizes[-1]
    hi_all = max((n for n in args.sizes if table[n]["all"] == table[n]["all"]), default=lo)  # the largest not nan
    print(f"16 recorded: {hi} sub-envs cost {table[hi]['16'] / table[lo]['16']:.2f}x what {lo} cost; "
          f"all recorded: {hi_all} cost {table[hi_all]['all'] / table[lo]['all']:.1f}x what {lo} cost")


if __name__ == "__main__":
    main()
