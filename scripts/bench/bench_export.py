"""What reading recordings out costs: Parquet export, envrec.to_arrow, Minari export, Ray's read_traces.

Records two workloads once (``--steps`` steps of an Atari-like env,
210x160x3 uint8 frames, and 10x as many CartPole steps; raw traces), then
times each reader over the same folder, interleaved over ``--rounds`` rounds;
prints medians (steps/s and MB/s of the arrays read, observations counted
once) and the spread (min-max) across rounds. The peer for the Parquet export
is pyarrow alone writing the same rows (``pq.write_table`` of the table
``to_arrow`` built, measured in the same rounds): what Parquet itself costs.

Minari's own storage re-reads the dataset folder's size after every
episode, so its export time grows with the square of the episode count:
``--readers`` picks the readers, ``--workload`` one workload, to measure it
at several sizes.

Usage: ``python scripts/bench/bench_export.py [--steps 20000] [--rounds 3]
[--workload atari|cartpole] [--readers "parquet export,to_arrow"]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings

import envrec
from envrec.bench.variants import FrameEnv
from envrec.export import to_arrow, to_minari, to_parquet


def record(folder: str, steps: int, env) -> int:
    """Record ``steps`` steps; the arrays' bytes."""
    env = envrec.RecordTrace(env, folder)
    env.reset(seed=0)
    for t in range(steps):
        _, _, term, _, _ = env.step(0)
        if term:
            env.reset(seed=t)
    env.close()
    return sum(int(b.get("array_bytes", 0)) for r in envrec.TraceReader(folder).recordings for b in r.batches)


def run_parquet(folder: str, scratch: str) -> None:
    out = os.path.join(scratch, "pq")
    to_parquet(folder, out)
    shutil.rmtree(out)


def run_arrow(folder: str, scratch: str) -> None:
    to_arrow(folder)


_tables: dict[str, object] = {}


def run_pyarrow_alone(folder: str, scratch: str) -> None:
    import pyarrow.parquet as pq

    table = _tables.setdefault(folder, to_arrow(folder))  # built once, outside the timing after the first round
    pq.write_table(table, os.path.join(scratch, "alone.parquet"))
    os.unlink(os.path.join(scratch, "alone.parquet"))


def run_minari(folder: str, scratch: str) -> None:
    os.environ["MINARI_DATASETS_PATH"] = os.path.join(scratch, "minari")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to_minari(folder, "bench/atari-like-v0")
    shutil.rmtree(os.environ["MINARI_DATASETS_PATH"])


def run_ray(folder: str, scratch: str) -> None:
    from envrec.ray import read_traces

    for _ in read_traces(folder).iter_batches(batch_size=None, batch_format="pyarrow"):
        pass


READERS = {"parquet export": run_parquet, "pyarrow alone": run_pyarrow_alone, "to_arrow": run_arrow,
           "minari export": run_minari, "ray read_traces": run_ray}


def measure(label: str, folder: str, root: str, array_bytes: int, rounds: int) -> None:
    steps = sum(e.length for e in envrec.TraceReader(folder))
    times: dict[str, list[float]] = {name: [] for name in READERS}
    for _ in range(rounds):
        for name, fn in READERS.items():
            t0 = time.perf_counter()
            fn(folder, root)
            times[name].append(time.perf_counter() - t0)
    peer = statistics.median(times["pyarrow alone"])
    print(f"{label}: {steps} steps, {array_bytes / 1e6:.0f} MB of arrays; medians of {rounds} rounds (spread min-max)")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:16s} {steps / med:9.0f} steps/s  {array_bytes / med / 1e6:7.1f} MB/s"
              f"  ({steps / max(ts):.0f}-{steps / min(ts):.0f} steps/s)  time {med / peer:.2f}x pyarrow alone")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workload", choices=("atari", "cartpole"), default=None, help="one workload only")
    ap.add_argument("--readers", default=None, help=f"comma-separated subset of: {', '.join(READERS)}")
    args = ap.parse_args()
    if args.readers:
        unknown = set(args.readers.split(",")) - set(READERS)
        if unknown:
            ap.error(f"unknown readers {sorted(unknown)}; choose from {', '.join(READERS)}")
        for name in list(READERS):
            if name not in args.readers.split(",") and name != "pyarrow alone":
                del READERS[name]
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="error")
    root = tempfile.mkdtemp(prefix="envrec-bench-export-")
    try:
        import gymnasium as gym

        workloads = (("atari", "Atari-like 210x160x3", lambda: FrameEnv(frames="game"), args.steps),
                     ("cartpole", "CartPole-v1", lambda: gym.make("CartPole-v1"), 10 * args.steps))
        for key, label, make, n in workloads:
            if args.workload not in (None, key):
                continue
            folder = os.path.join(root, label.split()[0])
            array_bytes = record(folder, n, make())
            _tables.pop(folder, None)
            run_pyarrow_alone(folder, root)  # builds the peer's table before the timed rounds
            measure(label, folder, root, array_bytes, args.rounds)
            _tables.clear()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ray.shutdown()


if __name__ == "__main__":
    main()
