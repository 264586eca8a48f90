"""envrec view's server over plain HTTP: index and plot JSON, byte ranges, and no path out of the folder."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.viewer import ViewerServer

from .support.episodes import record_cartpole, run_episodes

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A CartPole recording with clips, made once for the module; each test serves a copy of its own."""
    root = tmp_path_factory.mktemp("viewer") / "rec"
    record_cartpole(root, video=True)
    return root


@pytest.fixture
def served(recorded, tmp_path):
    root = tmp_path / "rec"
    shutil.copytree(recorded, root)
    server = ViewerServer(root).start()
    yield server, root
    server.close()


def get(server, path, headers=None, method="GET"):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), body


def test_index_lists_recordings_episodes_and_their_clips(served):
    server, root = served
    status, headers, body = get(server, "/api/index")
    assert status == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    episodes = list(envrec.TraceReader(root))
    recording = doc["recordings"][0]
    listed = json.loads(get(server, f"/api/episodes?recording={recording['name']}")[2])["episodes"]
    assert [(e["episode_id"], e["length"], e["return"], e["ended_by"]) for e in listed] == [
        (e.episode_id, e.length, e.total_reward, e.ended_by) for e in episodes]
    assert all(e["clip"] == f"{_clip_prefix(root)}-episode-{e['episode_id']}" for e in listed)
    assert recording["steps"] == sum(e.length for e in episodes) and recording["complete"] and recording["state"] == "complete"
    clips = json.loads(get(server, "/api/clips")[2])["clips"]
    assert doc["clips"] == len(clips) == 3 and all(c["url"].startswith("/files/") and not c["broken"] for c in clips)
    for page in ("/", "/episode", "/static/viewer.js", "/static/style.css"):
        assert get(server, page)[0] == 200


def _clip_prefix(root) -> str:
    return next(n for n in os.listdir(root) if n.endswith(".mp4")).split("-episode-")[0]


def test_episode_json_has_every_step_and_the_clip(served):
    server, root = served
    ep = envrec.TraceReader(root)[1]
    status, _, body = get(server, f"/api/episode?recording={envrec.TraceReader(root).manifests[0]['prefix']}&episode=1&width=800&obs=0,2")
    assert status == 200
    doc = json.loads(body)
    s = doc["series"]
    assert doc["length"] == ep.length and s["reward"]["x"] == list(range(1, ep.length + 1))  # step t's reward at x = t
    assert s["reward"]["min"] == ep.rewards.tolist() and s["return"]["max"] == np.cumsum(ep.rewards).tolist()
    assert s["actions"][0]["min"] == ep.actions.tolist()
    assert [o["dim"] for o in s["observations"]] == [0, 2]
    assert s["observations"][1]["min"] == ep.observations[:, 2].astype(np.float64).tolist()  # observation index: 0 .. length
    assert doc["clip"]["url"].endswith("-episode-1.mp4") and doc["clip"]["frames"] == ep.length + 1 and doc["clip"]["fps"] == 50


@pytest.mark.parametrize("query, status", [
    ("recording=nope&episode=0", 404),
    ("episode=0", 400),
    ("recording={p}&episode=99", 404),
    ("recording={p}&episode=0&obs=4", 404),  # CartPole has dimensions 0..3
    ("recording={p}&episode=x", 400),
])
def test_episode_json_errors(served, query, status):
    server, root = served
    prefix = envrec.TraceReader(root).manifests[0]["prefix"]
    got, _, body = get(server, "/api/episode?" + query.format(p=prefix))
    assert got == status and "error" in json.loads(body)


