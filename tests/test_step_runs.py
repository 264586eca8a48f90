"""Steps taken in runs (``RingReader.poll_run`` + ``StepRunWriter``) and spills with their tail in memory.

The serializer's worker loop runs here in this process, fed by a producer
thread through a small ring that wraps many times, once taking steps in
runs and once a record at a time: the batch files must be the same bytes,
and read back to what was sent.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np
import pytest
from gymnasium import spaces

from envrec.contract.faults import NO_FAULT, FaultSpec
from envrec.contract.protocol import Kind, SerializerConfig
from envrec.contract.ring import RingWriter
from envrec.contract.ring_reader import RUN, RingReader, run_template
from envrec.formats.compression import parse_compression
from envrec.formats.schema import describe_space
from envrec.read.reader import TraceReader
from envrec.record.packer import TracePacker
from envrec.workers import loop
from envrec.workers.serializer import Serializer
from envrec.workers.spill import MEMORY_BYTES, Spill

from .support.worker_loop import Conn, count_runs

OBS_SPACES = {
    "cartpole": spaces.Box(-np.inf, np.inf, (4,), np.float32),
    "image": spaces.Box(0, 255, (48, 128, 3), np.uint8),  # 18 KiB rows: written with writev from the ring
}


def _episodes(obs_space, seed: int = 0):
    """Episodes of random lengths: (reset observation, [(action, obs, reward, terminated, info)...])."""
    rng = np.random.default_rng(seed)
    obs_space.seed(seed)
    out = []
    for e in range(40):
        n = int(rng.integers(1, 60))
        steps = []
        for t in range(n):
            info = {"lives": int(rng.integers(0, 3))} if rng.random() < 0.05 else {}  # a non-empty info ends a run
            reward = float(rng.normal()) if e % 7 else float("nan")
            steps.append((int(rng.integers(0, 3)), obs_space.sample(), reward, t == n - 1 and e % 3 != 0, info))
        out.append((obs_space.sample(), steps))
    return out


def _record(folder: str, obs_space, episodes, runs: bool, ring_bytes: int, compression=None) -> dict:
    """Send the episodes through a ring to the serializer's real worker loop (in this process)."""
    from envrec.formats.infos import pack_info

    os.makedirs(folder)
    obs_spec, act_spec = describe_space(obs_space), describe_space(spaces.Discrete(3))
    packer = TracePacker(obs_spec, act_spec)
    ring = RingWriter(ring_bytes)
    reader = RingReader(ring.spec)
    cfg = SerializerConfig(folder, "t", obs_spec, act_spec, 16 * ring_bytes // 64, None, {}, faults=NO_FAULT,
                           compression=parse_compression(compression), commit_interval=None)  # cuts by size only: where time puts none
    ser = Serializer(cfg, status=reader.set_status)
    if not runs:
        ser.takes_runs = False  # one record at a time
    taken = count_runs(reader)

    def produce() -> None:
        meta = pack_info({"seed": None, "options": None})
        for e, (obs0, steps) in enumerate(episodes):
            assert packer.write_reset(ring, e, obs0, meta, b"")
            for t, (a, obs, r, term, info) in enumerate(steps, 1):
                assert packer.write_step(ring, e, t, a, obs, r, term, False, pack_info(info) if info else b"")
            if e == 5:  # a step whose episode's reset never came: an orphan, inside what could be a run
                assert packer.write_step(ring, 99, 1, 0, obs, 0.0, False, False, b"")
        ring.write(Kind.CLOSE, 0, 0, (b"{}",))

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert loop.handle_records(reader, ser, Conn(), os.getppid()) is False
    finally:
        producer.join(10)
        reader.close()
        ring.close()
    assert not producer.is_alive()
    summary = ser.summary()
    del summary["commit_us"]  # time
    return {"runs": taken["runs"], "summary": summary}


def _batch_files(folder: str) -> dict[str, bytes]:
    names = sorted(n for n in os.listdir(folder) if n.startswith("t.ep"))
    assert names
    return {n: open(os.path.join(folder, n), "rb").read() for n in names}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("obs", "compression"), [("cartpole", None), ("cartpole", "zstd"), ("image", None), ("image", "lz4")])
