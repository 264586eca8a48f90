"""Long episodes in the viewer: read a part at a time, the same values as the stitched episode, memory that does not
grow with the episode's length.

The correctness test records one episode in many parts (tiny ``batch_bytes``, frames compressed in chunks, a Dict
observation) and compares the viewer's plots and steps with ``TraceReader``'s stitched episode. The memory test
serves two image episodes (64x64x3 frames, compressed as envrec records them) from a server in a child process and
compares the peak RSS growth of opening each: it must not scale with the length.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.viewer import ViewerServer
from envrec.viewer.series import downsample

from .test_viewer import get

pytestmark = pytest.mark.timeout(240)

STEPS = 3000


@pytest.fixture(scope="module")
def parted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parted")
    obs_space = S.Dict({"frame": S.Box(0, 255, (24, 24, 3), np.uint8), "pos": S.Box(-np.inf, np.inf, (2,), np.float32)})
    rec = envrec.TraceRecorder(folder, obs_space, S.Box(-1, 1, (2,), np.float32), name_prefix="long", batch_bytes=60_000)
    rng = np.random.default_rng(3)
    frame = rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)

    def obs(t):
        frame[t % 24, :, t % 3] = t % 251
        return {"frame": frame.copy(), "pos": np.array([t, -t / 7], np.float32)}

    rec.add_reset(obs(0), info={"t": 0}, seed=5)
    for t in range(STEPS):
        reward = float("nan") if t == 1234 else float(np.sin(t / 50) + (40.0 if t == 2222 else 0.0))
        rec.add_step(np.array([np.cos(t), t / STEPS], np.float32), obs(t + 1), reward, t == STEPS - 1, False,
                     info={"t": t + 1})
    rec.close()
    reader = envrec.TraceReader(folder)
    ep = reader[0]
    reader.close()
    assert len(ep.parts) >= 3, len(ep.parts)  # parts, or the test proves nothing
    return folder, ep


@pytest.mark.variants
@pytest.mark.parametrize("block_bytes", [8 << 20, 5000], ids=["whole-parts", "blocks-of-a-few-chunks"])
def test_plots_of_an_episode_in_parts_are_those_of_the_stitched_episode(parted, monkeypatch, block_bytes):
    from envrec.read import batch_files

    monkeypatch.setattr(batch_files, "BLOCK_BYTES", block_bytes)
    folder, ep = parted
    server = ViewerServer(folder).start()
    try:
        status, _, body = get(server, "/api/episode?recording=long&episode=0&width=300&obs=0,1,2,1728")
    finally:
        server.close()
    assert status == 200, body
    doc = json.loads(body)
    assert (doc["length"], doc["parts"], doc["seed"], doc["observation_dims"]) == (STEPS, len(ep.parts), 5, 24 * 24 * 3 + 2)
    series = doc["series"]
    rewards = np.asarray(ep.rewards, np.float64)

    def shifted(values, by):
        s = downsample(values, 300)
        return {**s, "x": [x + by for x in s["x"]]}

    assert series["reward"] == shifted(rewards, 1)
    want = shifted(np.nancumsum(np.where(np.isfinite(rewards), rewards, np.nan)), 1)  # summed part by part: rounding
    assert {k: series["return"][k] for k in ("x", "bucket")} == {k: want[k] for k in ("x", "bucket")}
    assert series["return"]["min"] == pytest.approx(want["min"]) and series["return"]["max"] == pytest.approx(want["max"])
    assert [a["label"] for a in series["actions"]] == ["[0]", "[1]"]  # as before: a Box of two is unnamed
    for i, a in enumerate(series["actions"]):
        assert {k: v for k, v in a.items() if k != "label"} == shifted(ep.actions[:, i], 1)
    flat = np.concatenate([ep.observations["frame"].reshape(STEPS + 1, -1), ep.observations["pos"]], axis=1)
    for o in series["observations"]:
        assert {k: v for k, v in o.items() if k not in ("label", "dim")} == shifted(flat[:, o["dim"]], 0), o["label"]
    assert [o["label"] for o in series["observations"]] == ["frame[0]", "frame[1]", "frame[2]", "pos[0]"]


def test_every_step_across_part_boundaries_is_the_recorded_one(parted):
    folder, ep = parted
    cuts = np.cumsum([p.length for p in ep.parts])
    steps = sorted({0, 1, STEPS, *(int(c) + d for c in cuts[:-1] for d in (-1, 0, 1)), 1235, 2223})
    server = ViewerServer(folder).start()
    try:
        for step in steps:
            status, _, body = get(server, f"/api/step?recording=long&episode=0&step={step}&obs=1,1729")
            assert status == 200, body
            doc = json.loads(body)
            assert doc["observations"][0]["value"] == int(ep.observations["frame"][step].reshape(-1)[1])
            assert doc["observations"][1]["value"] == pytest.approx(float(ep.observations["pos"][step][1]))
            assert doc["info"]["items"] == [["t", str(step)]]
            if step:
                r = ep.rewards[step - 1]
                assert doc["reward"] == (None if np.isnan(r) else pytest.approx(r))
                total = np.sum(ep.rewards[:step])
                assert doc["return"] == (None if not np.isfinite(total) else pytest.approx(total))
                assert [a["value"] for a in doc["actions"]] == pytest.approx(list(ep.actions[step - 1]))
                assert doc["terminated"] == (step == STEPS)
    finally:
        server.close()


def _write_image_episode(folder, steps: int) -> None:
    rec = envrec.TraceRecorder(folder, S.Box(0, 255, (64, 64, 3), np.uint8), S.Discrete(4), name_prefix="img")
    frame = np.zeros((64, 64, 3), np.uint8)
    rec.add_reset(frame)
    for t in range(steps):
        frame[(t // 64) % 64, t % 64] = t % 256  # one pixel changes a step: Atari-like, compresses as Atari does
        rec.add_step(t % 4, frame, 1.0, t == steps - 1, False)
    rec.close()


SERVE = """
import json, sys, urllib.request, psutil
from envrec.viewer import ViewerServer
server = ViewerServer(sys.argv[1]).start()
base = psutil.Process().memory_info().rss
urllib.request.urlopen(server.url + "api/episodes?recording=img").read()
for path in ("api/episode?recording=img&episode=0&width=1000&obs=0,5000", "api/step?recording=img&episode=0&step=3000",
             "api/observation.png?recording=img&episode=0&step=4000"):
    assert urllib.request.urlopen(server.url + path).status == 200
peak_kib = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
print(json.dumps({"base": base, "peak": peak_kib * 1024}))
server.close()
"""


def _peak_growth(folder) -> int:
    out = subprocess.run([sys.executable, "-c", SERVE, str(folder)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return doc["peak"] - doc["base"]


def test_opening_a_long_image_episode_takes_memory_that_does_not_grow_with_its_length(tmp_path):
    short, long_ = tmp_path / "short", tmp_path / "long"
    _write_image_episode(short, 5_000)
    _write_image_episode(long_, 20_000)  # 235 MiB of frames decompressed: what a stitched read would hold
    t0 = time.perf_counter()
    small, big = _peak_growth(short), _peak_growth(long_)
    took = time.perf_counter() - t0
    print(f"peak RSS growth: 5,000 steps {small / 2**20:.0f} MiB, 20,000 steps {big / 2**20:.0f} MiB ({took:.1f} s)")
    assert big < 120 * 2**20, big  # a part's JSON and a few chunks, not 235 MiB of frames
    assert big < small + 40 * 2**20, (small, big)  # four times the steps: about the same memory
