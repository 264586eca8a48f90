"""The viewer's listing at scale and under a disk budget: a recording of thousands of batches stitched without the
lock other requests wait on, and batches a disk budget evicts under a live viewer reported as evicted, not damaged.

The 5,000-batch folder is written directly (one recorded batch, its JSON hard-linked under 5,000 names and the
manifest naming each): seconds, where recording it would take a minute.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time

import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.bench.variants import FrameEnv
from envrec.viewer import ViewerServer
from envrec.viewer import listing as listing_module
from envrec.viewer.catalog import Catalog
from envrec.viewer.episode_read import Evicted
from envrec.viewer.pieces import NotFound

from .support.waiting import wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("serial")]  # answers timed against QUICK_S

BATCHES = 5000
QUICK_S = 0.75  # an answer that waited for no listing (loaded machines included)


def _many_batches(folder, n: int) -> None:
    rec = envrec.TraceRecorder(folder, S.Box(-1, 1, (4,), np.float32), S.Discrete(2), name_prefix="many",
                               commit_interval=None)
    obs = np.zeros(4, np.float32)
    rec.add_reset(obs)
    rec.add_step(0, obs, 1.0, True, False)
    rec.close()
    path = os.path.join(folder, "many.manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    first = manifest["batches"][0]
    entries = []
    for k in range(n):
        entry = dict(first, first=k, fn=f"many.ep{k:09d}.json", bin=f"many.ep{k:09d}.bin")  # names never repeat
        if k:
            os.link(os.path.join(folder, first["fn"]), os.path.join(folder, entry["fn"]))
            os.link(os.path.join(folder, first["bin"]), os.path.join(folder, entry["bin"]))
        entries.append(entry)
    manifest["batches"] = entries
    with open(path, "w") as f:
        json.dump(manifest, f)


def _get(server, path):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=60)
    t0 = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body, time.perf_counter() - t0


def test_a_first_page_reads_the_first_batches_and_while_the_rest_is_stitched_other_requests_are_answered(tmp_path, monkeypatch):
    _many_batches(tmp_path, BATCHES)
    started = threading.Event()
    real = listing_module.summary_of

    def slow_summary(raw):  # ~2.5 s of stitching in all, however fast the machine
        started.set()
        time.sleep(0.0005)
        return real(raw)

    monkeypatch.setattr(listing_module, "summary_of", slow_summary)
    server = ViewerServer(tmp_path).start()
    sorted_page: list = []
    try:
        assert _get(server, "/api/index")[0] == 200  # the manifest read: what a page needs before any batch
        first = _get(server, "/api/episodes?recording=many&limit=100")  # from the first batches; the rest in the background
        builder = threading.Thread(target=lambda: sorted_page.append(_get(server, "/api/episodes?recording=many&sort=-length")))
        builder.start()
        assert started.wait(30)
        paths = ("/api/health", "/api/index", "/static/style.css", "/api/clips", "/api/episodes?recording=many&offset=100&limit=100")
        answered = {path: _get(server, path) for path in paths}
        still_stitching = builder.is_alive()
        builder.join(60)
        again = _get(server, "/api/episodes?recording=many&offset=4900&limit=100")
    finally:
        server.close()
    assert still_stitching, "the recording was stitched before the other requests came: the test proves nothing"
    for path, (status, body, took) in (("first page", first), *answered.items()):
        assert status == 200 and took < QUICK_S, (path, status, took, body[:200])
    assert json.loads(first[1])["total"] == BATCHES and len(json.loads(first[1])["episodes"]) == 100
    assert [e["episode_id"] for e in json.loads(answered["/api/episodes?recording=many&offset=100&limit=100"][1])["episodes"]] == [0] * 100
    status, body, took = sorted_page[0]
    assert status == 200 and json.loads(body)["total"] == BATCHES and took > 1.0  # sorted: every batch read
    status, body, took = again
    assert status == 200 and len(json.loads(body)["episodes"]) == 100 and took < QUICK_S  # stitched once


def _record_frames(folder, **options):
    env = envrec.RecordTrace(FrameEnv(16, 16, length=None, frames="game"), folder, name_prefix="fr", **options)
    env.reset(seed=3)
    return env


def test_batches_evicted_under_a_live_viewer_are_not_called_damaged(tmp_path):
    env = _record_frames(tmp_path, batch_bytes=20_000, max_bytes=150_000, commit_interval=0.05)
    catalog = Catalog(str(tmp_path))
    seen_evicted = opened = 0
    try:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            for _ in range(30):  # ~3,000 steps in all: evictions aplenty, and a worker that keeps up
                env.step(0)
            time.sleep(0.02)
            doc = catalog.summary()
            assert doc["damaged"] == [], doc["damaged"]
            if not doc["recordings"]:
                continue
            page = catalog.episodes("fr")
            assert catalog.summary()["damaged"] == []
            for row in page["episodes"]:
                try:
                    catalog.episode("fr", row["episode_id"], 200, first_step=row["first_step"])
                    opened += 1
                except NotFound:  # evicted since it was listed (or listed from a later first step now): a 404, never 422
                    seen_evicted += 1
        manifest = envrec.TraceReader(tmp_path).manifests[0]
    finally:
        env.close()
    assert manifest["evicted"]["batches"] > 0, "nothing was evicted: the test proves nothing"
    assert opened > 0
    assert catalog.summary()["damaged"] == []


def _batches(folder) -> list:
    try:
        return envrec.TraceReader(folder).recordings[0].batches
    except envrec.TraceError:
        return []


def test_a_batch_evicted_after_its_manifest_was_read_is_left_out_not_listed_damaged(tmp_path):
    env = _record_frames(tmp_path, batch_bytes=20_000, max_bytes=150_000, commit_interval=None)
    try:
        for _ in range(150):
            env.step(0)
        assert wait_for(lambda: len(_batches(tmp_path)) >= 2, 20)
        catalog, opened = Catalog(str(tmp_path)), Catalog(str(tmp_path))
        head = catalog.listing.recording("fr")  # the manifest as read now
        shown = opened.listing.pieces(opened.listing.recording("fr"))[0]  # an episode the page shows now
        for _ in range(750):  # the disk budget evicts the batches that manifest names
            env.step(0)
        assert wait_for(lambda: not os.path.exists(tmp_path / shown.parts[0][0]["fn"]), 20)
    finally:
        env.close()
    gone = [e for e in head.source.batches if not os.path.exists(tmp_path / e["fn"])]
    assert gone and shown.parts[0][0] in gone, "nothing was evicted: the test proves nothing"
    pieces = catalog.listing.pieces(head)  # reads the batches the old manifest names
    assert head.piece_damaged == [] and catalog.summary()["damaged"] == []
    kept = [entry for piece in pieces for entry, _ in piece.parts]  # what is kept of the endless episode, if anything
    assert all(os.path.exists(tmp_path / e["fn"]) for e in kept) and len(kept) + len(gone) == len(head.source.batches)
    assert opened.episode("fr", 0)["first_step"] > 0  # opened again: from the manifest as it is now, its kept steps
    with pytest.raises(Evicted, match="evicted by the recording's disk budget"):
        opened.parts.get(shown, 0)
