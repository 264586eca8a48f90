"""How long do workers take to commit what the ring holds after a SIGTERM to the whole process group?

Each round starts an env process that records 210x160x3 uint8 observations
(an Atari frame) in episodes of 200 steps as fast as it can into the default
64 MiB trace ring, so the ring is full or nearly so (``--compression zstd`` adds the serializer's
compression), SIGTERMs the process group as Slurm's ``scancel`` does, and
times until the serializer has exited with its final manifest written. It
prints, over ``--rounds``, the median and largest drain time, the bytes the
ring held at the signal (the producer's last report) and the steps read back
against the steps recorded (always equal). Figures for README, "When
something fails". The open episode is written out whole when the job ends, so
an episode far longer than these (endless ones) takes longer: its copy from
the serializer's spill files into the batch. Usage: ``python scripts/bench/bench_preemption.py [--rounds 5] [--compression zstd]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

import envrec

CHILD = r"""
import json, sys, numpy as np
from gymnasium import spaces
import envrec
rec = envrec.TraceRecorder(sys.argv[1], spaces.Box(0, 255, (210, 160, 3), np.uint8), spaces.Discrete(6),
                           compression=sys.argv[2] or None)
print(json.dumps({"worker": rec.worker_pid}), flush=True)
obs = np.random.default_rng(0).integers(0, 255, (210, 160, 3), dtype=np.uint8)
rec.add_reset(obs, {})
t = 0
while True:
    obs[0, 0, 0] = t % 256
    rec.add_step(t % 6, obs, 1.0, False, t % 200 == 199, {})
    t += 1
    if t % 200 == 0:
        rec.add_reset(obs, {})
    if t % 50 == 0:
        print(json.dumps({"steps": t, "backlog": rec._stream.backlog_bytes}), flush=True)
"""


def one_round(folder: str, compression: str, record_s: float) -> tuple[float, int, int, int]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, folder, compression], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    worker = psutil.Process(json.loads(proc.stdout.readline())["worker"])
    deadline = time.monotonic() + record_s
    last: dict = {"steps": 0, "backlog": 0}
    while time.monotonic() < deadline:
        last = json.loads(proc.stdout.readline())
    os.killpg(proc.pid, signal.SIGTERM)
    t0 = time.perf_counter()
    worker.wait(60)
    took = time.perf_counter() - t0
    proc.wait(10)
    rest = proc.stdout.read().splitlines()  # reports written after the one read last
    steps = json.loads(rest[-1])["steps"] if rest else last["steps"]
    read_back = sum(ep.length for ep in envrec.TraceReader(folder))
    return took, last["backlog"], steps, read_back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compression", default="")
    parser.add_argument("--record-s", type=float, default=3.0, help="how long each round records before the signal")
    args = parser.parse_args()
    times, backlogs = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            took, backlog, steps, read_back = one_round(folder, args.compression, args.record_s)
        times.append(took)
        backlogs.append(backlog)
        print(f"round {r}: drained and committed in {took * 1000:.0f} ms; ring held {backlog / 2**20:.1f} MiB; "
              f"steps recorded >= {steps}, read back {read_back}")
    print(f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms, "
          f"ring held {statistics.median(backlogs) / 2**20:.1f} MiB (median) of 64 MiB; compression: {args.compression or 'none'}")


if __name__ == "__main__":
    main()
