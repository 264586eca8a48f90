"""Episode parts, the writer's side: an open episode is cut into parts by size and by time (also while the env
is paused), budgets hold for an endless episode, short episodes are written as before, and the part commits
survive faults (the raise/exit/kill battery at every point of a part commit lives in test_faults.py).

Every test leaves no process, segment or temp file behind (the ``no_leaks`` fixture).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import envrec
from envrec.bench.variants import FrameEnv
from envrec.contract.faults import FaultSpec
from envrec.contract.records import TraceLayout
from envrec.formats.compression import parse_compression
from envrec.formats.ownfolder import OwnFolder
from envrec.formats.schema import describe_space
from envrec.formats.trace_format import trace_file_names
from envrec.workers.batch_writer import BatchWriter
from envrec.workers.episode_fields import EpisodeFields

from .support.batch_json import load_batch
from .support.episodes import feed
from .support.processes import start_child
from .support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

OBS = spaces.Box(0, 255, (16, 16, 3), np.uint8)
ACT = spaces.Discrete(2)
FRAME = 16 * 16 * 3


def _batch_docs(folder) -> list[tuple[dict, dict]]:
    """(manifest entry, batch JSON) of every batch the head manifest names, oldest first."""
    name = next(n for n in os.listdir(folder) if n.endswith(".manifest.json") and ".m0" not in n)
    manifest = json.load(open(os.path.join(folder, name)))
    return [(b, json.load(open(os.path.join(folder, b["fn"])))) for b in manifest["batches"]]


def check_parts(reader: envrec.TraceReader, index: int = 0) -> list:
    """The parts of episode ``index`` read one by one; asserts they follow on (indices, first steps, row 0)."""
    parts = list(reader.iter_parts(index))
    for before, after in itertools.pairwise(parts):
        b, a = before.parts[0], after.parts[0]
        assert a.index == b.index + 1 and a.first_step == b.first_step + b.length and b.continues
        assert np.array_equal(after.observations[0], before.observations[-1])
        assert after.infos[0] == before.infos[-1]
    for p in parts:
        assert p.parts[0].length >= 1 and len(p.observations) == p.parts[0].length + 1 == len(p.infos)
    return parts


def _endless(rec, steps: int, start: int = 0, pause_s: float = 0.0) -> None:
    """Steps ``start..start+steps-1`` of one episode that never ends; frame value 0 = step % 256."""
    obs = np.zeros(OBS.shape, np.uint8)
    if start == 0:
        rec.add_reset(obs, seed=7)
    for t in range(start, start + steps):
        obs.flat[0], obs.flat[1] = t % 256, (t // 256) % 256
        rec.add_step(t % 2, obs, 1.0, False, False, {"t": t} if t % 4 == 0 else {})
        if pause_s:
            time.sleep(pause_s)


def _step_values(ep) -> list[int]:
    return (ep.observations[1:, 0, 0, 0].astype(int) + 256 * ep.observations[1:, 0, 0, 1].astype(int)).tolist()


def test_short_episodes_are_written_as_before(tmp_path):
    """An episode that fits its batch has no part key; the files are those of a recording that never cuts."""
    folders = []
    for interval in (None, 60.0):
        folder = tmp_path / f"i{interval}"
        rec = envrec.TraceRecorder(folder, OBS, ACT, name_prefix="short", batch_bytes=50_000, commit_interval=interval)
        feed(rec, 12)
        rec.close()
        folders.append(folder)
    names = sorted(n for n in os.listdir(folders[0]) if ".ep" in n)
    assert names == sorted(n for n in os.listdir(folders[1]) if ".ep" in n) and len(names) >= 4
    for n in names:
        assert open(folders[0] / n, "rb").read() == open(folders[1] / n, "rb").read(), n
    for entry, doc in _batch_docs(folders[0]):
        assert "head_part" not in entry and "continues" not in entry and ".p0" not in entry["fn"]
        assert all("part" not in e for e in doc["episodes"])
    manifest = json.load(open(folders[1] / "short.manifest.json"))
    assert manifest["settings"]["commit_interval"] == 60.0


def test_an_episode_is_cut_by_size_into_consecutive_parts(tmp_path):
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="cut", batch_bytes=20 * FRAME, commit_interval=None)
    feed(rec, 1, steps=200)
    feed(rec, 2, steps=5, start=1)
    rec.close()
    docs = _batch_docs(tmp_path)
    head = [(e.get("head_part"), e.get("continues", False), e["len"]) for e, _ in docs]
    assert head[0] == (None, True, 1) and all(h and c for h, c, _ in head[1:-1])
    assert head[-1][0] and not head[-1][1] and head[-1][2] == 3  # the last part, then two short episodes
    for (entry, doc), (_, nxt) in itertools.pairwise(docs):
        if entry.get("continues"):
            last, first = doc["episodes"][-1], nxt["episodes"][0]
            assert last["part"]["continues"] and last["ended_by"] is None and not last["complete"]
            assert first["part"] == {"index": last["part"]["index"] + 1, "continues": first["part"]["continues"],
                                     "first_step": last["part"]["first_step"] + last["length"]}
        assert entry["bin_bytes"] + entry["json_bytes"] < 22 * FRAME + 8192  # a step over batch_bytes at most
    named = [e["fn"] for e, _ in docs]
    assert named[0] == "cut.ep000000000.json" and named[1] == "cut.ep000000000.p000001.json"
    manifest = json.load(open(tmp_path / "cut.manifest.json"))
    assert manifest["counters"]["episodes"] == 3 and manifest["counters"]["steps"] == 210
    reader = envrec.TraceReader(tmp_path)
    parts = check_parts(reader)
    assert len(parts) >= 9 and parts[-1].parts[0].continues is False
    ep = reader[0]
    assert ep.length == 200 and ep.complete and ep.ended_by == "terminated" and _step_values(ep) == list(range(200))
    assert [e.length for e in reader] == [200, 5, 5]


@pytest.mark.variants
@pytest.mark.parametrize("compression", ["zstd", None])  # zstd first: the development tier's (half the time)
def test_an_endless_episode_keeps_its_budget_and_is_readable_while_it_runs(tmp_path, compression):
    """The issue's measurement: 84x84x3 frames, never ending, batch_bytes=1 MB, max_bytes=5 MB, 20,000 steps."""
    batch, budget, steps = 1_000_000, 5_000_000, 20_000
    env = envrec.RecordTrace(FrameEnv(84, 84, length=None), tmp_path, name_prefix="endless", batch_bytes=batch,
                             max_bytes=budget, compression=compression)
    most, seen = 0, []
    try:
        env.reset(seed=3)
        for t in range(1, steps + 1):
            env.step(0)
            if t % 500 == 0:
                most = max(most, sum(_size(tmp_path / n) for n in os.listdir(tmp_path)))
            if t % 4000 == 0:
                seen.append(_last_step_seen(tmp_path))
    finally:
        env.close()
    assert most <= budget + 2 * batch, most  # the budget, the open batch and a batch over at most
    assert seen == sorted(seen) and seen[-1] > 0, seen  # committed steps seen while it ran
    if compression is None:  # a part every 47 steps (the serializer may lag behind the env a little)
        assert seen[0] > 0 and seen[-1] > steps // 2, seen
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == 1
    ep = reader[0]
    assert ep.first_step + ep.length == steps and not ep.complete and ep.ended_by == "close"
    assert len(check_parts(reader)) >= 2
    if compression is None:  # 423 MB raw: the oldest parts were evicted
        manifest = reader.manifests[0]
        assert ep.first_step > 0 and manifest["evicted"]["batches"] > 0 and manifest["evicted"]["episodes"] == 1
        assert manifest["counters"]["episodes"] == 0  # the kept batches all continue the one episode


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:  # evicted (or a temporary file renamed) meanwhile
        return 0


