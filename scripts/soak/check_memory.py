"""Is memory flat in episode length? One long episode of Atari-sized frames, RSS sampled as it runs.

Records a single episode of ``--steps`` steps (default 100,000) of 210x160x3
uint8 observations with ``envrec.RecordTrace`` and prints the RSS of the env
process and of the serializer at checkpoints, then the growth between the
first checkpoint and the end. Buffering the episode would need ~10 GB.
Usage: ``python scripts/soak/check_memory.py [--steps 100000] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import psutil

import envrec
from envrec.bench.variants import FrameEnv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--out", default=None, help="folder for the trace (default: a temporary one, removed after)")
    args = p.parse_args()
    folder = args.out or tempfile.mkdtemp(prefix="envrec-memory-")
    try:
        # raw (compression=None): the read-back then maps the ~10 GB of frames instead of decompressing them into memory
        env = envrec.RecordTrace(FrameEnv(210, 160, length=None), folder, compression=None)
        env.reset()
        procs = {"env": psutil.Process(), "serializer": psutil.Process(env.stats()["worker_pid"])}
        samples = []
        checkpoints = sorted({args.steps // 10 * k for k in range(1, 11)})
        t0 = time.monotonic()
        step = 0
        for cp in checkpoints:
            while step < cp:
                env.step(0)
                step += 1
            rss = {k: pr.memory_info().rss / 2**20 for k, pr in procs.items()}
            samples.append(rss)
            print(f"step {step:>7}: " + ", ".join(f"{k} RSS {v:7.1f} MiB" for k, v in rss.items()), flush=True)
        env.close()
        elapsed = time.monotonic() - t0
        ep = envrec.TraceReader(folder)[0]
        assert ep.length == args.steps and ep.observations.shape[0] == args.steps + 1
        growth = {k: samples[-1][k] - samples[0][k] for k in procs}
        print(f"{args.steps} steps in {elapsed:.0f} s, {ep.observations.nbytes / 2**30:.1f} GiB of observations read back")
        print("RSS growth from the first checkpoint to the last: " + ", ".join(f"{k} {v:+.1f} MiB" for k, v in growth.items()))
    finally:
        if args.out is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
