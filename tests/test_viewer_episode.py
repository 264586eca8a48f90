"""The episode page's data: action names in the manifest, one step's values and info, image observations as PNGs."""

from __future__ import annotations

import io
import json
import logging
import shutil

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.errors import TraceError
from envrec.viewer import ViewerServer
from envrec.viewer.step_view import MAX_INFO_CHARS, MAX_INFO_KEYS

from .support.episodes import record_cartpole, run_episodes
from .support.pong import PONG_STEPS, record_pong
from .test_viewer import get

pytestmark = pytest.mark.timeout(120)

PONG_NAMES = ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Pong's two episodes and a CartPole recording beside them, recorded once for the module."""
    folder = tmp_path_factory.mktemp("pong")
    episodes = record_pong(folder)
    record_cartpole(folder, 1, name_prefix="cp")
    return folder, episodes


@pytest.fixture
def pong(recorded, tmp_path):
    """A copy of the recordings (tests may damage it) and a viewer serving it."""
    folder = tmp_path / "rec"
    shutil.copytree(recorded[0], folder)
    server = ViewerServer(folder).start()
    get(server, "/api/index")
    yield server, recorded[1], folder
    server.close()


def _manifest(folder, prefix):
    return json.loads((folder / f"{prefix}.manifest.json").read_text())


def test_ale_pong_records_its_action_meanings_and_cartpole_none(tmp_path):
    record_pong(tmp_path / "pong", 1)
    record_cartpole(tmp_path / "cp", 1, name_prefix="cp")
    assert _manifest(tmp_path / "pong", "pong")["env"]["action_meanings"] == PONG_NAMES
    assert _manifest(tmp_path / "cp", "cp")["env"]["action_meanings"] is None


class _Named(gym.Env):
    """A Discrete(3) env that names its actions through the documented hook (or breaks it)."""

    observation_space = S.Box(-1.0, 1.0, (2,), np.float32)
    action_space = S.Discrete(3, start=1)

    def __init__(self, names=("left", "stay", "right"), raises=False):
        self.names, self.raises, self.t = names, raises, 0

    def get_action_meanings(self):
        if self.raises:
            raise RuntimeError("no names today")
        return list(self.names)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(2, self.t / 10, np.float32), 1.0, self.t >= 3, False, {}


@pytest.mark.variants
@pytest.mark.parametrize("env, names, warned", [
    (_Named(), ["left", "stay", "right"], False),
    (_Named(names=("a" * 100, "b", "c")), ["a" * 64, "b", "c"], False),  # cut to a label's length
    (_Named(names=("only", "two")), None, True),  # not one name per action
    (_Named(names=(1, 2, 3)), None, True),
    (_Named(raises=True), None, True),
])
def test_an_envs_own_hook_names_its_actions_and_a_broken_one_is_logged_and_ignored(tmp_path, caplog, env, names, warned):
    caplog.set_level(logging.WARNING, "envrec")
    wrapped = envrec.RecordTrace(gym.wrappers.TimeLimit(env, 10), tmp_path, name_prefix="named")  # found through a wrapper
    run_episodes(wrapped, 1)
    wrapped.close()
    assert _manifest(tmp_path, "named")["env"]["action_meanings"] == names
    assert any("get_action_meanings" in r.getMessage() for r in caplog.records) == warned
    server = ViewerServer(tmp_path).start()
    try:
        doc = json.loads(get(server, "/api/episode?recording=named&episode=0")[2])
    finally:
        server.close()
    assert doc["action_space"] == {"n": 3, "start": 1, "names": names or ["1", "2", "3"], "named": names is not None}


def test_an_old_manifest_without_action_names_or_env_still_reads(pong):
    _, episodes, folder = pong
    path = folder / "pong.manifest.json"
    doc = json.loads(path.read_text())
    del doc["env"]["action_meanings"]
    for older in (doc, {k: v for k, v in doc.items() if k != "env"}):  # then older still: no env at all
        path.write_text(json.dumps(older))
        assert [e.length for e in envrec.TraceReader(folder, prefix="pong")] == [e.length for e in episodes]
        fresh = ViewerServer(folder).start()
        try:
            status, _, body = get(fresh, "/api/episode?recording=pong&episode=1")
        finally:
            fresh.close()
        assert status == 200 and json.loads(body)["action_space"]["names"] == ["0", "1", "2", "3", "4", "5"]


def test_bad_action_names_in_a_manifest_are_a_trace_error_naming_the_field(pong):
    _, _, folder = pong
    path = folder / "pong.manifest.json"
    doc = json.loads(path.read_text())
    doc["env"]["action_meanings"] = ["NOOP", 7]
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="env.action_meanings"):
        envrec.TraceReader(folder)


