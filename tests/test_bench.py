"""envrec bench: the runner, its table, JSON and plot, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from envrec.bench import format_table, parse_frames, run_bench
from envrec.bench.variants import FrameEnv, InProcessTrace, SyncPipe, game_frame
from envrec.errors import ConfigError

from .support.processes import child_env
from .support.video import decode


def test_run_bench_interleaves_variants_and_reports_each(tmp_path):
    seen = []
    rows = run_bench(
        lambda: FrameEnv(24, 32, length=500),
        ("envrec-trace", "envrec-video", "inprocess-trace"),
        rounds=2,
        seconds=0.2,
        folder=str(tmp_path),
        progress=seen.append,
    )
    assert [r.variant for r in rows] == ["none", "envrec-trace", "envrec-video", "inprocess-trace"]
    assert seen[:4] == [f"round 1/2: {v}" for v in ("none", "envrec-trace", "envrec-video", "inprocess-trace")]
    none = rows[0]
    assert none.ratio == 1.0 and none.overhead_us == 0.0
    for r in rows:
        assert r.steps_per_s > 0 and r.longest_call_ms > 0
    trace, video = rows[1], rows[2]
    assert trace.envrec["TraceRecorder"]["steps_committed"] > 0 and trace.envrec["TraceRecorder"]["call_p50_us"] > 0
    assert video.video_bytes > 0 and video.envrec["VideoRecorder"]["frames_written"] > 0
    table = format_table(rows)
    assert "envrec-trace" in table and "inside envrec per call" in table and "CPU µs/step" in table
    # CPU per step, split by process: the env thread for every variant, envrec's workers and ffmpeg where they ran
    assert all(r.env_cpu_us > 0 for r in rows)
    assert none.worker_cpu_us is None and none.ffmpeg_cpu_us is None
    assert trace.worker_cpu_us > 0 and trace.ffmpeg_cpu_us is None
    assert video.worker_cpu_us > 0 and video.ffmpeg_cpu_us > 0
    assert rows[3].worker_cpu_us is None  # the in-process writer has no worker


def test_rounds_end_when_the_workers_have_caught_up(tmp_path):
    """A variant's backlog is worked off inside its own round, never in the next variant's."""
    from envrec.bench.runner import DRAIN_TIMEOUT_S, envrec_parts, make_variant, wait_for_workers

    env = make_variant("envrec-video", lambda: FrameEnv(120, 160, length=400), str(tmp_path))
    env.reset()
    for _ in range(300):
        env.step(0)
    (recorder,) = envrec_parts(env)
    waited = wait_for_workers(env)
    assert recorder.backlog_bytes == 0 and waited < DRAIN_TIMEOUT_S  # caught up, not given up on
    assert recorder.stats()["frames_written"] == 301
    env.close()


def test_sync_pipe_uses_envrec_encoder_settings(tmp_path):
    """The synchronous pipe runs envrec's own encoder command: a comparison measures the hand-off alone."""
    env = SyncPipe(FrameEnv(24, 32, length=3), str(tmp_path))
    env.reset()
    assert "-preset" in env.proc.args and "ultrafast" in env.proc.args
    env.close()


def test_alternatives_write_what_they_claim(tmp_path):
    env = SyncPipe(FrameEnv(24, 32, length=5), str(tmp_path / "sync"))
    env.reset()
    for _ in range(5):
        env.step(0)
    env.close()
    assert len(decode(tmp_path / "sync" / "sync-0.mp4", 32, 24)) == 6
    env = InProcessTrace(FrameEnv(24, 32, length=5), str(tmp_path / "inproc"))
    env.reset()
    for _ in range(5):
        env.step(0)
    env.close()
    batch = json.load(open(tmp_path / "inproc" / "inproc.ep000000000.json"))
    assert batch["episodes"][0]["observations"]["shape"] == [6, 24, 32, 3]


def test_game_frames_depend_on_seed_and_step_alone_and_compress():
    """What the soak and the compression bench check their read-back against."""
    import zlib

    env = FrameEnv(length=None, frames="game")
    first, _ = env.reset(seed=4)
    assert np.array_equal(first, game_frame(4, 0)) and np.array_equal(env.render(), first)
    for _ in range(1, 1500):  # past the default length: None never ends
        obs, _, terminated, _, _ = env.step(0)
        assert not terminated
    assert np.array_equal(obs, game_frame(4, 1499)) and not np.array_equal(obs, game_frame(5, 1499))
    assert len(zlib.compress(obs.tobytes())) * 50 < obs.nbytes  # a game's frames, not noise
    noise, _ = FrameEnv(frames="noise").reset(seed=4)
    assert len(zlib.compress(noise.tobytes())) > 0.9 * noise.nbytes
    with pytest.raises(ConfigError, match="frames"):
        FrameEnv(frames="atari")


def test_parse_frames():
    assert parse_frames("210x160") == (210, 160)
    for bad in ("210", "ax3", "0x5"):
        with pytest.raises(ValueError, match="--frames"):
            parse_frames(bad)


def test_envrec_bench_command_json_and_plot(tmp_path):
    plot = tmp_path / "bench.png"
    out = subprocess.run(
        [sys.executable, "-m", "envrec", "bench", "--frames", "24x32", "--variants", "envrec-trace,envrec-trace-untimed",
         "--rounds", "1", "--seconds", "0.2", "--json", "--plot", str(plot)],
        capture_output=True, text=True, timeout=120, env=child_env(),
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["variant"] for r in rows] == ["none", "envrec-trace", "envrec-trace-untimed"]
    assert "call_p50_us" in rows[1]["envrec"]["TraceRecorder"] and "call_p50_us" not in rows[2]["envrec"]["TraceRecorder"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_envrec_bench_refuses_bad_arguments(tmp_path):
    env = child_env()
    for args, message in ((["--variants", "nope"], "unknown variant"), (["--env", "NoSuch-v0"], "NoSuch-v0"), (["--frames", "9"], "HEIGHTxWIDTH")):
        out = subprocess.run([sys.executable, "-m", "envrec", "bench", *args], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 2 and message in out.stderr
