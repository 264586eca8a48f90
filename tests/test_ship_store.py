"""Shipping to a store: each batch exactly once, read back bit-exact, bad stores refused, budgets waiting.

Against moto's S3 server on 127.0.0.1 (tests/support/s3_server.py) and local folders. Each test asserts what
reached the store (commit documents against the local manifest's batches), what was reported (stats,
exit status, messages without credentials) and that nothing of its own is left (no temporary files; the
suite's leak check for processes and memfds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

import envrec
from envrec.formats.ownfolder import OwnFolder
from envrec.formats.store import Store, redact
from envrec.formats.trace_format import manifest_name, read_manifest, recording_batches
from envrec.ship.counters import ShipCounter, ShipCounters
from envrec.ship.shipping import FolderShipping, ShipTargets
from tests.support.s3_server import CREDENTIALS, s3_server
from tests.support.waiting import wait_for

FAST = {"config_kwargs": {"connect_timeout": 1, "read_timeout": 5, "retries": {"max_attempts": 1}}}


@pytest.fixture(scope="module")
def s3():
    server = s3_server()
    yield server
    server.stop()


def _record(folder, episodes: int = 6, **options) -> envrec.RecordTrace:
    env = envrec.RecordTrace(gym.make("CartPole-v1"), folder, batch_bytes=3_000, commit_interval=None, **options)
    env.action_space.seed(0)
    for e in range(episodes):
        env.reset(seed=e)
        done = False
        while not done:
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    env.close()
    return env


def _local_batches(folder) -> dict[str, list]:
    """Every recording's batch entries, by prefix."""
    out = {}
    for n in os.listdir(folder):
        if n.endswith(".manifest.json") and ".m0" not in n:
            m = read_manifest(os.path.join(folder, n))
            out[m["prefix"]] = recording_batches(str(folder), m)
    return out


def _no_temporaries(root) -> None:
    left = [n for _, _, names in os.walk(root) for n in names if n.endswith((".shiptmp", ".tmp"))]
    assert not left, left


@pytest.mark.parametrize("where", ["s3", "folder"])
def test_put_once_creates_an_object_once(where, s3, tmp_path):
    store = Store(s3.url("once") if where == "s3" else str(tmp_path / "store"))
    assert store.put_once("a/b.json", b"first") is True
    assert store.put_once("a/b.json", b"second") is False  # S3: 412 on If-None-Match; a folder: link refused
    assert store.read("a/b.json") == b"first" and store.names("a") == ["b.json"]
    if where == "folder":
        _no_temporaries(tmp_path / "store")


@pytest.mark.parametrize("where", ["s3", "file"])
def test_a_recording_ships_once_and_reads_back_bit_exact(where, s3, tmp_path):
    url = s3.url("run-1") if where == "s3" else f"file://{tmp_path}/store"
    env = _record(tmp_path / "rec", ship_to=url)
    stats = env.recorder.stats()
    local = _local_batches(tmp_path / "rec")
    (prefix, entries), = local.items()
    assert stats["batches"] == len(entries) > 2 and stats["ship_batches"] == len(entries)
    assert stats["ship_pending"] == 0 and stats["ship_retries"] == 0 and stats["ship_conflicts"] == 0
    ds = envrec.open_dataset(url, cache_dir=str(tmp_path / "cache"))
    assert ds.recorders == [prefix]
    assert sorted(ds.cache.recorders[prefix].commits) == sorted(ds.cache.recorders[prefix].index_rows)
    assert len(ds.cache.recorders[prefix].commits) == len(entries)  # every batch committed exactly once
    reader = envrec.TraceReader(tmp_path / "rec")
    assert ds.episodes.num_rows == len(reader) == 6
    for i, ep in enumerate(reader):
        row = ds.episodes.slice(i, 1).to_pylist()[0]
        assert (row["episode_id"], row["length"], row["seed"], row["ended_by"]) == (i, ep.length, i, "terminated")
        back = ds.episode(prefix, i)
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert np.array_equal(getattr(back, field), getattr(ep, field)), field
    assert ds.cache.recorders[prefix].final["complete"] is True
    if where == "s3":
        names = s3.keys("run-1/")
        assert sum("/commits/" in k for k in names) == len(entries)
        texts = b"".join(s3.client().get_object(Bucket="envrec-test", Key=k)["Body"].read() for k in names
                         if k.endswith(".json"))
        assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"].encode() not in texts
    else:
        _no_temporaries(tmp_path / "store")


