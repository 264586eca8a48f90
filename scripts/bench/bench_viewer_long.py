"""What opening a long episode of frames costs the viewer: time and peak memory of its plot data.

Records one episode of ``--steps`` 64x64x3 frames (a pixel or two change per step: Atari-like, compressed as
``"auto"`` does), then, in a fresh process, starts a ``ViewerServer`` on it and asks over HTTP for the
recording's page of episodes, the episode's plot data (timed) and one observation PNG. Prints the time, the
process's peak RSS (``VmHWM``) and its growth over the RSS after start.

Usage: ``python scripts/bench/bench_viewer_long.py [--steps 100000] [--folder DIR]`` (``--folder``: reuse or keep the
recording; default: a temporary folder, removed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from gymnasium import spaces

import envrec

OPEN = """
import json, sys, time, urllib.request, psutil
from envrec.viewer import ViewerServer
server = ViewerServer(sys.argv[1]).start()
base = psutil.Process().memory_info().rss
urllib.request.urlopen(server.url + "api/episodes?recording=img").read()
t0 = time.perf_counter()
urllib.request.urlopen(server.url + "api/episode?recording=img&episode=0&width=1000").read()
took = time.perf_counter() - t0
urllib.request.urlopen(server.url + "api/observation.png?recording=img&episode=0&step=%d" % (int(sys.argv[2]) * 3 // 4)).read()
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
print(f"plot data in {took:.2f} s; peak RSS {peak / 2**20:.0f} MiB, {(peak - base) / 2**20:.0f} MiB over the RSS after start")
server.close()
"""


def record(folder: str, steps: int) -> None:
    rec = envrec.TraceRecorder(folder, spaces.Box(0, 255, (64, 64, 3), np.uint8), spaces.Discrete(4), name_prefix="img")
    frame = np.zeros((64, 64, 3), np.uint8)
    rng = np.random.default_rng(0)
    rec.add_reset(frame)
    for t in range(steps):
        frame[(t // 64) % 64, t % 64] = t % 256
        frame[rng.integers(0, 64), rng.integers(0, 64)] = rng.integers(0, 255)
        rec.add_step(t % 4, frame, 1.0, t == steps - 1, False)
    rec.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--folder", help="where the recording is (recorded there when it is not)")
    args = parser.parse_args()
    folder = args.folder or tempfile.mkdtemp(prefix="envrec-viewer-long-")
    try:
        if not os.path.exists(os.path.join(folder, "img.manifest.json")):
            record(folder, args.steps)
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        print(f"{args.steps} steps of 64x64x3 frames, {size / 2**20:.1f} MiB on disk")
        subprocess.run([sys.executable, "-c", OPEN, folder, str(args.steps)], check=True, timeout=600)
    finally:
        if args.folder is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
