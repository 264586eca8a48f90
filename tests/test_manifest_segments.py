"""Manifest segments and disk budgets: commits that do not grow, evictions that lose nothing named."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.contract.faults import FaultSpec
from envrec.errors import ConfigError
from envrec.formats.trace_format import SEGMENT_BATCHES

from .support.episodes import feed
from .support.scripts import load_script
from .support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)


def gym_recording_read(folder) -> list[float]:
    """gym-recording's playback: glob every manifest, concatenate their batches (first obs value per episode)."""
    firsts = []
    for manifest_fn in glob.glob(os.path.join(folder, "*.manifest.json")):
        for batch in json.load(open(manifest_fn))["batches"]:
            for ep in json.load(open(os.path.join(folder, batch["fn"])))["episodes"]:
                o = ep["observations"]
                arr = np.fromfile(os.path.join(folder, o["npyfile"]), dtype=o["dtype"], count=4, offset=o["npyoff"])
                firsts.append(float(arr[0]))
    return sorted(firsts)


def test_closed_segments_keep_the_head_small_and_every_reader_sees_every_batch_once(tmp_path):
    n = 2 * SEGMENT_BATCHES + 40
    d = load_script("bench/bench_commit.py").Driver(str(tmp_path))
    for _ in range(n):
        d.episode_of(1)
    d.close()
    names = sorted(os.listdir(tmp_path))
    assert [x for x in names if ".m0" in x] == ["bench.m000000.manifest.json", "bench.m000001.manifest.json"]
    head = json.load(open(tmp_path / "bench.manifest.json"))
    assert head["segments"] == {"first": 0, "next": 2} and len(head["batches"]) == n - 2 * SEGMENT_BATCHES
    assert head["counters"]["batches"] == n and head["counters"]["episodes"] == n
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == n and [float(e.observations[0, 0]) for e in reader] == list(range(n))
    assert gym_recording_read(tmp_path) == list(range(n))  # segments are manifests to it too
    for seg in ("bench.m000000.manifest.json", "bench.m000001.manifest.json"):
        assert len(json.load(open(tmp_path / seg))["batches"]) == SEGMENT_BATCHES


def test_max_bytes_evicts_the_oldest_batches_and_whole_segments(tmp_path):
    d = load_script("bench/bench_commit.py").Driver(str(tmp_path))
    d.episode_of(1)
    d.episode_of(1)
    one = d.s.manifest.named.bytes  # a committed 1-step batch
    d.close()
    keep = SEGMENT_BATCHES + 44  # more than a segment: whole segments are evicted, and part of one
    budget = keep * one + one // 2
    d2 = load_script("bench/bench_commit.py").Driver(str(tmp_path / "budget"), max_bytes=budget)
    n = 3 * SEGMENT_BATCHES + 50
    for _ in range(n):
        d2.episode_of(1)
    d2.close()
    summary = d2.s.summary()
    kept = envrec.TraceReader(tmp_path / "budget")
    k = len(kept)  # batch sizes differ by a few bytes (episode ids grow a digit): about `keep` fit
    assert keep - 5 <= k <= keep and [float(e.observations[0, 0]) for e in kept] == list(range(n - k, n))
    assert summary["batches_evicted"] == n - k and summary["batches"] == n
    kept_bytes = sum(b["json_bytes"] + b["bin_bytes"] for b in kept.recordings[0].batches)
    assert summary["bytes_evicted"] + kept_bytes == summary["bytes"] and kept_bytes <= budget
    head = kept.manifests[0]
    first, nxt = head["segments"]["first"], head["segments"]["next"]
    assert nxt == 3 and first == 2  # segments 0 and 1 evicted whole, segment 2 in part
    assert len(json.load(open(tmp_path / "budget" / "bench.m000002.manifest.json"))["batches"]) < SEGMENT_BATCHES
    assert head["evicted"]["batches"] == n - k and head["counters"]["bytes"] == kept_bytes
    files = os.listdir(tmp_path / "budget")
    assert len([f for f in files if f.endswith(".bin")]) == k
    assert [f for f in files if ".m0" in f] == ["bench.m000002.manifest.json"]
    assert gym_recording_read(tmp_path / "budget") == list(range(n - k, n))


def test_a_budget_smaller_than_two_batches_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="cannot hold two batches"):
        envrec.TraceRecorder(tmp_path, S.Box(0, 1, (2,)), S.Discrete(2), batch_bytes=1_000_000, max_bytes=1_500_000)
    with pytest.raises(ConfigError, match="positive"):
        envrec.TraceRecorder(tmp_path, S.Box(0, 1, (2,)), S.Discrete(2), max_bytes=-5)
    assert os.listdir(tmp_path) == []


OBS = S.Box(0, 255, (4, 4, 3), np.uint8)


@pytest.mark.parametrize(
    "point, after, how",
    [("commit:segment", 1, "kill"), ("commit:segment", 1, "raise"), ("evict:manifest", 3, "kill"), ("evict:files", 5, "kill")],
)
def test_a_serializer_killed_closing_a_segment_or_evicting_is_finished_by_its_successor(tmp_path, point, after, how):
    """Real worker processes: whatever the commit point, the manifest names every batch kept exactly once,
    nothing it no longer names is left on disk, and the counters add up."""
    budget = None if point.startswith("commit") else 40 * 1024
    rec = envrec.TraceRecorder(
        tmp_path, OBS, S.Discrete(2), batch_bytes=1000, max_bytes=budget, hang_timeout_s=2.0,  # a batch per episode
        faults=FaultSpec(at=point, after=after, how=how),
    )
    total = SEGMENT_BATCHES + 30
    feed(rec, SEGMENT_BATCHES + 10, shape=(4, 4, 3), fill=lambda k: k % 256)
    assert wait_for(lambda: rec._stream.check() or rec.stats()["restarts"] == 1, 30)
    feed(rec, 20, start=SEGMENT_BATCHES + 10, shape=(4, 4, 3), fill=lambda k: k % 256)
    rec.close()
    s = rec.stats()
    assert s["restarts"] == 1 and s["broken"] is None and s["records_lost"] == 0
    reader = envrec.TraceReader(tmp_path)
    seeds = [e.seed for e in reader]
    assert seeds == sorted(set(seeds)) and seeds[-1] == total - 1  # in order, once each, up to the last
    for e in reader:
        assert e.length == 10 and e.observations[0, 0, 0, 0] == e.seed % 256
    named = {n for b in reader.recordings[0].batches for n in (b["fn"], b["bin"])}
    on_disk = {n for n in os.listdir(tmp_path) if ".ep" in n}
    assert on_disk == named  # an interrupted eviction's leftovers were deleted by the successor
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp") or "checkpoint" in n]
    assert s["batches"] == total and s["batches_evicted"] + len(seeds) == total
    assert len(gym_recording_read(tmp_path)) == len(seeds)  # no segment names a batch twice or a deleted one
    if budget is None:
        assert seeds == list(range(total)) and s["batches_evicted"] == 0
    else:
        assert sum(os.path.getsize(tmp_path / n) for n in on_disk) <= budget and s["bytes_evicted"] > 0
