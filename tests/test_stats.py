"""Built-in stats: percentiles, the keys users read, and what lands in the manifest and .meta.json."""

from __future__ import annotations

import json
import random

import gymnasium as gym
import pytest

import envrec
from envrec.supervision.stats import CallTimes

from .support.envs import ColourEnv
from .support.episodes import run_episodes
from .support.video import meta
from .support.waiting import wait_for


def test_call_time_percentiles_are_close_to_exact():
    rng = random.Random(1)
    samples = [int(rng.lognormvariate(9, 0.7)) for _ in range(20000)]
    times = CallTimes()
    for ns in samples:
        times.add(ns)
    samples.sort()
    for q in (50, 90, 99):
        exact = samples[int(len(samples) * q / 100)] / 1e3
        assert times.percentile(q) == pytest.approx(exact, rel=0.15)
    s = times.summary()
    assert s["calls"] == 20000 and s["call_max_us"] == samples[-1] / 1e3
    assert s["call_total_s"] == pytest.approx(sum(samples) / 1e9)
    assert CallTimes().percentile(50) == 0.0


def test_trace_stats_live_at_close_and_in_the_manifest(tmp_path):
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path)
    steps = run_episodes(env, 3)
    assert wait_for(lambda: env.stats()["steps_written"] == steps)  # the worker has started and run
    live = env.stats()
    assert live["calls"] == steps + 3
    assert 0 < live["call_p50_us"] <= live["call_p99_us"] <= live["call_max_us"] * 1.2
    assert live["worker_cpu_s"] > 0 and live["worker_rss_bytes"] > 0
    env.close()
    final = env.stats()
    assert final["steps_committed"] == steps and final["worker_cpu_s"] > 0 and final["worker_max_rss_bytes"] > 0
    manifest = json.load(open(env.recorder.manifest_path))
    assert manifest["stats"]["env_process"]["calls"] == steps + 3
    assert manifest["stats"]["serializer"]["steps"] == steps
    assert manifest["stats"]["serializer"]["process"]["cpu_s"] > 0


def test_video_stats_and_clip_metadata(tmp_path):
    env = envrec.RecordVideo(ColourEnv(episode_len=8), tmp_path, episode_trigger=lambda e: True)
    run_episodes(env, 2)
    assert wait_for(lambda: env.stats()["frames_written"] == 18)
    live = env.stats()
    assert live["calls"] == 18 and live["encoder_fps"] > 0
    env.close()
    final = env.stats()
    assert final["frames_written"] == 18 and final["clips_finished"] == 2
    assert final["ffmpeg_cpu_s"] > 0 and final["worker_cpu_s"] > 0
    m = meta(tmp_path, "rl-video-episode-1")
    assert m["env_process"]["calls"] == 9 and m["env_process"]["call_mean_us"] > 0
    assert m["ffmpeg_cpu_s"] >= 0 and m["encode_wall_s"] > 0


def test_timing_can_be_switched_off(tmp_path):
    env = gym.make("CartPole-v1")
    with envrec.TraceRecorder(tmp_path, env.observation_space, env.action_space, timing=False) as rec:
        rec.add_reset(env.reset(seed=0)[0])
        assert "call_p50_us" not in rec.stats()


def test_call_times_count_is_the_number_of_adds():
    times = CallTimes()
    for ns in (0, 1, 5, 1_000, 10**9, 3):
        times.add(ns)
    assert times.count == 6 and times.summary()["calls"] == 6
    assert times.max_ns == 10**9 and times.total_ns == 1_000_001_009
