"""What does the lock that keeps records whole across threads cost a single-threaded ``add_step``?

One ``TraceRecorder`` on CartPole-like data (a float32 Box(4,) observation, a
Discrete(2) action, no info, call timing off), timed in alternating tight
loops: ``add_step`` as shipped (its ``threading.RLock`` taken and released
once per call, uncontended) against the same recorder with the lock swapped
for a stand-in whose ``__enter__``/``__exit__`` are C calls that do nothing
(``"".format``), so the difference is the lock's acquire and release alone.
Also the bare ``with lock: pass`` against the same stand-in. Prints the
median µs per call of each and the ratio.

Usage: ``python scripts/bench/bench_threads.py [--rounds 21] [--calls 20000]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import timeit

import gymnasium as gym
import numpy as np

import envrec


class NoLock:
    """A context manager that does nothing, in C: ``"".format`` takes any arguments and returns "" (falsy)."""

    __enter__ = "".format
    __exit__ = "".format


def add_step_costs(rounds: int, calls: int) -> dict[str, float]:
    """Median µs per ``add_step`` with the recorder's lock and with ``NoLock``, interleaved round by round."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action = np.int64(1)
    per_call: dict[str, list[float]] = {"lock": [], "no lock": []}
    with tempfile.TemporaryDirectory() as folder:
        rec = envrec.TraceRecorder(folder, env.observation_space, env.action_space, timing=False, batch_bytes=1 << 20)
        lock = rec._lock
        rec.add_reset(obs)
        for r in range(rounds):
            order = list(per_call.items()) if r % 2 == 0 else list(per_call.items())[::-1]  # neither always goes first
            for variant, costs in order:
                rec._lock = lock if variant == "lock" else NoLock()  # type: ignore[assignment]
                t0 = time.perf_counter()
                for _ in range(calls):
                    rec.add_step(action, obs, 1.0, False, False)
                costs.append((time.perf_counter() - t0) / calls * 1e6)
        rec._lock = lock
        rec.close()
    return {k: statistics.median(v) for k, v in per_call.items()}


def bare_costs(rounds: int, calls: int) -> dict[str, float]:
    """Median µs of ``with X: pass`` for an RLock and for ``NoLock``."""
    scope = {"lock": threading.RLock(), "nolock": NoLock()}
    lock = timeit.repeat("with lock: pass", globals=scope, number=calls, repeat=rounds)
    none = timeit.repeat("with nolock: pass", globals=scope, number=calls, repeat=rounds)
    return {"lock": statistics.median(lock) / calls * 1e6, "no lock": statistics.median(none) / calls * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    print(f"{'median µs per call':<28}{'with lock':>12}{'no lock':>12}{'difference':>12}{'ratio':>8}")
    for name, costs in (("add_step (CartPole-like)", add_step_costs(args.rounds, args.calls)),
                        ("with lock: pass", bare_costs(args.rounds, args.calls * 10))):
        lock, none = costs["lock"], costs["no lock"]
        print(f"{name:<28}{lock:>12.3f}{none:>12.3f}{lock - none:>12.3f}{lock / none:>8.3f}")


if __name__ == "__main__":
    main()