def test_an_image_recording_is_described_and_its_pixels_not_plotted(pong):
    server, episodes, _ = pong
    status, _, body = get(server, "/api/episode?recording=pong&episode=1")
    doc = json.loads(body)
    assert status == 200 and doc["image"] == {"height": 210, "width": 160, "channels": 3, "frames": 1, "leaf": 0, "label": "",
                                              "dims": [0, 210 * 160 * 3], "png_width": 160, "png_height": 210}
    assert doc["images"] == [doc["image"]]
    assert doc["action_space"] == {"n": 6, "start": 0, "names": PONG_NAMES, "named": True}
    assert doc["series"]["observations"] == [] and doc["observation_dims"] == 210 * 160 * 3
    assert doc["seed"] is None and doc["length"] == PONG_STEPS and len(body) < 20_000
    doc = json.loads(get(server, "/api/episode?recording=pong&episode=0&obs=100")[2])  # asked for: plotted
    assert doc["seed"] == 3 and doc["series"]["observations"][0]["min"] == episodes[0].observations.reshape(PONG_STEPS + 1, -1)[:, 100].tolist()


def _decoded(body: bytes) -> np.ndarray:
    from PIL import Image  # an independent decoder (matplotlib, in the test extra, depends on Pillow)

    return np.asarray(Image.open(io.BytesIO(body)))


def test_the_observation_png_decodes_to_the_recorded_pixels(pong):
    server, episodes, _ = pong
    ep = episodes[1]
    for step in (0, 1, 17, PONG_STEPS):
        status, headers, body = get(server, f"/api/observation.png?recording=pong&episode=1&step={step}")
        assert status == 200 and headers["Content-Type"] == "image/png" and headers["X-Content-Type-Options"] == "nosniff"
        assert "sandbox" in headers["Content-Security-Policy"]
        assert np.array_equal(_decoded(body), ep.observations[step]), step
    assert not np.array_equal(ep.observations[1], ep.observations[PONG_STEPS])  # the frames differ: the test can tell


@pytest.mark.variants
@pytest.mark.parametrize("shape", [(12, 10), (12, 10, 1), (12, 10, 4)])
def test_grey_and_rgba_observations_are_pngs_too(tmp_path, shape):
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (4, *shape), dtype=np.uint8)
    with envrec.TraceRecorder(tmp_path, S.Box(0, 255, shape, np.uint8), S.Discrete(2), name_prefix="img") as rec:
        rec.add_reset(frames[0])
        for t in range(1, 4):
            rec.add_step(0, frames[t], 0.0, t == 3, False)
    server = ViewerServer(tmp_path).start()
    try:
        doc = json.loads(get(server, "/api/episode?recording=img&episode=0")[2])
        assert {k: doc["image"][k] for k in ("height", "width", "channels", "frames")} == {
            "height": 12, "width": 10, "channels": 1 if len(shape) == 2 else shape[2], "frames": 1}
        body = get(server, "/api/observation.png?recording=img&episode=0&step=2")[2]
    finally:
        server.close()
    assert np.array_equal(_decoded(body).reshape(shape), frames[2])


def test_one_steps_values_are_those_recorded(pong):
    server, episodes, _ = pong
    ep = episodes[0]
    doc = json.loads(get(server, "/api/step?recording=pong&episode=0&step=0&obs=0,100")[2])
    assert doc["reward"] is None and doc["actions"] == [] and doc["step"] == 0  # the reset: no step led to it
    flat = ep.observations.reshape(PONG_STEPS + 1, -1)
    for step in (1, 9, PONG_STEPS):
        doc = json.loads(get(server, f"/api/step?recording=pong&episode=0&step={step}&obs=0,100")[2])
        assert doc["reward"] == ep.rewards[step - 1] and doc["actions"] == [{"label": "value", "value": int(ep.actions[step - 1])}]
        assert doc["truncated"] == (step == PONG_STEPS) and doc["terminated"] is False
        assert doc["return"] == pytest.approx(float(ep.rewards[:step].sum()))
        assert [o["value"] for o in doc["observations"]] == [int(flat[step, 0]), int(flat[step, 100])]
        assert doc["info"] == {"items": [[k, repr(v)] for k, v in ep.infos[step].items()], "keys": len(ep.infos[step]),
                               "truncated": False}


class _Chatty(gym.Env):
    """Infos of many keys, a long text, a big array: what a page must not be sent whole."""

    observation_space = S.Box(-1.0, 1.0, (1,), np.float32)
    action_space = S.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {"start": True}

    def step(self, action):
        info = {f"key{i}": i for i in range(500)}
        info.update(log="x" * 100_000, frame=np.arange(50_000), nested={"a": [list(range(100))] * 10}, nan=float("nan"))
        return np.zeros(1, np.float32), 0.0, True, False, info


