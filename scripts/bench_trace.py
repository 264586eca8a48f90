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
envrec per call from its own stats. Usage: ``python scripts/bench_trace.py [--rounds 9] [--seconds 1]``.
"""

from __future__ import annotations

import argparse

import gymnasium as gym

from envrec.bench import format_table, rows_json, run_bench
from envrec.bench_variants import FrameEnv


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


if __name__ == "__main__":
    main()