@pytest.mark.xdist_group("serial")
def test_a_long_episode_is_downsampled_min_max_and_fast(tmp_path):
    rec = envrec.TraceRecorder(tmp_path, S.Box(-np.inf, np.inf, (3,), np.float32), S.Discrete(2), batch_bytes=50_000_000)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((100_001, 3)).astype(np.float32)
    rewards = rng.standard_normal(100_000)
    rewards[54_321] = 50.0  # a spike of one step must survive downsampling
    rec.add_reset(obs[0])
    for t in range(100_000):
        rec.add_step(t % 2, obs[t + 1], rewards[t], t == 99_999, False)
    rec.close()
    server = ViewerServer(tmp_path).start()
    try:
        get(server, f"/api/episodes?recording={rec.prefix}")  # the index page lists it before it is opened
        t0 = time.perf_counter()
        status, _, body = get(server, f"/api/episode?recording={rec.prefix}&episode=0&width=1000")
        took = time.perf_counter() - t0
    finally:
        server.close()
    assert status == 200 and took < 1.0, took
    r = json.loads(body)["series"]["reward"]
    assert len(r["x"]) <= 1000 and r["bucket"] == 100
    assert max(r["max"]) == 50.0 and min(r["min"]) == pytest.approx(rewards.min())
    assert all(lo <= hi for lo, hi in zip(r["min"], r["max"], strict=True))
    assert len(body) < 400_000


def test_byte_ranges(served):
    server, root = served
    name = next(n for n in sorted(os.listdir(root)) if n.endswith(".mp4"))
    data = (root / name).read_bytes()
    url = f"/files/{name}"
    status, headers, body = get(server, url)
    assert status == 200 and body == data and headers["Accept-Ranges"] == "bytes" and headers["Content-Type"] == "video/mp4"
    for spec, lo, hi in (("bytes=0-99", 0, 99), ("bytes=100-", 100, len(data) - 1), ("bytes=-50", len(data) - 50, len(data) - 1),
                         (f"bytes=10-{len(data) + 100}", 10, len(data) - 1)):
        status, headers, body = get(server, url, {"Range": spec})
        assert status == 206 and body == data[lo : hi + 1], spec
        assert headers["Content-Range"] == f"bytes {lo}-{hi}/{len(data)}"
    for bad in (f"bytes={len(data)}-", "bytes=5-2", "bytes=-0", "lines=1-2"):
        status, headers, _ = get(server, url, {"Range": bad})
        assert status == 416 and headers["Content-Range"] == f"bytes */{len(data)}", bad
    status, headers, body = get(server, url, method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) == len(data)


def test_nothing_outside_the_folder_is_reachable(served, tmp_path):
    server, root = served
    (tmp_path / "secret.txt").write_text("not yours")
    (root / "sub").mkdir()
    (root / "sub" / "ok.mp4").write_text("fine")
    (tmp_path / "secret.mp4").write_text("not yours")
    os.symlink(tmp_path / "secret.mp4", root / "link.mp4")
    os.symlink(tmp_path, root / "linkdir")
    assert get(server, "/files/sub/ok.mp4")[2] == b"fine"
    for path in ("/files/../secret.mp4", "/files/%2e%2e/secret.mp4", "/files/..%2fsecret.mp4", "/files/sub%2Fok.mp4",
                 "/files/sub/../../secret.mp4", "/files/link.mp4", "/files/linkdir/secret.mp4", "/files//etc/passwd",
                 "/files/%2Fetc%2Fpasswd", "/files/sub%5cok.mp4", "/files/sub/./ok.mp4", "/files/sub", "/static/../README.md",
                 "/static/%2e%2e/catalog.py", "/etc/passwd", "/files/", "/files/sub/ok.txt"):
        status, _, body = get(server, path)
        assert status == 404 and b"not yours" not in body, path


def test_requests_for_another_host_are_refused(served):
    server, _ = served
    assert get(server, "/api/index", {"Host": "evil.example:80"})[0] == 403
    assert get(server, "/api/index", {"Host": f"localhost:{server.server_address[1]}"})[0] == 200


