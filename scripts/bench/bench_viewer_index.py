"""The viewer's index of a folder of 10,000 episodes: the lazy index against the old full scan, cold and warm.

Builds (or reuses, when it holds what was asked) a folder of ``--recordings``
recordings of ``--episodes`` CartPole-v1 episodes each, written by envrec
(``TraceRecorder`` fed by CartPole itself: pushed left, so episodes are 8-10
steps; every one seeded), then measures over HTTP, each ``--rounds`` times:

* ``/api/index`` (every recording's summary, from the manifests) and
  ``/api/episodes?recording=R&limit=100&sort=-length`` (a page of one
  recording's episodes), cold (a fresh ``ViewerServer``) and warm (asked
  again of the same server);
* the old full scan, ``Catalog.index()`` (every episode of every recording at
  once, what ``/api/index`` answered before), cold and warm, plus the time
  to encode its JSON as the server did.

Prints medians and ratios (old / new). Usage:
``python scripts/bench/bench_viewer_index.py [--folder DIR] [--recordings 20] [--episodes 500] [--rounds 5]``;
a quick check that it runs: ``--recordings 2 --episodes 50 --rounds 1``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import tempfile
import time

import gymnasium as gym

import envrec
from envrec.viewer import ViewerServer
from envrec.viewer.catalog import Catalog

MARK = ".bench_viewer_index.json"  # what the folder was built with: reused when it matches


def build(folder: str, recordings: int, episodes: int) -> float:
    """Record ``recordings`` x ``episodes`` CartPole episodes into ``folder`` (kept when already built so); seconds taken."""
    want = {"recordings": recordings, "episodes": episodes, "envrec": envrec.__version__}
    mark = os.path.join(folder, MARK)
    try:
        with open(mark) as f:
            if json.load(f) == want:
                return 0.0
    except (OSError, ValueError):
        pass
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    t0 = time.perf_counter()
    env = gym.make("CartPole-v1").unwrapped  # the env's own dynamics; the recorder is envrec's
    for r in range(recordings):
        rec = envrec.TraceRecorder(folder, env.observation_space, env.action_space, name_prefix=f"run{r:02d}")
        for e in range(episodes):
            seed = r * episodes + e
            obs, _ = env.reset(seed=seed)
            rec.add_reset(obs, seed=seed)
            done = False
            while not done:
                obs, reward, terminated, truncated, info = env.step(0)
                rec.add_step(0, obs, float(reward), terminated, truncated, info)
                done = terminated or truncated
        rec.close()
    env.close()
    with open(mark, "w") as f:
        json.dump(want, f)
    return time.perf_counter() - t0


def get(server: ViewerServer, path: str) -> tuple[float, dict]:
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=120)
    t0 = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    took = time.perf_counter() - t0
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {body[:200]!r}")
    return took, json.loads(body)


def measure_new(folder: str) -> dict[str, float]:
    server = ViewerServer(folder).start()
    try:
        cold_index, doc = get(server, "/api/index")
        name = doc["recordings"][len(doc["recordings"]) // 2]["name"]
        page = f"/api/episodes?recording={name}&limit=100&sort=-length"
        cold_page, _ = get(server, page)
        warm_index, _ = get(server, "/api/index")
        warm_page, _ = get(server, page)
        assert doc["episodes"] > 0
    finally:
        server.close()
    return {"index cold": cold_index, "index warm": warm_index, "episodes page cold": cold_page, "episodes page warm": warm_page}


def measure_old(folder: str) -> dict[str, float]:
    catalog = Catalog(folder)
    t0 = time.perf_counter()
    doc = catalog.index()
    json.dumps(doc, separators=(",", ":"), allow_nan=False)  # as the server encoded it
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    doc = catalog.index()
    json.dumps(doc, separators=(",", ":"), allow_nan=False)
    return {"full scan cold": cold, "full scan warm": time.perf_counter() - t0, "episodes": len(doc["episodes"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default=os.path.join(tempfile.gettempdir(), "envrec-bench-viewer-index"))
    ap.add_argument("--recordings", type=int, default=20)
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    took = build(args.folder, args.recordings, args.episodes)
    print(f"folder {args.folder}: {args.recordings} recordings x {args.episodes} episodes "
          + (f"(built in {took:.1f} s)" if took else "(reused)"))
    new: dict[str, list[float]] = {}
    old: dict[str, list[float]] = {}
    for _ in range(args.rounds):  # interleaved: the two see the same machine
        for k, v in measure_new(args.folder).items():
            new.setdefault(k, []).append(v)
        for k, v in measure_old(args.folder).items():
            old.setdefault(k, []).append(v)
    med = {k: statistics.median(v) for k, v in {**new, **old}.items()}
    print(f"episodes listed by the full scan: {int(med['episodes'])}; medians of {args.rounds} rounds, milliseconds")
    rows = [("cold", "index cold", "episodes page cold", "full scan cold"), ("warm", "index warm", "episodes page warm", "full scan warm")]
    print(f"{'':6}{'/api/index':>12}{'/api/episodes':>15}{'full scan':>12}{'full/index':>12}{'full/(index+page)':>19}")
    for label, i, p, f in rows:
        print(f"{label:6}{med[i] * 1e3:12.1f}{med[p] * 1e3:15.1f}{med[f] * 1e3:12.1f}{med[f] / med[i]:11.0f}x"
              f"{med[f] / (med[i] + med[p]):18.1f}x")


if __name__ == "__main__":
    main()