def test_a_steps_info_is_sent_bounded(tmp_path):
    env = envrec.RecordTrace(_Chatty(), tmp_path, name_prefix="chatty")
    run_episodes(env, 1)
    env.close()
    server = ViewerServer(tmp_path).start()
    try:
        status, _, body = get(server, "/api/step?recording=chatty&episode=0&step=1")
        start = json.loads(get(server, "/api/step?recording=chatty&episode=0&step=0")[2])
    finally:
        server.close()
    doc = json.loads(body)
    assert status == 200 and len(body) < 40_000, len(body)
    info = doc["info"]
    assert info["keys"] == 504 and info["truncated"] and len(info["items"]) == MAX_INFO_KEYS
    assert info["items"][:2] == [["key0", "0"], ["key1", "1"]]
    assert all(len(k) <= MAX_INFO_CHARS and len(v) <= MAX_INFO_CHARS for k, v in info["items"])
    assert start["info"] == {"items": [["start", "True"]], "keys": 1, "truncated": False}


@pytest.mark.parametrize("path, status, says", [
    ("/api/step?recording=pong&episode=0", 400, "step=K"),
    ("/api/step?recording=pong&episode=0&step=x", 400, "integers"),
    ("/api/step?recording=pong&episode=0&step=1&obs=a", 400, "integers"),
    ("/api/step?recording=pong&episode=0&step=1&obs=" + ",".join(["1"] * 17), 400, "at most 16"),
    ("/api/step?recording=pong&episode=0&step=41", 404, "observations are 0..40"),
    ("/api/step?recording=pong&episode=0&step=-1", 404, "no step -1"),
    ("/api/step?recording=pong&episode=0&step=1&obs=100800", 404, "0..100799"),
    ("/api/step?recording=pong&episode=9&step=1", 404, "no episode 9"),
    ("/api/observation.png?recording=pong&episode=0&step=41", 404, "no step 41"),
    ("/api/observation.png?recording=pong&step=1", 400, "episode=N"),
    ("/api/observation.png?recording=cp&episode=0&step=1", 404, "not images"),
    ("/api/observation.png?recording=pong&episode=0&step=1&leaf=1", 404, "leaf 1 of 'pong' is not an image"),
    ("/api/observation.png?recording=pong&episode=0&step=1&leaf=x", 400, "leaf=K"),
    ("/api/observation.png?recording=../pong&episode=0&step=1", 404, "no episode"),
    ("/api/observation.png?recording=%2Fetc%2Fpasswd&episode=0&step=1", 404, "no episode"),
    ("/api/step?recording=..%2F..%2Fpong&episode=0&step=1", 404, "no episode"),
])
def test_bad_step_requests_say_what_is_wrong_and_serve_nothing_else(pong, path, status, says):
    server, _, _ = pong
    got, headers, body = get(server, path)
    assert got == status and headers["Content-Type"] == "application/json", body
    assert says in json.loads(body)["error"], body


def test_the_parts_read_last_are_kept_for_step_requests_and_no_more(pong):
    from envrec.viewer import episode_read

    server, _, _ = pong
    cat = server.catalog
    cat.parts.clear()
    reader, _ = cat.open("pong", 0)
    reader.frame(30, {"leaf": 0, "label": "", "height": 210, "width": 160, "channels": 3, "frames": 1})
    part = cat.parts.get(reader.where, 0)
    assert cat.open("pong", 0)[0].step(31, []) and cat.parts.get(reader.where, 0) is part  # read once: the next cursor move parses no JSON
    small = episode_read.PartCache(max_parts=1)
    one = episode_read.PieceReader(cat.open("pong", 0)[0].where, small)
    two = episode_read.PieceReader(cat.open("pong", 1)[0].where, small)
    one.step(5, [])
    two.step(5, [])
    assert len(small) == 1 and small.get(two.where, 0) is small.get(two.where, 0)  # over the bound: the last read is kept


def test_episodes_read_in_threads_at_once_decompress_right(pong):
    """The server's threads decompress frames at the same time (two panes, two tabs): each thread has its own
    zstd context (one shared corrupted what it returned, answered 422 'Data corruption detected')."""
    import threading

    server, episodes, _ = pong
    got: list = []

    def read(episode):
        status, _, body = get(server, f"/api/observation.png?recording=pong&episode={episode}&step=30")
        got.append((episode, status, body))

    for _ in range(8):
        server.catalog.parts.clear()
        threads = [threading.Thread(target=read, args=(e,)) for e in (0, 1, 0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert len(got) == 32 and {s for _, s, _ in got} == {200}, [b[:200] for _, s, b in got if s != 200]
    assert all(np.array_equal(_decoded(body), episodes[e].observations[30]) for e, _, body in got)
