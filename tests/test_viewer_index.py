"""The viewer's index at scale and live: per-recording summaries, sorted pages of episodes, caches that see changes,
a recording followed while it is written, and one killed mid-episode read as interrupted, not recording forever.

The 10,000-episode folder is built once per session by envrec itself (``scripts/bench/bench_viewer_index.py``'s
``build``: CartPole fed to a ``TraceRecorder``). The live tests run ``tests/child_live.py``, an env process stepping
one endless episode committed in parts every 0.2 s, and kill it (and its worker) the way a job is killed.
``ENVREC_VIEWER_LIVE_SCREENSHOT=FILE`` saves the index of the running recording (``docs/viewer-live.png``).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import time

import pytest

import envrec
from envrec.viewer import ViewerServer
from envrec.viewer import listing as listing_module
from envrec.viewer.live import worker_running

from .support.episodes import record_cartpole
from .support.processes import start_child
from .support.scripts import load_script

pytestmark = pytest.mark.timeout(180)

BIG_RECORDINGS, BIG_EPISODES = 10, 1000  # 10,000 episodes of 8-10 steps
STALE_S = 1.5  # the live tests' staleness timeout (the child commits every 0.2 s: 3 intervals are less)


@pytest.fixture(scope="session")
def big_folder(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("viewer-10k"))
    load_script("bench/bench_viewer_index.py").build(folder, BIG_RECORDINGS, BIG_EPISODES)
    return folder


def get(server, path):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, json.loads(body)


def timed(server, path):
    t0 = time.perf_counter()
    status, doc = get(server, path)
    assert status == 200, doc
    return time.perf_counter() - t0, doc


@pytest.mark.slow
@pytest.mark.xdist_group("serial")
def test_the_index_of_10000_episodes_answers_in_under_a_second(big_folder):
    server = ViewerServer(big_folder).start()
    try:
        cold, doc = timed(server, "/api/index")
        page_cold, page = timed(server, "/api/episodes?recording=run04&limit=100&sort=-length")
        warm, again = timed(server, "/api/index")
        page_warm, _ = timed(server, "/api/episodes?recording=run04&limit=100&sort=-length")
    finally:
        server.close()
    assert doc["episodes"] == BIG_RECORDINGS * BIG_EPISODES and len(doc["recordings"]) == BIG_RECORDINGS
    assert all(r["state"] == "complete" and r["episodes"] == BIG_EPISODES for r in doc["recordings"])
    assert again == doc and page["total"] == BIG_EPISODES and len(page["episodes"]) == 100
    assert cold < 1.0 and page_cold < 1.0, (cold, page_cold)
    assert warm < 0.25 and page_warm < 0.25, (warm, page_warm)  # nothing changed: nothing read again
    print(f"index cold {cold * 1e3:.0f} ms, warm {warm * 1e3:.0f} ms; page cold {page_cold * 1e3:.0f} ms, warm {page_warm * 1e3:.0f} ms")


def test_pages_are_the_sorted_episodes_cut_where_asked(big_folder):
    reader = envrec.TraceReader(big_folder, prefix="run07")
    truth = [(ep.episode_id, ep.length, ep.total_reward) for ep in reader]
    reader.close()
    server = ViewerServer(big_folder).start()
    try:
        pages = [get(server, f"/api/episodes?recording=run07&offset={o}&limit=300&sort=-length")[1] for o in range(0, 1200, 300)]
        first = get(server, "/api/episodes?recording=run07&limit=5")[1]
        by_return = get(server, "/api/episodes?recording=run07&limit=1000&sort=return")[1]
        everything = get(server, "/api/episodes?offset=9995&limit=10")[1]
    finally:
        server.close()
    rows = [e for p in pages for e in p["episodes"]]
    assert [p["total"] for p in pages] == [1000] * 4 and [len(p["episodes"]) for p in pages] == [300, 300, 300, 100]
    assert pages[0]["sort"] == "-length" and pages[3]["offset"] == 900
    # descending by length, ties in episode order (a stable sort): exactly the reader's episodes
    assert [(e["episode_id"], e["length"], e["return"]) for e in rows] == sorted(truth, key=lambda t: -t[1])
    assert [e["episode_id"] for e in first["episodes"]] == [0, 1, 2, 3, 4] and first["sort"] == "episode_id"
    assert [e["return"] for e in by_return["episodes"]] == sorted(t[2] for t in truth)
    assert everything["total"] == 10_000 and [(e["recording"], e["episode_id"]) for e in everything["episodes"]] == [
        ("run09", i) for i in range(995, 1000)]


@pytest.fixture(scope="module")
def two_episodes_served(tmp_path_factory):
    """A viewer on a recording of two episodes named cp, shared by the tests that only ask it (read-only)."""
    folder = tmp_path_factory.mktemp("served")
    record_cartpole(folder, 2, name_prefix="cp")
    server = ViewerServer(folder).start()
    yield server
    server.close()


@pytest.mark.parametrize("query, status, message", [
    ("/api/episodes?recording=cp&offset=-1", 400, "offset must be a whole number >= 0, not '-1'"),
    ("/api/episodes?recording=cp&offset=ten", 400, "offset must be a whole number >= 0, not 'ten'"),
    ("/api/episodes?recording=cp&limit=0", 400, "limit must be a whole number from 1 to 1000, not 0"),
    ("/api/episodes?recording=cp&limit=1001", 400, "limit must be a whole number from 1 to 1000, not 1001"),
    ("/api/episodes?recording=cp&sort=size", 400, "sort must be one of recording, episode_id, length, parts, return"),
    ("/api/episodes?recording=cp&sort=--length", 400, "(a '-' before it: descending), not '--length'"),
    ("/api/episodes?recording=cp&recording=cp", 400, "recording is given 2 times: give it once"),
    ("/api/episodes?recording=nope", 404, "no recording 'nope'"),
    ("/api/clips?sort=length", 400, "sort must be one of name, episode_id, frames, fps, broken, folder"),
    ("/api/clips?limit=5x", 400, "limit must be a whole number >= 0, not '5x'"),
])
def test_bad_page_parameters_are_answered_with_what_they_must_be(two_episodes_served, query, status, message):
    got, doc = get(two_episodes_served, query)
    assert got == status and message in doc["error"], doc


def test_a_rescan_reads_only_what_changed(tmp_path, monkeypatch):
    record_cartpole(tmp_path, 3, name_prefix="a")
    record_cartpole(tmp_path, 2, name_prefix="b", video=True)
    opened = []
    real = listing_module.TraceReader
    monkeypatch.setattr(listing_module, "TraceReader", lambda folder, prefix, **kw: opened.append(prefix) or real(folder, prefix, **kw))
    server = ViewerServer(tmp_path).start()
    try:
        first = get(server, "/api/index")[1]
        assert sorted(opened) == ["a", "b"] and [r["episodes"] for r in first["recordings"]] == [3, 2]
        get(server, "/api/episodes?recording=b")
        opened.clear()
        assert get(server, "/api/index")[1] == first and opened == []  # nothing changed: no manifest read again
        record_cartpole(tmp_path, 4, name_prefix="c")  # a new recording
        os.unlink(tmp_path / "a.manifest.json")  # one gone
        meta = next(p for p in tmp_path.iterdir() if p.name.endswith("-episode-1.meta.json"))
        doc = json.loads(meta.read_text())
        meta.write_text(json.dumps({**doc, "broken": True, "reason": "cut short"}))  # a clip's metadata rewritten
        second = get(server, "/api/index")[1]
        clips = get(server, "/api/clips?sort=episode_id")[1]["clips"]
        rows = get(server, "/api/episodes?recording=b")[1]["episodes"]
    finally:
        server.close()
    assert opened == ["c"] and [(r["name"], r["episodes"]) for r in second["recordings"]] == [("b", 2), ("c", 4)]
    assert [(c["episode_id"], c["broken"], c["reason"]) for c in clips] == [(0, False, None), (1, True, "cut short")]
    assert [e["clip"] is not None for e in rows] == [True, True]


@pytest.mark.parametrize("manifest, idle_s, state, detail", [
    ({"complete": True, "closed_cleanly": True}, 999, "complete", "complete"),
    ({"complete": True, "closed_cleanly": False}, 0, "ended", "its env process died"),
    ({"complete": True, "closed_cleanly": False, "terminated_by": "SIGTERM"}, 0, "ended", "stopped by SIGTERM"),
    ({"complete": True, "closed_cleanly": False, "error": "disk full"}, 0, "ended", "error: disk full"),
    ({"complete": False}, 1.0, "recording", "recording"),
    ({"complete": False}, 31.0, "interrupted", "no file changed for 31 s (timeout 30 s)"),
    ({"complete": False, "settings": {"commit_interval": 20.0}}, 31.0, "recording", "recording"),  # 3 intervals: 60 s
    ({"complete": False, "settings": {"commit_interval": 20.0}}, 61.0, "interrupted", "(timeout 60 s)"),
    ({"complete": False, "writer": {"pid": os.getpid()}}, 31.0, "interrupted", "no worker of it runs here"),  # a pid, no worker
    ({"batches": []}, 999, "unknown", "not written by envrec"),  # gym-recording's manifest
])
def test_a_recordings_state_is_told_from_its_manifest_and_files(manifest, idle_s, state, detail):
    from envrec.viewer.live import recording_state

    doc = manifest if "batches" in manifest else {"format": "envrec.trace", **manifest}
    got = recording_state(doc, changed_at=1000.0, stale_after_s=30.0, now=1000.0 + idle_s)
    assert got["state"] == state and detail in got["state_detail"], got
    assert got["idle_s"] == (idle_s if state in ("recording", "interrupted") else None)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_for(what, check, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def _live_child(folder):
    child = start_child("child_live.py", str(folder), "300")
    worker = int(child.stdout.readline())
    assert child.stdout.readline().strip() == "ready"
    return child, worker


def _leftovers(folder):
    """What a SIGKILLed serializer leaves (its temporary files: the reader never reads them), removed."""
    for name in os.listdir(folder):
        if name.endswith(".tmp"):
            os.unlink(os.path.join(folder, name))


def _recording(server):
    doc = get(server, "/api/index")[1]
    return doc["recordings"][0] if doc["recordings"] else None


@pytest.mark.xdist_group("serial")
def test_a_running_episode_grows_on_the_index_a_paused_one_stays_recording_and_a_killed_one_reads_interrupted(tmp_path):
    child, worker = _live_child(tmp_path)
    server = ViewerServer(tmp_path, stale_after_s=STALE_S).start()
    try:
        first = _wait_for("the running episode listed", lambda: (r := _recording(server)) and r["live_episode"] and r, 10)
        assert first["state"] == "recording" and get(server, "/api/index")[1]["live"] is True
        ep = get(server, "/api/episode?recording=live&episode=0&width=200")[1]
        later = _wait_for("its steps growing", lambda: (r := _recording(server))["live_episode"]["steps"] > first["live_episode"]["steps"] + 100 and r, 10)
        grown = get(server, "/api/episode?recording=live&episode=0&width=200")[1]
        row = get(server, "/api/episodes?recording=live")[1]["episodes"][0]
        assert ep["ended_by"] is None and grown["length"] > ep["length"] and grown["parts"] > ep["parts"]
        assert later["steps"] == later["live_episode"]["steps"] >= grown["length"] - 100  # the summary keeps up
        assert row["live"] is True and row["ended_by"] is None
        os.kill(child.pid, signal.SIGSTOP)  # the env pauses: nothing more is committed, but its worker lives
        try:
            paused = _wait_for("idle past the timeout", lambda: (r := _recording(server))["idle_s"] > STALE_S + 0.5 and r, 10)
        finally:
            os.kill(child.pid, signal.SIGCONT)
        assert paused["state"] == "recording" and f"its worker, pid {worker}, waits for steps" in paused["state_detail"]
        _wait_for("committing again", lambda: _recording(server)["steps"] > paused["steps"] + 30, 10)
        _kill(child.pid)
        _kill(worker)  # both at once, as a job's SIGKILL takes the group: no one finalizes the manifest
        child.wait(10)
        killed_at = time.monotonic()
        assert _recording(server)["state"] == "recording"  # the staleness timeout has not passed yet
        stopped = _wait_for("interrupted", lambda: (r := _recording(server))["state"] == "interrupted" and r, STALE_S + 10)
        took = time.monotonic() - killed_at
        again = get(server, "/api/index")[1]
        row = get(server, "/api/episodes?recording=live")[1]["episodes"][0]
    finally:
        _kill(child.pid)
        _kill(worker)
        child.wait(10)
        child.stdout.close()
        server.close()
        _leftovers(tmp_path)
    assert STALE_S * 0.5 <= took <= STALE_S + 5, took
    assert "no worker of it runs here" in stopped["state_detail"] and not stopped["complete"]
    assert again["live"] is False and row["live"] is False and row["ended_by"] is None  # the page polls no more


def test_a_killed_env_process_alone_is_finalized_by_its_worker_and_reads_ended(tmp_path):
    child, worker = _live_child(tmp_path)
    server = ViewerServer(tmp_path, stale_after_s=60).start()
    try:
        _wait_for("the running episode listed", lambda: (r := _recording(server)) and r["live_episode"], 10)
        _kill(child.pid)  # the worker sees its parent die, drains the ring and writes the final manifest
        child.wait(10)
        ended = _wait_for("ended", lambda: (r := _recording(server))["state"] == "ended" and r, 20)
        _wait_for("its worker gone", lambda: not worker_running(worker), 10)
        row = get(server, "/api/episodes?recording=live")[1]["episodes"][-1]
    finally:
        _kill(child.pid)
        child.wait(10)
        child.stdout.close()
        server.close()
    assert ended["complete"] and ended["live_episode"] is None and "not closed cleanly" in ended["state_detail"]
    assert row["ended_by"] == "crash" and row["live"] is False


@pytest.mark.slow
def test_a_browser_follows_the_running_episode_on_the_index_and_its_page(tmp_path):
    from .test_viewer_browser import CHROMIUM, CHROMIUM_ARGS, _browser_or_skip

    sync_playwright = _browser_or_skip()
    child, worker = _live_child(tmp_path)
    server = ViewerServer(tmp_path, stale_after_s=STALE_S).start()
    errors = []
    running = "document.querySelector('#recordings td[data-running-steps]').dataset.runningSteps"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url)
            page.wait_for_selector("#recordings tr[data-state='recording'] a.running", timeout=10_000)
            first = int(page.evaluate(running))
            page.wait_for_function(f"() => Number({running}) > {first + 150}", timeout=10_000)  # polled, it grew
            assert page.locator("#episodes tbody td.live").inner_text() == "recording…"
            page.wait_for_function("() => Number(document.body.dataset.polls) >= 2 && document.body.dataset.polling === '1'")
            if os.environ.get("ENVREC_VIEWER_LIVE_SCREENSHOT"):  # docs/viewer-live.png was made so
                page.screenshot(path=os.environ["ENVREC_VIEWER_LIVE_SCREENSHOT"], full_page=True)

            page.click("#recordings a.running")  # the running episode's page: its plots grow as parts arrive
            page.wait_for_selector("body[data-loaded='1'][data-live='1'][data-live-steps]", timeout=10_000)
            shown = int(page.get_attribute("body", "data-live-steps"))  # the steps its plots were drawn with
            page.wait_for_function(f"() => Number(document.body.dataset.liveSteps) > {shown + 150}", timeout=10_000)
            assert page.locator("#live-status").inner_text().startswith("recording: ")
            assert page.locator("canvas").count() >= 3  # drawn again, not emptied

            _kill(child.pid)
            _kill(worker)
            page.wait_for_selector("body[data-live='0']", timeout=(STALE_S + 10) * 1000)
            assert "stopped (interrupted)" in page.locator("#live-status").inner_text()
            page.goto(server.url)
            page.wait_for_selector("#recordings tr[data-state='interrupted']", timeout=10_000)
            page.wait_for_selector("body[data-polling='0']")
            assert page.locator("#recordings td.stopped").inner_text() == "interrupted"
            browser.close()
    finally:
        _kill(child.pid)
        _kill(worker)
        child.wait(10)
        child.stdout.close()
        server.close()
        _leftovers(tmp_path)
    assert not errors, errors
