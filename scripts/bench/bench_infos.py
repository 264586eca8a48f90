"""What do step infos cost the env process? ``pack_info`` and ``add_step`` per info shape, side by side.

For each info shape (none, Atari's, a MuJoCo-like dict of numpy floats, a nested
dict with a small array, and one with a user object) it times, interleaved round
by round, ``pickle.dumps`` of the info (what any hand-off to another process
costs at least), envrec's ``pack_info`` (its checks, then its pickler) and a
whole ``TraceRecorder.add_step`` of a CartPole-sized step carrying that info.
Prints the medians over ``--rounds`` in µs per call and ``pack_info``'s ratio
to ``pickle.dumps``. Run it on two checkouts to compare them.
Usage: ``python scripts/bench/bench_infos.py [--rounds 15] [--calls 20000]``.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import tempfile
import time

import numpy as np
from gymnasium import spaces

import envrec
from envrec.formats.infos import pack_info


class UserThing:
    def __repr__(self) -> str:
        return "UserThing()"


INFOS = {
    "empty": {},
    "atari": {"lives": 3, "episode_frame_number": 1200, "frame_number": 5400},
    "mujoco": {k: np.float64(i * 0.5) for i, k in enumerate(("x_position", "y_position", "distance_from_origin",
                                                                 "x_velocity", "y_velocity", "reward_ctrl", "reward_run"))},
    "nested": {"stats": {"a": 1.0, "b": [1, 2, 3]}, "mask": np.ones(4, np.int8), "name": "level-1"},
    "user-object": {"thing": UserThing(), "n": 1},
}


def _per_call_us(fn, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    obs = np.zeros(4, np.float32)
    with tempfile.TemporaryDirectory() as folder:
        rec = envrec.TraceRecorder(folder, spaces.Box(-5, 5, (4,), np.float32), spaces.Discrete(2), backpressure="drop")
        rec.add_reset(obs, {})
        table: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name, info in INFOS.items():
                table.setdefault((name, "pickle"), []).append(_per_call_us(lambda i=info: pickle.dumps(i, 5), args.calls))
                table.setdefault((name, "pack_info"), []).append(_per_call_us(lambda i=info: pack_info(i), args.calls))
                table.setdefault((name, "add_step"), []).append(
                    _per_call_us(lambda i=info: rec.add_step(1, obs, 1.0, False, False, i), args.calls))
        rec.close()
    print(f"{'info':<12} {'pickle.dumps':>13} {'pack_info':>10} {'ratio':>6} {'add_step':>9}   (µs per call, median of {args.rounds})")
    for name in INFOS:
        p, k, a = (statistics.median(table[(name, what)]) for what in ("pickle", "pack_info", "add_step"))
        print(f"{name:<12} {p:>13.2f} {k:>10.2f} {k / p:>6.2f} {a:>9.2f}")


if __name__ == "__main__":
    main()