def _last_step_seen(folder) -> int:
    """The step after the last one a reader opened now sees (a batch evicted while it reads: read again)."""
    for _ in range(100):
        try:
            reader = envrec.TraceReader(folder)
            return reader[-1].first_step + reader[-1].length if len(reader) else 0
        except envrec.TraceError:
            time.sleep(0.01)
    raise AssertionError("no whole view of the recording in 100 tries")


def test_a_slow_env_is_committed_within_the_commit_interval(tmp_path):
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="slow", batch_bytes=10_000_000, commit_interval=0.5)
    t0, step = time.monotonic(), 0
    obs = np.zeros(OBS.shape, np.uint8)
    rec.add_reset(obs, seed=0)

    def committed() -> int:
        try:
            return sum(e.length for e in envrec.TraceReader(tmp_path))
        except envrec.TraceError:
            return 0

    while committed() == 0 and time.monotonic() - t0 < 20:
        rec.add_step(0, obs, 0.0, False, False)
        step += 1
        time.sleep(0.01)
    assert committed() > 0  # well within the deadline: about half a second after the first step
    rec.close()
    assert sum(e.length for e in envrec.TraceReader(tmp_path)) == step


@pytest.mark.variants
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_paused_env_has_its_open_part_committed(tmp_path, compression):
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="paused", batch_bytes=10_000_000, commit_interval=0.3,
                               compression=compression)
    _endless(rec, 5)
    assert wait_for(lambda: _committed_steps(tmp_path) == 5, 15)  # no record came after the fifth step
    _endless(rec, 7, start=5)
    assert wait_for(lambda: _committed_steps(tmp_path) == 12, 15)
    _endless(rec, 3, start=12)
    rec.close()
    reader = envrec.TraceReader(tmp_path)
    parts = check_parts(reader)
    assert [p.parts[0].length for p in parts][:2] == [5, 7] and _step_values(reader[0]) == list(range(15))
    assert parts[1].infos[0] == {"t": 4} and parts[2].infos[0] == {}  # the info of the step before, repeated


