"""What does trace recording cost the loop that steps the env? Side by side, in one run.

Variants, interleaved round by round so machine drift hits all alike:

* ``none``             the bare environment
* ``envrec-trace``     ``envrec.RecordTrace`` (one copy per array into shared memory; a worker writes)
* ``envrec-trace-untimed`` the same with its built-in call timing switched off: the difference is
                       what keeping the stats costs
* ``inprocess-trace``  a recorder in gym-recording's style: lists of arrays in the env process, each
                       batch encoded and written synchronously at an episode end

Environments: synthetic 210x160x3 uint8 frames whose step burns ``--frame-step-us`` of CPU
(an emulator's cost; a fresh frame each step), and CartPole-v1. Prints medians of steps/s, the
env-side µs per step above ``none``, the longest single step()/reset() call, and the time inside
envrec per call from its own stats. Usage: ``python scripts/bench/bench_trace.py [--rounds 9] [--seconds 1]``.
"""

from __future__ import annotations

import argparse

import gymnasium as gym

from envrec.bench import format_table, rows_json, run_bench
from envrec.bench.variants import FrameEnv


def stats_cost(rounds: int = 21, calls: int = 20000) -> tuple[float, float]:
    """Median µs per ``add_step`` with timing on and off, in alternating tight loops (CartPole-sized records)."""
    import statistics
    import tempfile
    import time

    import numpy as np

    import envrec

    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action = np.int64(1)
    with tempfile.TemporaryDirectory() as folder:
        recs = {
            timing: envrec.TraceRecorder(f"{folder}/{timing}", env.observation_space, env.action_space, timing=timing)
            for timing in (True, False)
        }
        per_call = {True: [], False: []}
        for rec in recs.values():
            rec.add_reset(obs)
        for _ in range(rounds):
            for timing, rec in recs.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    rec.add_step(action, obs, 1.0, False, False)
                per_call[timing].append((time.perf_counter() - t0) / calls * 1e6)
        for rec in recs.values():
            rec.close()
    return statistics.median(per_call[True]), statistics.median(per_call[False])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--seconds", type=float, default=1.0, help="seconds per variant per round")
    p.add_argument(
        "--frame-step-us",
        type=float,
        default=600.0,
        help="CPU each synthetic frame step burns (default 600: ~1600 steps/s, 165 MB/s of frames, "
        "well within what a disk absorbs; near 0 every recorder is bound by the disk, not by the env side)",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args()
    variants = ("none", "envrec-trace", "envrec-trace-untimed", "inprocess-trace")
    for label, make_env in (
        (f"frames 210x160x3, {args.frame_step_us:g} µs/step", lambda: FrameEnv(210, 160, step_us=args.frame_step_us)),
        ("CartPole-v1", lambda: gym.make("CartPole-v1")),
    ):
        rows = run_bench(make_env, variants, args.rounds, args.seconds)
        if args.json:
            print(rows_json(rows))
        else:
            print(f"\n{label}: {args.rounds} interleaved rounds of {args.seconds:g} s per variant, medians")
            print(format_table(rows))
    timed, untimed = stats_cost()
    print(f"\nstats cost, add_step in alternating tight loops: {timed:.2f} µs timed, {untimed:.2f} µs untimed "
          f"(+{timed - untimed:.2f} µs, {100 * (timed - untimed) / untimed:+.0f} %)")


if __name__ == "__main__":
    main()
