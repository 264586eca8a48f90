"""Shipping when the job ends badly or the store goes away: SIGTERM to the process group, the env process
SIGKILLed, moto's S3 server stopped and started again on its port.

Each test asserts what the store holds afterwards against what was committed locally (every batch's commit
once, the final manifest, every clip), what was reported, and that no process of its own is left.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import gymnasium as gym
import psutil
import pytest

import envrec
from envrec.formats.trace_format import read_manifest, recording_batches
from tests.support.processes import start_child
from tests.support.s3_server import s3_server
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)
SHIP_BOUND_S = 30.0  # Slurm's SIGKILL comes 30 s after its SIGTERM


@pytest.fixture(scope="module")
def s3():
    server = s3_server()
    yield server
    server.stop()


def _shipped_like_local(s3, folder, path: str) -> envrec.read.dataset.Dataset:
    """The dataset under ``path``: every local trace batch committed once, the final manifest shipped, and
    every finished clip; it is returned for more checks."""
    ds = envrec.open_dataset(s3.url(path), cache_dir=str(folder) + "-cache")
    local = {}
    for n in os.listdir(folder):
        if n.endswith(".manifest.json"):
            m = read_manifest(os.path.join(folder, n))
            local[m["prefix"]] = recording_batches(str(folder), m)
    for prefix, entries in local.items():
        rec = ds.cache.recorders[prefix]
        assert len(rec.commits) == len(entries) and rec.final is not None and rec.final["complete"], prefix
        assert len(s3.keys(f"{path}/{prefix}/commits/")) == len(entries)  # once each
    clips = [n for n in os.listdir(folder) if n.endswith(".meta.json")]
    assert ds.clips.num_rows == len(clips)
    return ds


def _gone(pids) -> bool:
    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    return not any(map(running, pids))


def _start(folder, url: str, *flags: str):
    proc = start_child("child_preempted.py", str(folder), "300", "--ship-to", url, *flags,
                       env={**os.environ, "SDL_NO_SIGNAL_HANDLERS": "1"}, start_new_session=True)
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "ready"
    family = psutil.Process(proc.pid).children(recursive=True)
    assert sum("envrec.ship" in " ".join(_cmdline(p)) for p in family) == 2  # trace and clips
    return proc, [p.pid for p in family]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:  # a short-lived helper (ffmpeg -version) already gone
        return []


@pytest.mark.xdist_group("serial")  # bounded by wall-clock time (docs/testing.md)
def test_sigterm_to_the_group_ships_everything_committed_in_time(s3, tmp_path):
    proc, family = _start(tmp_path / "rec", s3.url("sigterm"), "--video")
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)
    assert wait_for(lambda: _gone(family), SHIP_BOUND_S)
    took = time.monotonic() - t0
    assert took < SHIP_BOUND_S
    ds = _shipped_like_local(s3, tmp_path / "rec", "sigterm")
    trace = next(r for r in ds.recorders if not r.startswith("clips."))
    assert ds.cache.recorders[trace].final["terminated_by"] == "SIGTERM"
    assert ds.episodes.num_rows == len(envrec.TraceReader(tmp_path / "rec")) > 1


@pytest.mark.slow  # the SIGTERM test above takes the same path (the env process gone, its workers finishing)
def test_the_env_process_killed_its_shippers_ship_what_its_workers_commit(s3, tmp_path):
    proc, family = _start(tmp_path / "rec", s3.url("killed"), "--video")
    proc.kill()
    proc.wait(10)
    assert wait_for(lambda: _gone(family), SHIP_BOUND_S)
    ds = _shipped_like_local(s3, tmp_path / "rec", "killed")
    trace = next(r for r in ds.recorders if not r.startswith("clips."))
    assert ds.cache.recorders[trace].final["closed_cleanly"] is False


def test_a_store_away_then_back_is_caught_up_with(tmp_path, caplog):
    """moto's server stopped mid-run and started again on its port: batches wait, the shipper retries (counted,
    warned), then ships every batch exactly once; the env's loop never sees an error."""
    caplog.set_level(logging.INFO, logger="envrec.supervision.shipper")
    server = s3_server()
    port = int(server.endpoint.rsplit(":", 1)[1])
    try:
        env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path / "rec", batch_bytes=2_000, commit_interval=0.2,
                                 ship_to=server.url("away"),
                                 storage_options={"config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}}})
        env.reset(seed=0)
        server.server.stop()
        for _ in range(1500):
            *_, te, tr, _ = env.step(env.action_space.sample())
            if te or tr:
                env.reset()
        assert wait_for(lambda: env.recorder.stats()["ship_store_unreachable"] == 1, 30)
        assert env.recorder.stats()["ship_pending"] > 0
        from moto.server import ThreadedMotoServer

        server.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.server.start()
        assert wait_for(lambda: env.recorder.stats()["ship_store_unreachable"] == 0, 60)
        assert wait_for(lambda: "answers again" in caplog.text, 10)
        env.close()
        stats = env.recorder.stats()
        assert stats["ship_pending"] == 0 and stats["ship_retries"] >= 1 and stats["ship_batches"] == stats["batches"]
        assert caplog.text.count("does not answer") == 1  # once an outage
        _shipped_like_local(server, tmp_path / "rec", "away")
    finally:
        server.stop()