def test_a_reader_sees_batches_while_the_writer_writes(s3, tmp_path):
    url = s3.url("live")
    space = gym.spaces.Box(-1, 1, (4,), np.float32)
    rec = envrec.TraceRecorder(tmp_path / "rec", space, gym.spaces.Discrete(2), batch_bytes=2_000, ship_to=url,
                               commit_interval=0.2)
    try:
        rec.add_reset(np.zeros(4, np.float32), seed=0)
        ds = envrec.open_dataset(url, cache_dir=str(tmp_path / "cache"))
        seen, deadline = 0, time.monotonic() + 30
        while seen < 2 and time.monotonic() < deadline:  # a job stepping on: 50 steps, a pause, a look
            for _ in range(50):
                rec.add_step(1, np.zeros(4, np.float32), 1.0, False, False)
            time.sleep(0.05)
            ds.refresh()
            seen = len(ds.parts)
        assert seen >= 2, "the reader saw nothing committed while the writer was writing"
        assert ds.episodes.to_pylist()[0]["ended_by"] is None  # still running: parts so far, no end yet
    finally:
        rec.close()


@pytest.mark.parametrize("bad, words", [
    ("s3://testing-key-id:hunter2@envrec-test/x", "carries credentials"),
    ("nosuchprotocol://bucket/x", "nosuchprotocol"),
    ("s3://no-such-bucket-here/x", "cannot ship to"),
    ("{tmp}/a-file/store", "cannot ship to"),  # a store that refuses writes: here, a file where a folder must be
])
def test_a_bad_ship_to_is_a_config_error_and_records_nothing(bad, words, s3, tmp_path, caplog):
    (tmp_path / "a-file").write_text("not a folder")
    bad = bad.format(tmp=tmp_path)
    with pytest.raises(envrec.ConfigError) as err:
        envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path / "rec", ship_to=bad)
    assert words in str(err.value)
    assert "hunter2" not in str(err.value) and "hunter2" not in caplog.text
    assert not [n for n in os.listdir(tmp_path / "rec") if not n.startswith(".")] if (tmp_path / "rec").exists() else True


def test_redact_hides_users_passwords_and_queries():
    assert redact("s3://k:secret@bucket/x?sig=abc") == "s3://***@bucket/x?***"
    assert redact("/plain/path") == "/plain/path"


