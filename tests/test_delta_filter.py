"""The delta filter, compressed batch JSON and the "auto" default: bit-exact, chosen per array, kept by a successor.

The property test drives the serializer's own chunk packer and the reader's
own decompression (``envrec.formats.compression``) over dtypes, shapes and
chunk sizes; the others record through the real worker.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envrec
from envrec.bench.variants import FrameEnv, game_frame
from envrec.contract.faults import FaultSpec
from envrec.formats.compression import Compression, decompress_frames, decompress_into
from envrec.workers.field_sinks import ChunkPacker
from envrec.workers.spill import Spill

from .support.batch_json import load_batch, stored_bytes
from .support.fuzz_mutants import set_field
from .support.waiting import wait_for
from .test_trace_roundtrip import record

pytestmark = pytest.mark.timeout(120)

DTYPES = ["|u1", "<i2", "<u4", "<i8", "|b1", "<f4"]


def _rows(rng: np.random.Generator, n: int, row_bytes: int, changes: int) -> np.ndarray:
    """``n`` rows of which each differs from the one before in ``changes`` bytes (all of them: noise)."""
    rows = rng.integers(0, 256, (n, row_bytes), dtype=np.uint8)
    if changes >= row_bytes:
        return rows
    for i in range(1, n):
        rows[i] = rows[i - 1]
        at = rng.integers(0, row_bytes, min(changes, row_bytes))
        rows[i, at] = rng.integers(0, 256, len(at), dtype=np.uint8)
    return rows


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(1, 9), min_size=0, max_size=3),
    n=st.integers(1, 70),
    chunk_bytes=st.integers(1, 4000),
    changes=st.sampled_from([0, 1, 3, 10**6]),
    codec=st.sampled_from(["zstd", "lz4"]),
    forced=st.sampled_from([None, "xor", ""]),
    seed=st.integers(0, 2**16),
)
def test_the_packer_and_the_reader_round_trip_bit_exact(dtype, shape, n, chunk_bytes, changes, codec, forced, seed):
    """Chunks of 1..1,024 rows, filtered or not (chosen, or forced as a checkpoint hands it over), rows added one by
    one and many at once, a partial chunk last: what the reader decompresses is the bytes that went in."""
    c = Compression(codec, chunk_bytes=chunk_bytes)
    row_bytes = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
    rows = _rows(np.random.default_rng(seed), n, row_bytes, changes)
    with tempfile.TemporaryDirectory() as folder:
        spill = Spill(os.path.join(folder, "index"))
        packer = ChunkPacker(c, row_bytes, spill, delta=c.filters(dtype))
        if forced is not None and c.filters(dtype):
            packer.choose(forced)
        stored, done = [], 0
        while done < n:
            if done % 2:
                full = packer.add(rows[done])
                done += 1
            else:
                done += packer.add_rows(rows[done : done + 5])
                full = packer.rows == packer.rows_per_chunk
            if full:
                stored.append(packer.take())
        if packer.rows:
            stored.append(packer.take())
        chunks = packer.chunk_list()
        spill.close()
    assert sum(r for r, _ in chunks) == n and [b for _, b in chunks] == [len(s) for s in stored]
    if not c.filters(dtype):
        assert packer.filter == ""  # floats are never filtered
    if forced is not None and c.filters(dtype):
        assert packer.filter == forced
    out = bytearray(n * row_bytes)
    decompress_into(memoryview(out), memoryview(b"".join(stored)), codec, chunks, row_bytes, packer.filter or None)
    assert bytes(out) == rows.tobytes()


def test_the_first_chunk_of_two_rows_or_more_decides_and_a_one_row_chunk_does_not(tmp_path):
    row_bytes = 210 * 160 * 3
    c = Compression("zstd", chunk_bytes=row_bytes * 16)
    frames = np.stack([game_frame(3, t) for t in range(12)]).reshape(12, row_bytes)
    packer = ChunkPacker(c, row_bytes, Spill(str(tmp_path / "i")), delta=True)
    packer.add(frames[0])
    packer.take()
    assert packer.filter is None  # one row is the same filtered or not
    packer.add_rows(frames[1:12])
    packer.take()
    assert packer.filter == "xor"  # game frames: what does not move XORs to zeros
    noise = ChunkPacker(c, row_bytes, Spill(str(tmp_path / "j")), delta=True)
    noise.add_rows(_rows(np.random.default_rng(1), 8, row_bytes, 10**6))
    noise.take()
    assert noise.filter == ""  # independent noise: filtering does not make it smaller


def _descriptors(folder, key="observations"):
    reader = envrec.TraceReader(folder)
    return [ep[key] for b in reader.recordings[0].batches for ep in load_batch(os.path.join(folder, b["fn"]))["episodes"]]


def test_auto_compresses_image_frames_with_the_filter_and_leaves_the_rest_raw(tmp_path):
    reference, _ = record(FrameEnv(length=60, frames="game"), tmp_path / "auto", episodes=3)
    _, _ = record(FrameEnv(length=60, frames="game"), tmp_path / "plain", episodes=3, compression=Compression(delta=False))
    reader = envrec.TraceReader(tmp_path / "auto")
    for ref, ep in zip(reference, reader, strict=True):
        assert ep.observations.tobytes() == np.stack(ref["obs"]).tobytes()
        assert ep.actions.tolist() == [int(a) for a in ref["act"]]
    assert reader.manifests[0]["settings"]["compression"] == {
        "codec": "zstd", "level": 3, "chunk_bytes": 4 << 20, "delta": True, "arrays": "image-like"}
    entry = reader.recordings[0].batches[0]
    assert entry["fn"].endswith(".ep000000000.json.zst")
    batch = load_batch(tmp_path / "auto" / entry["fn"])["episodes"][0]
    assert batch["observations"]["codec"] == "zstd" and batch["observations"]["filter"] == "xor"
    for key in ("actions", "rewards", "terminations", "truncations"):
        assert "codec" not in batch[key]  # small vectors stay raw
    plain = _descriptors(tmp_path / "plain")
    assert all("filter" not in d for d in plain)
    assert envrec.TraceReader(tmp_path / "plain").manifests[0]["settings"]["compression"]["delta"] is False
    assert sum(d["size"] for d in _descriptors(tmp_path / "auto")) < sum(d["size"] for d in plain)


def test_a_successor_goes_on_with_the_filter_choice_of_the_recording(tmp_path):
    """The first episode is noise (no filter chosen), the rest game frames the filter would shrink: a successor
    that chose again would filter them, and its chunks of the open episode would not match the descriptor."""
    noise = np.random.default_rng(0).integers(0, 256, (30, 210, 160, 3), dtype=np.uint8)
    rec = envrec.TraceRecorder(
        tmp_path, FrameEnv().observation_space, FrameEnv().action_space, batch_bytes=1,
        compression=Compression(chunk_bytes=210 * 160 * 3 * 8), hang_timeout_s=2.0,
        faults=FaultSpec(at="record", after=70, how="kill"),
    )
    reference = []
    for ep in range(5):
        frames = noise if ep == 0 else np.stack([game_frame(ep, t) for t in range(30)])
        rec.add_reset(frames[0], seed=ep)
        for t in range(1, 30):
            rec.add_step(0, frames[t], 1.0, t == 29, False)
        reference.append(frames)
        if ep == 2:
            assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == 1, 20)
    rec.close()
    assert rec.stats()["restarts"] == 1 and rec.stats()["records_lost"] == 0
    for ref, ep in zip(reference, envrec.TraceReader(tmp_path), strict=True):
        assert ep.observations.tobytes() == ref.tobytes()
    assert all("filter" not in d for d in _descriptors(tmp_path))


def test_a_killed_serializer_resumes_a_compressed_batch_json_on_a_frame_boundary(tmp_path):
    """Short episodes, one batch: the successor cuts the .json.zst back to its checkpoint and writes on."""
    env = FrameEnv(length=5, frames="game")
    rec = envrec.TraceRecorder(tmp_path, env.observation_space, env.action_space, hang_timeout_s=2.0,
                               faults=FaultSpec(at="record", after=40, how="kill"))
    for ep in range(16):
        rec.add_reset(game_frame(ep, 0), seed=ep)
        for t in range(1, 6):
            rec.add_step(1, game_frame(ep, t), 0.5, t == 5, False, {"t": t})
        time.sleep(0.1)  # the serializer runs dry and checkpoints (IDLE_CHECKPOINT_S): the batch is open, its JSON framed
        if ep == 8:
            assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == 1, 20)
    rec.close()
    assert rec.stats()["restarts"] == 1 and rec.stats()["records_lost"] == 0
    reader = envrec.TraceReader(tmp_path)
    assert len(reader.recordings[0].batches) == 1 and reader.recordings[0].batches[0]["fn"].endswith(".json.zst")
    assert [e.seed for e in reader] == list(range(16))
    for ep in reader:
        assert ep.observations.tobytes() == np.stack([game_frame(ep.seed, t) for t in range(6)]).tobytes()
        assert ep.infos[1:] == [{"t": t} for t in range(1, 6)]


@pytest.fixture
def recorded(tmp_path):
    record(FrameEnv(length=20, frames="game"), tmp_path, episodes=2)
    entry = envrec.TraceReader(tmp_path).recordings[0].batches[0]
    return tmp_path, os.path.join(tmp_path, entry["fn"])


def _fix_manifest(folder) -> None:
    from .support.fuzz_mutants import fix_checksums

    fix_checksums(str(folder))


@pytest.mark.parametrize("where, value, message", [
    (("episodes", 0, "observations", "filter"), "delta", r"observations\.filter: 'delta' is not a filter"),
    (("episodes", 0, "actions", "filter"), "xor", r"actions\.filter: a filter on an array that names no codec"),
])
def test_an_unknown_filter_is_a_trace_error(recorded, where, value, message):
    folder, batch = recorded
    set_field(batch, where, value, delete=False)
    _fix_manifest(folder)
    with pytest.raises(envrec.TraceError, match=message):
        envrec.TraceReader(folder)[0]


def test_a_compressed_batch_json_cut_short_or_too_large_is_a_trace_error(recorded, monkeypatch):
    folder, batch = recorded
    data = open(batch, "rb").read()
    with open(batch, "wb") as f:
        f.write(data[: len(data) // 2])
    _fix_manifest(folder)
    with pytest.raises(envrec.TraceError, match=r"\.json\.zst: not JSON"):  # whole frames, then the cut
        envrec.TraceReader(folder)[0]
    with open(batch, "wb") as f:
        f.write(b"\0\0\0\0" + data[4:])  # the first frame's magic number spoiled
    _fix_manifest(folder)
    with pytest.raises(envrec.TraceError, match="is damaged.*not zstd frames"):
        envrec.TraceReader(folder)[0]
    with open(batch, "wb") as f:
        f.write(stored_bytes(batch, b'{"episodes": [' + b" " * (3 << 20) + b"]}"))  # 3 MiB of spaces in a few bytes
    _fix_manifest(folder)
    monkeypatch.setattr("envrec.read.batch_files.MAX_BATCH_JSON_BYTES", 1 << 20)
    with pytest.raises(envrec.TraceError, match="decompresses to more than 1048576 bytes"):
        envrec.TraceReader(folder)[0]
    with pytest.raises(ValueError, match="more than 100 bytes"):
        decompress_frames(open(batch, "rb").read(), 100)


def test_the_viewer_and_inspect_read_a_compressed_batch_json(recorded):
    from envrec.cli import main as cli_main
    from envrec.viewer.catalog import Catalog

    folder, batch = recorded
    assert batch.endswith(".json.zst")
    index = Catalog(str(folder)).index()
    assert [e["length"] for e in index["episodes"]] == [20, 20] and not index["damaged"]
    ep = index["episodes"][1]
    plot = Catalog(str(folder)).episode(ep["recording"], ep["episode_id"])
    assert plot["length"] == 20 and plot["return"] == 20.0 and plot["ended_by"] == "terminated"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["inspect", str(folder)]) == 0
    assert "zstd level 3, image-like arrays only" in out.getvalue()
    assert "arrays: observations zstd+xor, actions raw, rewards raw" in out.getvalue()