def test_cli_serves_until_interrupted(tmp_path):
    record_cartpole(tmp_path, 1, video=True)
    proc = subprocess.Popen([sys.executable, "-m", "envrec", "view", str(tmp_path), "--port", "0", "--no-browser",
                             "--allow-host", "viewer.example"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/episodes")
        assert len(json.loads(conn.getresponse().read())["episodes"]) == 1
        conn.request("GET", "/api/index", headers={"Host": f"viewer.example:{port}"})
        assert conn.getresponse().read().startswith(b'{"root"')  # the --allow-host name is answered
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        proc.stdout.close()
    bad = subprocess.run([sys.executable, "-m", "envrec", "view", str(tmp_path / "nope"), "--no-browser"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "is not a folder" in bad.stderr


def test_every_response_carries_nosniff_and_a_restrictive_csp(served):
    from envrec.viewer.server import DATA_CSP, PAGE_CSP

    server, root = served
    prefix = envrec.TraceReader(root).manifests[0]["prefix"]
    clip = next(n for n in sorted(os.listdir(root)) if n.endswith(".mp4"))
    for path, csp in [("/", PAGE_CSP), ("/episode", PAGE_CSP), ("/static/viewer.js", PAGE_CSP), ("/api/index", DATA_CSP),
                      (f"/api/episode?recording={prefix}&episode=0", DATA_CSP), (f"/files/{clip}", DATA_CSP),
                      ("/nope", DATA_CSP), ("/files/x.html", DATA_CSP)]:
        _, headers, _ = get(server, path)
        assert headers["X-Content-Type-Options"] == "nosniff" and headers["Content-Security-Policy"] == csp, path
        assert headers["Cross-Origin-Resource-Policy"] == "same-origin", path
    assert "sandbox" in DATA_CSP and "default-src 'none'" in DATA_CSP and "script-src 'self'" in PAGE_CSP
    assert "unsafe-inline" not in PAGE_CSP


def test_files_serves_only_the_recorders_clip_types(served):
    server, root = served
    page = b"<html><script>fetch('/api/pwned')</script></html>"
    for name in ("evil.html", "evil.htm", "evil.svg", "evil.xhtml", "evil.js", "evil.json", "evil.txt", "evil", "evil.MP4.html"):
        (root / name).write_bytes(page)
        status, headers, body = get(server, f"/files/{name}")
        assert status == 404 and page not in body and headers["Content-Type"] == "application/json", name
    (root / "page.mp4").write_bytes(page)  # a "clip" that is an HTML page: served as a video, never as HTML
    (root / "page.cast").write_bytes(page)
    for name, kind in (("page.mp4", "video/mp4"), ("page.cast", "application/x-asciicast")):
        status, headers, _ = get(server, f"/files/{name}")
        assert status == 200 and headers["Content-Type"] == kind and headers["X-Content-Type-Options"] == "nosniff"
    assert server.refused["type"] == 9


def test_a_damaged_batch_is_an_error_row_and_the_rest_of_the_index_works(tmp_path):
    record_cartpole(tmp_path, 4, name_prefix="cp", batch_bytes=1500)
    batches = json.load(open(tmp_path / "cp.manifest.json"))["batches"]
    bad = batches[1]["fn"]
    (tmp_path / bad).write_bytes((tmp_path / bad).read_bytes()[:-20])  # truncated: its size is wrong
    (tmp_path / "other.manifest.json").write_text("[[[")
    server = ViewerServer(tmp_path).start()
    try:
        status, _, body = get(server, "/api/index")
        doc = json.loads(body)
        assert status == 200
        errors = {d["file"]: d["error"] for d in doc["damaged"]}
        assert sorted(errors) == [bad, "other.manifest.json"]
        assert "other.manifest.json: not JSON" in errors["other.manifest.json"] and "bytes, the manifest says" in errors[bad]
        listed = sum(b["len"] for b in batches) - batches[1]["len"]
        rows = json.loads(get(server, "/api/episodes?recording=cp")[2])["episodes"]
        assert doc["recordings"][0]["episodes"] == len(rows) == listed
        first, last = rows[0], rows[-1]
        assert get(server, f"/api/episode?recording={first['recording']}&episode={first['episode_id']}")[0] == 200
        last_batch = batches[-1]["fn"]
        (tmp_path / last_batch).write_text('{"episodes": [{"observations": 1}]}')  # damaged after the index listed it
        status, _, body = get(server, f"/api/episode?recording={last['recording']}&episode={last['episode_id']}")
        assert status == 422 and last_batch in json.loads(body)["error"]
    finally:
        server.close()


def test_a_zero_step_episode_opens(tmp_path):
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, name_prefix="cp")
    run_episodes(env, 1)
    env.reset()  # then close: the 0-step episode every recording ends with
    env.close()
    last = list(envrec.TraceReader(tmp_path))[-1]
    assert last.length == 0
    server = ViewerServer(tmp_path).start()
    try:
        get(server, "/api/index")
        status, _, body = get(server, f"/api/episode?recording=cp&episode={last.episode_id}")
    finally:
        server.close()
    doc = json.loads(body)
    assert status == 200 and doc["length"] == 0 and doc["series"]["reward"]["x"] == []
    assert [len(o["x"]) for o in doc["series"]["observations"]] == [1, 1, 1, 1]


def test_the_host_check_holds_for_any_bind_address(tmp_path):
    record_cartpole(tmp_path, 1, video=True)
    server = ViewerServer(tmp_path, host="0.0.0.0", allow_hosts=["Viewer.Example"]).start()
    try:
        port = server.server_address[1]

        def status(host):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/index", headers={"Host": host})
            r = conn.getresponse()
            r.read()
            conn.close()
            return r.status

        assert status(f"viewer.example:{port}") == status(f"localhost:{port}") == status(f"0.0.0.0:{port}") == 200
        for bad in ("evil.example:80", f"evil.example:{port}", f"viewer.example:{port + 1}", "viewer.example", "", f"[::1]x:{port}"):
            assert status(bad) == 403, bad
        assert server.refused["host"] == 6
    finally:
        server.close()


@pytest.mark.xdist_group("serial")
def test_idle_connections_time_out_and_connections_are_bounded(tmp_path, monkeypatch):
    import socket

    from envrec.viewer import server as server_module
    from envrec.viewer.connections import Slots

    monkeypatch.setattr(server_module._Handler, "deadline_s", 1.5)
    record_cartpole(tmp_path, 1, video=True)
    server = ViewerServer(tmp_path)
    server.slots = Slots(max_connections=2, max_per_client=2, drop_after_s=60)  # no waiter is old enough to drop
    server.start()
    try:
        idle = [socket.create_connection(server.server_address[:2], timeout=10) for _ in range(2)]
        time.sleep(0.3)  # both accepted and waiting for a request line
        extra = socket.create_connection(server.server_address[:2], timeout=10)
        t0 = time.monotonic()
        assert extra.recv(1) == b"" and time.monotonic() - t0 < 1.0  # closed unanswered, at once
        assert server.refused["connections"] == 1
        for s in idle:
            t0 = time.monotonic()
            s.recv(1024)  # the server gives up on a connection that sends nothing
            assert time.monotonic() - t0 < 5
        for s in (*idle, extra):
            s.close()
        time.sleep(0.2)
        assert get(server, "/api/index")[0] == 200  # the slots are free again
        assert server.refused["deadline"] == 0  # idle keep-alives closed, not counted as slow requests
    finally:
        server.close()


def _verdicts(prefix: str) -> list:
    from envrec.replay.verdicts import Verdict

    return [Verdict(prefix, 0, 0, "reproduced", steps=20, start="seed"),
            Verdict(prefix, 1, 1, "diverged", steps=17, start="rng", step=17, field="observations", where="[2]",
                    recorded=0.1, replayed=0.13, difference=0.03),
            Verdict(prefix, 2, 2, "cannot_replay", reason="reset without a seed", hint="seed the reset")]


def test_episodes_are_marked_by_verdict_and_one_without_a_clip_gets_its_render_command(tmp_path):
    import shlex

    from envrec.replay.verdicts import write_verdicts
    from envrec.viewer.catalog import Catalog

    given = str(tmp_path / "my runs") + "/"  # a space to quote, and the folder as typed (trailing slash kept)
    record_cartpole(given, 3, video=lambda e: e == 1, name_prefix="cp")
    record_cartpole(given, 1, name_prefix="other")  # a second recording in the folder: commands name --prefix
    write_verdicts(given, "cp", _verdicts("cp"), atol=0.0, infos=False)
    catalog = Catalog(given)
    doc = catalog.index()
    marks = {(e["recording"], e["episode_id"]): (e["verdict"], e["verdict_status"]) for e in doc["episodes"]}
    assert marks == {("cp", 0): ("reproduced", "reproduced"), ("cp", 1): ("diverged at step 17", "diverged"),
                     ("cp", 2): ("cannot replay", "cannot_replay"), ("other", 0): (None, None)}
    rows = {r["name"]: (r["verify"], r["verify_command"]) for r in doc["recordings"]}
    assert rows == {"cp": ("1 reproduced, 1 diverged, 1 cannot replay", None),
                    "other": ("not verified", f"envrec verify {shlex.quote(given)} --prefix other")}
    ep = catalog.episode("cp", 0)
    assert ep["clip"] is None and ep["render_command"] == f"envrec render {shlex.quote(given)} --prefix cp --episodes 0"
    assert ep["verdict_detail"] == "reproduced: 20 steps, started from its seed" and ep["verified_at"]
    ep = catalog.episode("cp", 1)
    assert ep["clip"] is not None and ep["render_command"] is None
    assert ep["verdict_detail"] == "diverged at step 17: observations[2] recorded 0.1, replayed 0.13; largest difference in observations: 0.03"
    assert ep["diverged_at"] == 17 and catalog.episode("cp", 0)["diverged_at"] is None
    assert catalog.episode("cp", 2)["verdict_detail"] == "cannot replay: reset without a seed; seed the reset"
    assert catalog.episode("other", 0)["verify_command"] == f"envrec verify {shlex.quote(given)} --prefix other --episodes 0"


def test_a_crafted_verdict_file_is_a_damaged_row_or_shown_as_text(tmp_path):
    from envrec.replay.verdicts import verdict_path, write_verdicts

    record_cartpole(tmp_path / "a", 3, name_prefix="cp")
    record_cartpole(tmp_path / "b", 1, name_prefix="cp")
    path = write_verdicts(tmp_path / "a", "cp", _verdicts("cp"), atol=0.0, infos=False)
    doc = json.load(open(path))
    markup = "<img src=x onerror=alert(1)>\x1b[2J"
    doc["episodes"]["1"].update(where=markup, recorded=[markup] * 100)
    doc["episodes"]["2"]["reason"] = markup
    open(path, "w").write(json.dumps(doc))
    text = json.dumps(doc).replace('"difference": 0.03', '"difference": NaN')  # not JSON as envrec writes it
    (tmp_path / "outside.json").write_text(text)
    record_cartpole(tmp_path / "c", 1, name_prefix="cp")
    (tmp_path / "c" / "cp.verify.json").write_text(text)
    os.symlink(tmp_path / "outside.json", verdict_path(tmp_path / "b", "cp"))  # never followed out of the folder
    server = ViewerServer(tmp_path).start()
    try:
        status, _, body = get(server, "/api/index")
        assert status == 200
        index = json.loads(body)
        assert sorted(d["file"] for d in index["damaged"]) == ["b/cp.verify.json", "c/cp.verify.json"]  # a link out, a NaN
        assert {r["name"]: r["verify"] for r in index["recordings"]} == {
            "a/cp": "1 reproduced, 1 diverged, 1 cannot replay", "b/cp": "verdict file unreadable",
            "c/cp": "verdict file unreadable"}
        status, _, body = get(server, "/api/episode?recording=a/cp&episode=1")
        assert status == 200
        detail = json.loads(body)["verdict_detail"]
        assert "<img src=x onerror=alert(1)>\\x1b[2J" in detail and "0.03" in detail and len(detail) < 300
        assert "\x1b" not in json.loads(get(server, "/api/episode?recording=a/cp&episode=2")[2])["verdict_detail"]
        ep = json.loads(get(server, "/api/episode?recording=b/cp&episode=0")[2])
        assert ep["verdict"] is None and ep["verdict_detail"].startswith("verdict file unreadable") and ep["verify_command"] is None
        assert ep["render_command"] == f"envrec render {os.path.join(str(tmp_path), 'b')} --episodes 0"
    finally:
        server.close()