def test_two_shippers_racing_commit_each_batch_once(s3, tmp_path):
    _record(tmp_path / "rec", episodes=12)
    (prefix, entries), = _local_batches(tmp_path / "rec").items()
    counters = [ShipCounters(shared=False), ShipCounters(shared=False)]

    def ship(c: ShipCounters) -> None:
        with OwnFolder(str(tmp_path / "rec")) as own:
            FolderShipping(Store(s3.url("race")), own, ShipTargets(), c).ship_pass()

    threads = [threading.Thread(target=ship, args=(c,)) for c in counters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    commits = [k for k in s3.keys(f"race/{prefix}/commits/")]
    assert len(commits) == len(set(commits)) == len(entries)
    assert all(c[ShipCounter.CONFLICTS] == 0 and c[ShipCounter.PENDING] == 0 for c in counters)
    ds = envrec.open_dataset(s3.url("race"), cache_dir=str(tmp_path / "cache"))
    assert ds.episodes.num_rows == 12


def test_envrec_ship_resumes_and_ships_nothing_twice(s3, tmp_path):
    _record(tmp_path / "rec")
    n = len(next(iter(_local_batches(tmp_path / "rec").values())))
    cmd = [sys.executable, "-m", "envrec", "ship", str(tmp_path / "rec"), s3.url("cli"), "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # the local ledger: nothing to do
    for n_ in os.listdir(tmp_path / "rec"):
        if ".shipped-" in n_:
            os.unlink(tmp_path / "rec" / n_)  # the ledger lost: the store's commits say what is shipped
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == again.returncode == resumed.returncode == 0, first.stderr + again.stderr
    figures = [json.loads(r.stdout) for r in (first, again, resumed)]
    assert [f["batches_shipped"] for f in figures] == [n, n, n]  # in the store, sent now or before
    assert figures[0]["bytes_shipped"] > 0 and figures[1]["bytes_shipped"] == figures[2]["bytes_shipped"] == 0
    assert sum("/commits/" in k for k in s3.keys("cli/")) == n
    bad = subprocess.run([sys.executable, "-m", "envrec", "ship", str(tmp_path / "nothing"), s3.url("cli")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "cannot be read" in bad.stderr


def test_the_budget_waits_for_a_store_that_is_away_then_it_all_ships(s3, tmp_path, caplog):
    """max_bytes never evicts what is not shipped: the store is away (a closed port), the recording grows past
    its budget, counted and warned once; `envrec ship` to a store that answers ships every batch later."""
    away = {"endpoint_url": "http://127.0.0.1:9", **FAST}
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path / "rec", batch_bytes=3_000, max_bytes=7_000,
                             commit_interval=None, ship_to="s3://envrec-test/away", storage_options=away)
    os.environ["ENVREC_SHIP_DEADLINE_S"] = "2"
    try:
        env.reset(seed=0)
        for _ in range(2000):
            *_, te, tr, _ = env.step(env.action_space.sample())
            if te or tr:
                env.reset()
        assert wait_for(lambda: env.recorder.stats()["bytes_held_for_shipping"] > 0, 20)  # the serializer caught up
        assert env.recorder.stats()["batches_evicted"] == 0
        assert caplog.text.count("shipping falls behind the disk budget") == 1
        env.recorder.stats()
        assert caplog.text.count("shipping falls behind the disk budget") == 1  # warned once
    finally:
        env.close()
        del os.environ["ENVREC_SHIP_DEADLINE_S"]
    final = env.recorder.stats()
    assert final["ship_pending"] == final["batches"] > 3 and final["ship_store_unreachable"] == 1
    assert final["ship_retries"] >= 1
    done = subprocess.run([sys.executable, "-m", "envrec", "ship", str(tmp_path / "rec"), s3.url("later"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["batches_shipped"] == final["batches"], done.stdout + done.stderr


def test_a_killed_shipper_is_replaced_and_ships_each_batch_once(s3, tmp_path):
    space = gym.spaces.Box(-1, 1, (4,), np.float32)
    rec = envrec.TraceRecorder(tmp_path / "rec", space, gym.spaces.Discrete(2), batch_bytes=2_000,
                               ship_to=s3.url("killed"), commit_interval=0.1)
    try:
        rec.add_reset(np.zeros(4, np.float32), seed=0)
        for step in range(3000):
            rec.add_step(1, np.zeros(4, np.float32), 1.0, step % 300 == 299, False)
            if step % 300 == 299:
                rec.add_reset(np.zeros(4, np.float32))
            if step == 1500:
                shipper = [p for p in psutil.Process().children() if "envrec.ship" in " ".join(p.cmdline())]
                assert len(shipper) == 1
                shipper[0].kill()
                shipper[0].wait(10)
    finally:
        rec.close()
    stats = rec.stats()
    assert stats["ship_restarts"] == 1 and stats["ship_pending"] == 0
    entries = recording_batches(str(tmp_path / "rec"), read_manifest(str(tmp_path / "rec" / manifest_name(rec.prefix))))
    commits = s3.keys(f"killed/{rec.prefix}/commits/")
    assert len(commits) == len(entries) == stats["batches"]


def test_a_hostile_store_is_read_without_trusting_it(tmp_path):
    """Commits that name another recording's files or a manifest, or are not JSON, are left out; the rest reads."""
    store = tmp_path / "store"
    _record(tmp_path / "rec", episodes=3, ship_to=str(store))
    good = next(iter(_local_batches(tmp_path / "rec")))
    evil = store / "evil"
    (evil / "commits").mkdir(parents=True)
    (evil / "data").mkdir()
    (evil / "recorder.json").write_text(json.dumps({"kind": "trace"}))
    (evil / "head.json").write_text((store / good / "head.json").read_text())
    (evil / "data" / f"{good}.manifest.json").write_text("{}")
    entry = {"first": 0, "len": 1, "fn": f"{good}.manifest.json", "bin": f"{good}.manifest.json", "steps": 1,
             "json_bytes": 2, "bin_bytes": 2, "array_bytes": 0, "json_crc32": 0, "bin_crc32": 0}
    commit = {"format": "envrec.shipped", "version": 1, "kind": "batch", "recorder": "evil", "key": "ep000000000.p000000",
              "objects": [{"name": f"data/{good}.manifest.json", "size": 2}], "index": None, "entry": entry,
              "shipped_by": {}, "committed_at": 0}
    (evil / "commits" / "ep000000000.p000000.json").write_text(json.dumps(commit))
    (evil / "commits" / "ep000000001.p000000.json").write_text("not json [")
    ds = envrec.open_dataset(str(store), cache_dir=str(tmp_path / "cache"))
    folder = ds.local()
    assert json.loads((tmp_path / "cache" / f"{good}.manifest.json").read_text())["prefix"] == good  # not replaced
    assert ds.episodes.num_rows == 3 and len(envrec.TraceReader(folder, prefix=good)) == 3
    assert set(ds.cache.recorders["evil"].broken) == {"ep000000000.p000000", "ep000000001.p000000"}