def _committed_steps(folder) -> int:
    try:
        reader = envrec.TraceReader(folder)
    except envrec.TraceError:
        return 0
    return sum(e.length for e in reader)


@pytest.mark.variants
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_pause_right_after_a_reset_commits_the_episodes_before_it(tmp_path, compression):
    """The interval runs out while the episode just reset has no step: its reset row moves to the next batch,
    the finished episodes are committed, and the episode reads back whole (no part key) from the next batch."""
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="lift", batch_bytes=10_000_000, commit_interval=0.3,
                               compression=compression)
    feed(rec, 2, steps=6)
    rec.add_reset(np.full(OBS.shape, 9, np.uint8), {"first": True}, seed=2)  # then nothing for a while
    assert wait_for(lambda: _committed_steps(tmp_path) == 12, 15)
    assert [e["len"] for e in envrec.TraceReader(tmp_path).recordings[0].batches] == [2]
    obs = np.full(OBS.shape, 9, np.uint8)
    for t in range(5):
        obs.flat[0] = t
        rec.add_step(0, obs, 1.0, t == 4, False)
    rec.close()
    reader = envrec.TraceReader(tmp_path)
    assert [e.length for e in reader] == [6, 6, 5] and [len(e.parts) for e in reader] == [1, 1, 1]
    last = reader[2]
    assert last.seed == 2 and last.infos[0] == {"first": True} and last.observations[0, 0, 0, 1] == 9
    assert last.observations[1:, 0, 0, 0].tolist() == [0, 1, 2, 3, 4] and last.complete
    batches = envrec.TraceReader(tmp_path).recordings[0].batches
    assert all("part" not in ep for b in batches for ep in load_batch(tmp_path / b["fn"])["episodes"])


def test_an_episode_shorter_than_the_interval_is_not_cut_by_it(tmp_path):
    """Whole episodes wait in the open batch for the one running; only an episode (or part) older than
    commit_interval is cut."""
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="short", batch_bytes=10_000_000, commit_interval=0.5)
    feed(rec, 6, steps=70, during=lambda k, t: time.sleep(0.0015) if t % 2 else None)  # ~50 ms an episode
    rec.close()
    reader = envrec.TraceReader(tmp_path)
    assert [len(e.parts) for e in reader] == [1] * 6 and [e.length for e in reader] == [70] * 6


def test_a_paused_episode_that_ended_is_written_whole(tmp_path):
    """Its last step terminated and its reset is yet to come: committed when idle as an episode, not a part."""
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="ended", batch_bytes=10_000_000, commit_interval=0.3)
    feed(rec, 1, steps=6)
    assert wait_for(lambda: _committed_steps(tmp_path) == 6, 15)
    feed(rec, 1, steps=4, start=1)
    rec.close()
    for _, doc in _batch_docs(tmp_path):
        assert all("part" not in e for e in doc["episodes"])
    assert [(e.length, e.complete) for e in envrec.TraceReader(tmp_path)] == [(6, True), (4, True)]


def test_commit_interval_is_checked(tmp_path):
    for bad in (0, -1.0, "5", True):
        with pytest.raises(envrec.ConfigError, match="commit_interval"):
            envrec.TraceRecorder(tmp_path, OBS, ACT, commit_interval=bad)


@pytest.mark.variants
@pytest.mark.parametrize("point", ["part:cut", "commit:json", "commit:done", "part:next"])
def test_a_serializer_killed_in_a_part_commit_is_continued_by_its_successor(tmp_path, point):
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="pk", batch_bytes=8 * FRAME, commit_interval=None,
                               faults=FaultSpec(at=point, after=3, how="kill"), hang_timeout_s=2.0)
    _endless(rec, 60)
    assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == 1, 15)
    _endless(rec, 40, start=60)
    rec.close()
    assert rec.stats()["restarts"] == 1 and rec.stats()["records_lost"] == 0
    reader = envrec.TraceReader(tmp_path)
    check_parts(reader)
    assert len(reader) == 1 and _step_values(reader[0]) == list(range(100))  # every step once, in order
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp") or "checkpoint" in n]


