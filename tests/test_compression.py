"""Compressed traces: written by the real serializer, read back bit for bit, damaged ones refused."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.bench.variants import FrameEnv
from envrec.contract.faults import FaultSpec
from envrec.errors import ConfigError
from envrec.formats.compression import Compression, parse_compression
from envrec.read.summary import summarize

from .support.batch_json import load_batch
from .support.envs import SPACES, SpaceEnv
from .support.waiting import wait_for
from .test_trace_roundtrip import assert_bit_exact, record

pytestmark = pytest.mark.timeout(120)

SMALL_CHUNKS = {"zstd": Compression("zstd", chunk_bytes=64), "lz4": Compression("lz4", chunk_bytes=64)}


@pytest.mark.variants  # compression is one path whatever the space (tests/test_trace_roundtrip.py has each space)
@pytest.mark.parametrize("name", sorted(SPACES))
def test_every_space_type_reads_back_bit_exact_compressed(tmp_path, name):
    """Chunks of a few rows each, so episodes span several chunks and end in a partial one."""
    space = SPACES[name]
    reference, _rec = record(SpaceEnv(space, action_space=space), tmp_path, episodes=3, compression=SMALL_CHUNKS["zstd"])
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == 3
    for ref, ep in zip(reference, reader, strict=True):
        assert_bit_exact(space, ep.observations, ref["obs"])
        assert_bit_exact(space, ep.actions, ref["act"])
        assert ep.rewards.tobytes() == np.array(ref["rew"], dtype=np.float64).tobytes()
        assert ep.terminations.tolist() == ref["term"] and ep.truncations.tolist() == ref["trunc"]
    manifest = reader.manifests[0]
    assert manifest["settings"]["compression"] == {"codec": "zstd", "level": 3, "chunk_bytes": 64, "delta": True, "arrays": "all"}


@pytest.mark.parametrize("codec", ["zstd", "lz4", *(pytest.param(c, marks=pytest.mark.slow) for c in ("zstd:19", "lz4:9"))])
def test_codecs_and_levels_read_back_bit_exact(tmp_path, codec):
    space = SPACES["box_u8_image"]
    reference, _ = record(SpaceEnv(space, action_space=S.Discrete(4)), tmp_path, episodes=4, compression=codec)
    reader = envrec.TraceReader(tmp_path)
    for ref, ep in zip(reference, reader, strict=True):
        assert_bit_exact(space, ep.observations, ref["obs"])
    batch = load_batch(tmp_path / reader.recordings[0].batches[0]["fn"])
    d = batch["episodes"][0]["observations"]
    assert d["codec"] == codec.split(":")[0] and d["raw_size"] == 7 * 5 * 3 * d["shape"][0]
    assert sum(rows for rows, _ in d["chunks"]) == d["shape"][0] and sum(n for _, n in d["chunks"]) == d["size"]


def test_atari_like_frames_are_at_least_50x_smaller_and_inspect_shows_the_ratio(tmp_path):
    env = FrameEnv(length=100, frames="game")
    reference, _rec = record(env, tmp_path / "z", episodes=4, compression="zstd")
    _, _raw = record(FrameEnv(length=100, frames="game"), tmp_path / "raw", episodes=4, compression=None)
    s = summarize(str(tmp_path / "z"))
    assert s.ok and s.compression_ratio >= 50, s.compression_ratio
    raw_bytes = summarize(str(tmp_path / "raw")).bytes
    assert raw_bytes / s.bytes >= 50
    reader = envrec.TraceReader(tmp_path / "z")
    for ref, ep in zip(reference, reader, strict=True):
        assert ep.observations.tobytes() == np.stack(ref["obs"]).tobytes()
    out = subprocess.run([sys.executable, "-m", "envrec.cli", "inspect", str(tmp_path / "z")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "zstd" in out.stdout and "smaller than raw" in out.stdout


def test_random_access_and_the_decompressed_cache(tmp_path):
    """A part per step (``batch_bytes=1``): random access stitches; whole episodes: decompressed once, then cached."""
    record(SpaceEnv(SPACES["box_f64_2d"], nan=False), tmp_path / "parts", episodes=6, batch_bytes=1, compression="lz4")
    reader = envrec.TraceReader(tmp_path / "parts")
    every = [ep.observations.copy() for ep in reader]
    for i in (5, 0, 3, 5, -1):
        ep = reader[i]
        assert len(ep.parts) == ep.length > 1
        assert ep.observations.tobytes() == every[i].tobytes()
        assert not ep.observations.flags.writeable  # read-only, as memory-mapped arrays are
    record(SpaceEnv(SPACES["box_f64_2d"], nan=False), tmp_path / "whole", episodes=6, compression="lz4")
    reader = envrec.TraceReader(tmp_path / "whole")
    assert [len(ep.parts) for ep in reader] == [1] * 6
    assert not reader[4].observations.flags.writeable
    assert reader[2].observations is reader[2].observations  # decompressed once, then from the cache


def test_a_damaged_compressed_array_is_refused_naming_its_file(tmp_path):
    record(SpaceEnv(SPACES["box_u8_image"]), tmp_path, episodes=2, compression="zstd")
    reader = envrec.TraceReader(tmp_path)
    entry = reader.recordings[0].batches[0]
    d = load_batch(tmp_path / entry["fn"])["episodes"][0]["observations"]
    with open(tmp_path / entry["bin"], "r+b") as f:  # scramble the first chunk's stored bytes
        f.seek(d["npyoff"])
        f.write(bytes(255 - b for b in f.read(d["chunks"][0][1])))
    with pytest.raises(envrec.TraceError, match="CRC-32"):
        envrec.TraceReader(tmp_path)[0]
    with pytest.raises(envrec.TraceError, match=f"{entry['bin']}.*does not decompress"):
        envrec.TraceReader(tmp_path, verify=False)[0]


@pytest.mark.parametrize(
    "value, message",
    [
        ("gzip", "not known"),
        ("zstd:99", r"integer in \[-7, 22\]"),
        ("zstd:x", "must be an integer"),
        (3, "must be None, 'auto', a codec name"),
    ],
)
def test_bad_compression_settings_are_refused_before_anything_starts(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        envrec.TraceRecorder(tmp_path, SPACES["box_i16"], S.Discrete(2), compression=value)
    assert os.listdir(tmp_path) == []
    with pytest.raises(ConfigError, match="chunk_bytes"):
        Compression("zstd", chunk_bytes=0)
    assert parse_compression(None) is None


@pytest.mark.parametrize("point, how", [("record", "kill"), ("commit:bin", "kill"), ("record", "raise")])
def test_a_killed_compressing_serializer_hands_over_without_loss(tmp_path, point, how):
    """Checkpoints cut chunks short; a successor goes on from the last one, bit for bit."""
    env = FrameEnv(length=40, frames="game")
    cap_reference = []
    rec = envrec.TraceRecorder(
        tmp_path, env.observation_space, env.action_space, batch_bytes=1,
        compression=Compression("zstd", chunk_bytes=210 * 160 * 3 * 8), hang_timeout_s=2.0,
        faults=FaultSpec(at=point, after=90 if point == "record" else 2, how=how),
    )
    for ep in range(6):
        obs, _ = env.reset(seed=ep)
        rec.add_reset(obs, seed=ep)
        rows = [obs.copy()]
        done = False
        while not done:
            obs, r, term, trunc, _ = env.step(0)
            rec.add_step(0, obs, r, term, trunc)
            rows.append(obs.copy())
            done = term
        cap_reference.append(np.stack(rows))
        if ep == 2:
            assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == 1, 20)
    rec.close()
    s = rec.stats()
    assert s["restarts"] == 1 and s["broken"] is None and s["records_lost"] == 0
    reader = envrec.TraceReader(tmp_path)
    assert [e.seed for e in reader] == list(range(6))
    for ref, ep in zip(cap_reference, reader, strict=True):
        assert ep.observations.tobytes() == ref.tobytes()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp") or "checkpoint" in n]