def test_runs_write_the_same_bytes_as_step_by_step_and_read_back(tmp_path, obs, compression):
    space = OBS_SPACES[obs]
    episodes = _episodes(space)
    ring_bytes = 64 << 10 if obs == "cartpole" else 1 << 20  # laps the ring many times: runs end at its end
    by_runs = _record(str(tmp_path / "runs"), space, episodes, True, ring_bytes, compression)
    one_by_one = _record(str(tmp_path / "single"), space, episodes, False, ring_bytes, compression)
    assert by_runs["runs"] > 20 and one_by_one["runs"] == 0
    assert by_runs["summary"]["orphan_steps"] == 1 and by_runs["summary"]["batches"] > 1
    if compression is not None:  # chunks end at checkpoints, which fall where the loop's timing puts them (and
        for key in ("bytes", "batches", "commits"):  # so do the cuts of an episode into parts: by stored size)
            del by_runs["summary"][key], one_by_one["summary"][key]
    assert by_runs["summary"] == one_by_one["summary"]
    if compression is None:
        assert _batch_files(str(tmp_path / "runs")) == _batch_files(str(tmp_path / "single"))
    for way in ("runs", "single"):
        _assert_read_back(str(tmp_path / way), episodes)


def _assert_read_back(folder: str, episodes) -> None:
    read = list(TraceReader(folder))
    assert len(read) == len(episodes)
    for ep, (obs0, steps) in zip(read, episodes, strict=True):
        assert ep.observations.tobytes() == np.stack([obs0] + [s[1] for s in steps]).tobytes()
        assert ep.actions.tolist() == [s[0] for s in steps]
        assert ep.rewards.tobytes() == np.array([s[2] for s in steps], "<f8").tobytes()  # NaN bits too
        assert ep.terminations.tolist() == [s[3] for s in steps]
        assert ep.infos[1:] == [s[4] for s in steps]
        total = 0.0
        for s in steps:
            total += s[2]  # in order, as the serializer sums step by step
        # a long episode comes in parts (batch_bytes is small here), its total the sum of theirs
        assert ep.total_reward == (None if math.isnan(total) else pytest.approx(total, rel=1e-12))


def test_a_fault_per_record_turns_runs_off(tmp_path):
    obs_spec, act_spec = describe_space(OBS_SPACES["cartpole"]), describe_space(spaces.Discrete(3))
    cfg = SerializerConfig(str(tmp_path), "t", obs_spec, act_spec, 1000, None, {}, faults=FaultSpec(at="record", after=10**9))
    ser = Serializer(cfg)
    assert ser.run_template is None  # the injector must see every record
    ser.finish(clean=True)
    cfg = SerializerConfig(str(tmp_path), "u", obs_spec, act_spec, 1000, None, {}, faults=NO_FAULT)
    ser = Serializer(cfg)
    assert ser.run_template is not None
    ser.finish(clean=True)


def test_text_spaces_take_no_runs(tmp_path):
    obs_spec, act_spec = describe_space(spaces.Text(8)), describe_space(spaces.Discrete(3))
    cfg = SerializerConfig(str(tmp_path), "t", obs_spec, act_spec, 1000, None, {}, faults=NO_FAULT)
    ser = Serializer(cfg)
    assert ser.run_template is None
    ser.finish(clean=True)


@pytest.fixture
def cartpole_ring():
    packer = TracePacker(describe_space(OBS_SPACES["cartpole"]), describe_space(spaces.Discrete(3)))
    w = RingWriter(8192)
    w.set_policy(block=False)
    r = RingReader(w.spec)
    template = run_template(Kind.STEP, [10, 8, 16, 0])
    yield packer, w, r, template
    r.close()
    w.close()


def _step(packer, w, episode, step, info=b""):
    return packer.write_step(w, episode, step, 1, np.full(4, step, np.float32), 1.0, False, False, info)