@pytest.mark.variants
@pytest.mark.parametrize("how", ["kill", "raise"])
def test_a_compressing_serializer_killed_cutting_a_part_is_continued(tmp_path, how):
    """Compressed, a successor that cuts before writing a row reads the part's last row from its last chunk."""
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="zk", batch_bytes=150, commit_interval=None,
                               compression="zstd", faults=FaultSpec(at="part:cut", after=2, how=how), hang_timeout_s=2.0)
    _endless(rec, 80, pause_s=0.01)  # idle checkpoints compress the rows so far: the stored size grows by them
    assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == 1, 15)
    _endless(rec, 20, start=80, pause_s=0.01)
    rec.close()
    assert rec.stats()["restarts"] == 1 and rec.stats()["records_lost"] == 0
    reader = envrec.TraceReader(tmp_path)
    assert len(check_parts(reader)) >= 4
    assert len(reader) == 1 and _step_values(reader[0]) == list(range(100))


def test_the_env_process_killed_mid_part_leaves_every_committed_part_readable(tmp_path):
    child = start_child("child_endless.py", str(tmp_path), "300", "wait")
    worker_pid = int(child.stdout.readline())
    assert child.stdout.readline().strip() == "ready"
    assert wait_for(lambda: _committed_steps(tmp_path) >= 280, 15)  # parts committed by size, the last one open
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(30) == -signal.SIGKILL
    child.stdout.close()
    assert wait_for(lambda: not _alive(worker_pid), 10)
    reader = envrec.TraceReader(tmp_path)
    assert not reader.manifests[0]["closed_cleanly"]
    check_parts(reader)
    assert len(reader) == 1 and _step_values(reader[0]) == list(range(300))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_a_vector_recording_cuts_each_sub_envs_episode_into_parts(tmp_path):
    """The vector serializer writes each sub-env's trace with a Serializer of its own: parts come with it."""
    envs = gym.vector.SyncVectorEnv([lambda: FrameEnv(16, 16, length=None) for _ in range(2)])
    envs = envrec.RecordVectorTrace(envs, tmp_path, name_prefix="vec", batch_bytes=20 * FRAME, commit_interval=None)
    envs.reset(seed=0)
    for _ in range(200):
        envs.step(np.zeros(2, np.int64))
    envs.close()
    for i in range(2):
        reader = envrec.TraceReader(tmp_path, prefix=f"vec.env{i}")
        assert len(reader) == 1 and reader[0].length == 200 and len(check_parts(reader)) >= 5


def test_a_reset_right_after_an_idle_cut_leaves_no_empty_part(tmp_path):
    """Cut when idle, then reset before another step: the part before was the episode's last (it says it
    continues: the cut could not know); the next episode starts a batch of its own, named as any."""
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, name_prefix="reset", batch_bytes=10_000_000, commit_interval=0.3)
    _endless(rec, 5)
    assert wait_for(lambda: _committed_steps(tmp_path) == 5, 15)
    feed(rec, 1, steps=3, start=1)
    rec.close()
    docs = _batch_docs(tmp_path)
    assert [e["fn"] for e, _ in docs] == ["reset.ep000000000.json", "reset.ep000000001.json"]
    assert docs[0][1]["episodes"][0]["part"]["continues"] and "part" not in docs[1][1]["episodes"][0]
    assert [e.length for e in envrec.TraceReader(tmp_path)] == [5, 3]


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_a_parts_last_row_is_read_back_from_where_it_went(tmp_path, compression):
    """The row carried over to the next part: from the chunk buffer, the batch file, a spill, or (a successor
    that wrote none of the chunk) the last chunk decompressed."""
    obs_space = spaces.Dict({"img": OBS, "vec": spaces.Box(-1, 1, (3,), np.float32)})
    obs, act = describe_space(obs_space), describe_space(ACT)
    own = OwnFolder(str(tmp_path), trace_file_names("lr"))
    fields = EpisodeFields(own, "lr", TraceLayout.from_specs(obs, act), obs, act, parse_compression(compression))
    batch = BatchWriter(own, "lr", 0)
    try:
        fields.start_episode(batch.bin_size)
        img, vec = fields.sinks[("observations", "img")], fields.sinks[("observations", "vec")]
        rows = np.random.default_rng(0).integers(0, 256, (7, img.row_bytes), np.uint8)
        for i, row in enumerate(rows):
            img.write(row.tobytes(), batch)
            vec.write(np.full(3, i, np.float32).tobytes(), batch)
            fields.infos.write({"i": i})
        assert img.last_row(batch) == rows[-1].tobytes() and fields.infos.last_item() == b'{"i":6}'
        assert vec.last_row(batch) == np.full(3, 6, np.float32).tobytes()
        for f in fields.arrays:
            f.flush_chunk(batch)  # what a checkpoint does
            f.buffered = False  # as in a successor, which wrote none of the chunk
        fields.flush()
        assert img.last_row(batch) == rows[-1].tobytes() and vec.last_row(batch) == np.full(3, 6, np.float32).tobytes()
    finally:
        batch.abort()
        fields.close()
        own.close()
