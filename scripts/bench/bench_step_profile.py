"""Where does a CartPole trace step's time go? The env-side path call by call, and a loop for callgrind.

``--parts``: each piece of ``TraceRecorder.add_step``'s path timed alone in a tight loop (the least of
5 repeats of 50,000 calls, µs per call), then ``RecordTrace.step`` and the bare step in a loop.
``--steps N [--variant bare|trace|untimed|inprocess]``: N balanced CartPole steps and nothing else, for
an instruction count that load cannot move: run it under ``valgrind --tool=callgrind`` with N=0 and
N=10000; the difference of the totals over N is the instructions per step (repeat with ``bare``, and with
``inprocess``: gym-recording's in-process writer, ``envrec.bench.variants.InProcessTrace``).
Usage: ``python scripts/bench/bench_step_profile.py --parts`` or ``--steps 10000 --variant trace``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import timeit

import gymnasium as gym
import numpy as np

import envrec
from envrec.bench.variants import InProcessTrace
from envrec.supervision.stats import CallTimes


def steps(variant: str, n: int) -> None:
    """N steps of CartPole (episodes run to the 500-step limit), after 1,000 of warm-up."""
    env = gym.make("CartPole-v1")
    if variant == "inprocess":
        env = InProcessTrace(env, tempfile.mkdtemp())
    elif variant != "bare":
        env = envrec.RecordTrace(env, tempfile.mkdtemp(), timing=variant == "trace")
    obs, _ = env.reset(seed=0)
    t0 = 0.0
    for i in range(1000 + n):
        if i == 1000:
            t0 = time.perf_counter()
        obs, _, terminated, truncated, _ = env.step(int(obs[2] + obs[3] > 0))
        if terminated or truncated:
            obs, _ = env.reset()
    print(f"{variant}: {(time.perf_counter() - t0) / max(n, 1) * 1e6:.3f} µs/step", file=sys.stderr)
    env.close()


def parts(calls: int = 50_000) -> None:
    """Each piece of the path timed alone."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    folder = tempfile.mkdtemp()
    rec = envrec.TraceRecorder(f"{folder}/a", env.observation_space, env.action_space)
    rec.add_reset(obs)
    stream, packer, times = rec._stream, rec._packer, CallTimes()
    (put_obs,) = packer.step._fns  # the Discrete action is packed with the header (DiscreteStepPacker)
    names = {"rec": rec, "stream": stream, "packer": packer, "ring": stream.ring, "obs": obs, "times": times,
             "to_int": packer.step._to_int, "np_one": np.int64(1), "put_obs": put_obs, "data": stream.ring.data,
             "perf_counter_ns": time.perf_counter_ns}
    pieces = {
        "add_step (all of it)": "rec.add_step(1, obs, 1.0, False, False, {})",
        "call_lock (RLock enter+exit)": "with rec._lock: pass",
        "Stream.check_open": "stream.check_open()",
        "Stream.send_call + write_one_each": "stream.send_call(packer.step.write_one_each, 0, 1, 1, obs, b'', (1.0, False, False))",
        "DiscreteStepPacker.write_one_each": "packer.step.write_one_each(ring, 0, 1, 1, obs, b'', (1.0, False, False))",
        "to_int of a numpy action (a Python int skips it)": "to_int(np_one)",
        "put observation (Box float32[4])": "put_obs(obs, data, 128)",
        "perf_counter_ns x2": "perf_counter_ns(); perf_counter_ns()",
        "CallTimes.add": "times.add(1234)",
    }
    for label, stmt in pieces.items():
        best = min(timeit.repeat(stmt, globals=names, number=calls, repeat=5)) / calls * 1e6
        print(f"{label:40s} {best:7.3f} µs")
    rec.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", action="store_true")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--variant", choices=("bare", "trace", "untimed", "inprocess"), default="trace")
    args = p.parse_args()
    if args.steps is not None:
        steps(args.variant, args.steps)
    else:
        parts()


if __name__ == "__main__":
    main()
