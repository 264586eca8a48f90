"""What the viewer's episode page costs per cursor move on an Atari episode: one step's values, its observation PNG.

Records one ALE Pong episode of ``--steps`` steps (traces only, frames
compressed as ``"auto"`` does), serves it, and times over HTTP: the
episode's plot data the first time (the episode read and its frames
decompressed) and again (the catalog keeps it), then ``--moves`` requests of
``/api/step`` and of ``/api/observation.png`` at random steps. Prints medians
and sizes.

Usage: ``python scripts/bench/bench_viewer_steps.py [--steps 2000] [--moves 200] [--folder DIR]``.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import statistics
import tempfile
import time

import ale_py
import gymnasium as gym
import numpy as np

import envrec
from envrec.viewer import ViewerServer


def _record(folder: str, steps: int) -> None:
    gym.register_envs(ale_py)
    env = envrec.RecordTrace(gym.make("ALE/Pong-v5", max_episode_steps=steps), folder, name_prefix="pong")
    env.reset(seed=0)
    env.action_space.seed(0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    env.close()


def _timed(server: ViewerServer, path: str) -> tuple[float, int]:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    t0 = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    took = time.perf_counter() - t0
    conn.close()
    assert r.status == 200, (path, r.status, body[:200])
    return took, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--moves", type=int, default=200)
    parser.add_argument("--folder", default=None, help="record here (default: a temporary folder, removed after)")
    args = parser.parse_args()
    folder = args.folder or tempfile.mkdtemp(prefix="envrec-bench-viewer-")
    try:
        _record(folder, args.steps)
        length = envrec.TraceReader(folder)[0].length
        server = ViewerServer(folder).start()
        try:
            _timed(server, "/api/index")
            first, size = _timed(server, "/api/episode?recording=pong&episode=0")
            again, _ = _timed(server, "/api/episode?recording=pong&episode=0")
            rng = np.random.default_rng(0)
            steps = rng.integers(0, length + 1, args.moves)
            step = [_timed(server, f"/api/step?recording=pong&episode=0&step={s}") for s in steps]
            png = [_timed(server, f"/api/observation.png?recording=pong&episode=0&step={s}") for s in steps]
        finally:
            server.close()
    finally:
        if args.folder is None:
            shutil.rmtree(folder, ignore_errors=True)
    ms = lambda xs: 1000 * statistics.median(t for t, _ in xs)
    print(f"Pong episode of {length} steps: plot data {size} B in {1000 * first:.0f} ms the first time, {1000 * again:.1f} ms again")
    print(f"/api/step: median {ms(step):.2f} ms, {statistics.median(n for _, n in step):.0f} B")
    print(f"/api/observation.png: median {ms(png):.2f} ms, {statistics.median(n for _, n in png):.0f} B (raw frame 100,800 B)")


if __name__ == "__main__":
    main()
