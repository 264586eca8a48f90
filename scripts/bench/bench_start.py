"""What does starting a recorder cost? First ``reset()`` with a recorder vs without, side by side.

For each round, in one process (imports already warm, as in a training job):

* ``none``          ``gym.make`` + first ``reset()``
* ``trace``         the same wrapped in ``envrec.RecordTrace`` (the wrapper starts the serializer)
* ``trace+video``   ``envrec.RecordVideo`` around it as well (a second worker, the encoder)

It prints the median over ``--rounds`` of the time until the first ``reset()``
returns, the time until every worker reports ready (attached to its ring, its
output open), and ``close()``. Usage: ``python scripts/bench/bench_start.py [--rounds 10] [--pause 0.5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import gymnasium as gym

import envrec
from envrec.contract.records import Status


def _ready(env) -> bool:
    streams = []
    while env is not None:
        for attr in ("recorder", "video"):
            rec = getattr(env, attr, None)
            stream = getattr(rec, "_stream", None)
            if stream is not None:
                streams.append(stream)
        env = getattr(env, "env", None)
    return all(s.status(Status.READY) for s in streams)


def one_round(variant: str, folder: str) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    env = gym.make("CartPole-v1", render_mode="rgb_array" if "video" in variant else None)
    if "video" in variant:
        env = envrec.RecordVideo(env, f"{folder}/video", episode_trigger=lambda e: True)
    if "trace" in variant:
        env = envrec.RecordTrace(env, f"{folder}/trace")
    env.reset(seed=0)
    t_reset = time.perf_counter() - t0
    while variant != "none" and not _ready(env):
        time.sleep(0.001)
    t_ready = time.perf_counter() - t0
    t1 = time.perf_counter()
    env.close()
    return t_reset, t_ready, time.perf_counter() - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pause", type=float, default=0.5,
                        help="seconds between two rounds, as a notebook's cells or an evaluation's episodes are apart "
                             "(spare workers start meanwhile; 0: back to back, each round competing with them)")
    args = parser.parse_args()
    variants = ("none", "trace", "trace+video")
    results: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as folder:
        one_round("trace+video", f"{folder}/warm")  # imports, ffmpeg lookup
        for r in range(args.rounds):
            for v in variants:
                time.sleep(args.pause)
                results[v].append(one_round(v, f"{folder}/{r}-{v.replace('+', '-')}"))
    base = statistics.median(x[0] for x in results["none"])
    print(f"{'variant':<12} {'first reset ms':>15} {'+ vs none ms':>13} {'workers ready ms':>17} {'close ms':>9}")
    for v in variants:
        reset = statistics.median(x[0] for x in results[v])
        ready = statistics.median(x[1] for x in results[v])
        close = statistics.median(x[2] for x in results[v])
        print(f"{v:<12} {reset * 1e3:>15.1f} {(reset - base) * 1e3:>13.1f} {ready * 1e3:>17.1f} {close * 1e3:>9.1f}")


if __name__ == "__main__":
    main()
