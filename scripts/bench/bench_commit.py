"""What one batch commit costs as a recording grows: at 500 batches against at 50,000.

The serializer is driven in this process, without a ring or an env: one
1-step episode per batch (``batch_bytes=1``), so every episode is a commit
(batch files fsynced, the manifest replaced). A recording is filled to
``--big`` batches, another to ``--small``; then they commit in turn,
``--window`` times each, timed by the serializer's own commit timer (what
``stats()["commit_us_total"]`` reports). Medians per commit and their ratio
are printed. Target: <= 1.2x at 50,000 batches against 500.

Usage: ``python scripts/bench/bench_commit.py [--small 500] [--big 50000] [--window 300] [--folder DIR]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
from gymnasium import spaces

from envrec.contract.protocol import SerializerConfig
from envrec.contract.records import RST, Kind
from envrec.contract.ring_reader import RecordView
from envrec.formats.infos import pack_info
from envrec.formats.schema import describe_space
from envrec.workers.serializer import Serializer

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = spaces.Discrete(2)


class Driver:
    """A serializer fed records built here: reset then steps, episode after episode."""

    def __init__(self, folder: str, *, max_bytes: int | None = None, compression=None, faults=None) -> None:
        os.makedirs(folder, exist_ok=True)
        extra = {"faults": faults} if faults is not None else {}
        self.cfg = SerializerConfig(
            folder, "bench", describe_space(OBS), describe_space(ACT), batch_bytes=1, settings={},
            max_bytes=max_bytes, compression=compression, **extra,
        )
        self.s = Serializer(self.cfg)
        self.episode = 0
        self.meta = pack_info({"seed": None, "options": None})

    def episode_of(self, steps: int) -> None:
        """One episode of ``steps`` steps (observation i carries the episode number); it commits a batch."""
        obs = np.full(4, self.episode, np.float32).tobytes()
        self.s.handle(RecordView(Kind.RESET, self.episode, 0, [memoryview(obs), memoryview(self.meta), memoryview(b"")]), 0)
        for k in range(1, steps + 1):
            rst = RST.pack(1.0, k == steps, False)
            parts = [memoryview(rst), memoryview(np.int64(k % 2).tobytes()), memoryview(obs), memoryview(b"")]
            self.s.handle(RecordView(Kind.STEP, self.episode, k, parts), 0)
        self.episode += 1

    def close(self) -> None:
        self.s.handle(RecordView(Kind.CLOSE, 0, 0, [memoryview(b"")]), 0)


def commit_latency(folder: str, small: int, big: int, window: int) -> tuple[float, float]:
    """Median microseconds per commit of a recording at ``small`` batches and of one at ``big``.

    The big one is filled first; then both commit in turn, ``window`` times
    each, so the disk's ups and downs fall on both alike.
    """
    recs = {}
    for n in (big, small):
        d = recs[n] = Driver(os.path.join(folder, f"at{n}"))
        for _ in range(n):
            d.episode_of(1)
    times: dict[int, list[int]] = {small: [], big: []}
    for _ in range(window):
        for n, d in recs.items():
            before = d.s.commit_us
            d.episode_of(1)  # starting episode k+1 commits episode k's batch, timed in commit_us
            times[n].append(d.s.commit_us - before)
    for d in recs.values():
        d.close()
    return statistics.median(times[small]), statistics.median(times[big])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", type=int, default=500)
    p.add_argument("--big", type=int, default=50_000)
    p.add_argument("--window", type=int, default=300)
    p.add_argument("--folder", default=None, help="where to write (default: a temporary folder in the current one)")
    args = p.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-commit-", dir=args.folder or ".")
    try:
        t0 = time.monotonic()
        small, big = commit_latency(folder, args.small, args.big, args.window)
        files = sum(len(os.listdir(os.path.join(folder, sub))) for sub in os.listdir(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{args.small + args.big + 2 * args.window} commits in {time.monotonic() - t0:.0f} s, {files} files at the end")
    print(f"median per commit, {args.window} interleaved commits each:")
    print(f"  at {args.small:>6} batches: {small:7.0f} us")
    print(f"  at {args.big:>6} batches: {big:7.0f} us  ({big / small:.2f}x)")


if __name__ == "__main__":
    main()