def test_poll_run_stops_at_another_layout_another_episode_and_what_is_published(cartpole_ring):
    packer, w, r, template = cartpole_ring
    for t in range(1, 6):
        assert _step(packer, w, 0, t)
    assert _step(packer, w, 0, 6, info=b"\x80\x05}\x94.")  # another length: not in the run
    for t in range(7, 10):
        assert _step(packer, w, 0, t)
    assert _step(packer, w, 1, 1)  # another episode
    run = r.poll_run(template, 256, 1 << 20)
    assert run.kind == RUN and run.count == 5 and run.episode == 0
    assert np.frombuffer(run.rows[:, 64:80].tobytes(), np.float32).reshape(5, 4)[:, 0].tolist() == [1, 2, 3, 4, 5]
    assert r.poll_run(template, 256, 1 << 20) is None  # the record with an info
    assert r.poll().step == 6
    run = r.poll_run(template, 256, 1 << 20)
    assert run.count == 3 and run.episode == 0
    assert r.poll_run(template, 256, 1 << 20) is None  # one record left: not a run
    rec = r.poll()
    assert (rec.episode, rec.step) == (1, 1)
    assert r.poll_run(template, 256, 1 << 20) is None and r.poll() is None
    for t in range(2, 5):
        assert _step(packer, w, 1, t)
    off = w.reserve(80)  # a whole matching record in the ring, but not published
    w.data[off : off + 80] = w.data[off - 80 : off]
    assert r.poll_run(template, 256, 1 << 20).count == 3  # nothing unpublished is read
    r.release()


def test_poll_run_keeps_to_its_limits_and_never_crosses_the_ring_end(cartpole_ring):
    packer, w, r, template = cartpole_ring
    for t in range(1, 21):
        assert _step(packer, w, 0, t)
    assert r.poll_run(template, 4, 1 << 20).count == 4
    assert r.poll_run(template, 256, 80 * 3).count == 3  # 80-byte records
    assert r.poll_run(template, 256, 1 << 20).count == 13
    r.release()
    steps, t = [], 21
    while len(steps) < 150:  # 150 x 80 bytes: wraps the 8 KiB ring
        while _step(packer, w, 0, t):
            t += 1
        while (run := r.poll_run(template, 256, 1 << 20) or r.poll()) is not None:
            if run.kind == RUN:
                assert run.rows.base is not None and run.rows.shape[1] == 80
                steps += np.frombuffer(run.rows[:, 16:24].tobytes(), "<u8").tolist()
            else:
                steps.append(run.step)
        r.release()
    assert steps == list(range(21, 21 + len(steps)))


def test_spill_keeps_its_tail_in_memory_and_appends_file_then_tail(tmp_path):
    path = str(tmp_path / "s.spill")
    s = Spill(path)
    s.write(b"abc")
    assert os.path.getsize(path) == 0 and s.tell() == 3  # in memory
    big = bytes(range(256)) * (MEMORY_BYTES // 256)
    s.write(big)  # past MEMORY_BYTES: flushed to the file
    s.write(np.arange(4, dtype=np.uint8).reshape(2, 2))  # any contiguous buffer
    assert os.path.getsize(path) == 3 + len(big) and s.tell() == 3 + len(big) + 4
    assert s.read_all() == b"abc" + big + bytes([0, 1, 2, 3])
    with open(tmp_path / "dst", "w+b") as dst:
        dst.write(b"head")
        assert s.append_to(dst) == 3 + len(big) + 4
        dst.write(b"!")
        dst.flush()
        assert open(tmp_path / "dst", "rb").read() == b"head" + b"abc" + big + bytes([0, 1, 2, 3]) + b"!"
    s.flush()
    assert os.path.getsize(path) == s.tell()  # what a checkpoint needs is in the file
    s.rewind()
    s.write(b"xy")
    assert s.tell() == 2 and s.read_all() == b"xy"  # the older bytes beyond are not content
    old = tmp_path / "old.spill"
    old.write_bytes(b"0123456789")
    s.write(b"zz")
    s.take_over(str(old), 6)  # a predecessor's spill, as far as its checkpoint counted
    assert s.tell() == 6 and s.read_all() == b"012345"
    s.write(b"!")
    assert s.read_all() == b"012345!"
    with pytest.raises(OSError):
        s.take_over(str(old), 11)  # the file holds less than the checkpoint says
    s.close()
    s.close()
