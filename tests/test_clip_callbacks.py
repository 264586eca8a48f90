"""Callbacks in the env process when a clip or a batch is complete on disk; keep-if triggers; fps for frame skip."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

import envrec
from envrec.errors import ConfigError
from envrec.log.clip_logger import ClipLogger

from .support.envs import ColourEnv
from .support.episodes import run_episodes
from .support.video import FFMPEG, decode
from .support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


class AlternatingEnv(ColourEnv):
    """Even episodes fail early (terminated after 5 steps), odd ones run out of time (truncated after 12)."""

    def step(self, action):
        self.t += 1
        short = self.episode % 2 == 0
        return 0, 1.0, short and self.t >= 5, not short and self.t >= 12, {"t": self.t}


def test_on_clip_closed_reports_each_finished_clip_once_from_the_env_thread(tmp_path):
    calls = []
    main = threading.get_ident()

    def on_clip_closed(path, meta):
        assert threading.get_ident() == main
        assert os.path.exists(path) and os.path.exists(path[: -len(".mp4")] + ".meta.json")  # complete on disk
        calls.append((os.path.basename(path), meta["frames_written"], decode(path, 64, 48).shape[0]))

    env = envrec.RecordVideo(AlternatingEnv(), tmp_path, episode_trigger=lambda e: True, on_clip_closed=on_clip_closed)
    run_episodes(env, 4)
    before_close = len(calls)
    env.close()
    assert [c[0] for c in calls] == [f"rl-video-episode-{e}.mp4" for e in range(4)]
    assert [c[1] for c in calls] == [c[2] for c in calls] == [6, 13, 6, 13]  # the reset frame and one a step, decoded
    assert before_close <= 3  # the last clip ends in close(): it can only be reported there


class SlowLogger(ClipLogger):
    """A clip logger of envrec.log's kind, logging in a thread of its own into a list (a writer): slowly, or only
    once ``release`` is set."""

    def __init__(self, sink: list, delay_s: float, release: threading.Event | None = None) -> None:
        super().__init__(step=None, scalars=(), background=True)
        self.sink, self.delay_s, self.release = sink, delay_s, release

    def _log(self, video_path, meta, at) -> None:
        time.sleep(self.delay_s)
        if self.release is not None:
            self.release.wait(60)
        self.sink.append(meta["name"])


def test_close_waits_for_the_clips_a_logger_still_works_on(tmp_path):
    """The logger's documented order stops mattering: env.close() returns once the logger has every clip, so
    closing its writer next loses none (before, a clip made in the logger's thread landed after the writer was
    closed)."""
    sink: list = []
    env = envrec.RecordVideo(AlternatingEnv(), tmp_path, episode_trigger=lambda e: True,
                             on_clip_closed=SlowLogger(sink, 0.3))
    run_episodes(env, 4)
    env.close()
    assert sink == [f"rl-video-episode-{e}" for e in range(4)]  # all logged when close() returned
    assert env.stats()["callbacks_pending"] == 0


def test_close_stops_waiting_for_a_stuck_logger_and_counts_what_is_left(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("envrec.record.video_recorder.CALLBACK_DRAIN_S", 0.2)
    sink: list = []
    release = threading.Event()
    logger = SlowLogger(sink, 0.0, release)  # stuck until released
    env = envrec.RecordVideo(AlternatingEnv(), tmp_path, episode_trigger=lambda e: True, on_clip_closed=logger)
    run_episodes(env, 2)
    env.close()  # returns after its 0.2 s drain, the logger still stuck
    assert sink == []
    assert env.stats()["callbacks_pending"] >= 1 and "callbacks_pending" in caplog.text
    release.set()
    assert logger.close(30) and len(sink) == 2  # the logger still logs them all in its own time


def test_keep_if_keeps_only_failures_and_counts_the_rest(tmp_path):
    outcomes, closed = [], []

    def keep_if(outcome):
        outcomes.append(outcome)
        return outcome.terminated

    env = envrec.RecordVideo(AlternatingEnv(), tmp_path, episode_trigger=lambda e: True, keep_if=keep_if,
                             on_clip_closed=lambda p, m: closed.append(m["episode_id"]))
    run_episodes(env, 6)
    env.close()
    assert [(o.episode_id, o.length, o.episode_return, o.terminated, o.truncated) for o in outcomes] == [
        (e, 5 if e % 2 == 0 else 12, 5.0 if e % 2 == 0 else 12.0, e % 2 == 0, e % 2 == 1) for e in range(6)]
    assert outcomes[0].info == {"t": 5}
    assert sorted(os.listdir(tmp_path)) == sorted(
        f"rl-video-episode-{e}{ext}" for e in (0, 2, 4) for ext in (".mp4", ".meta.json"))
    assert closed == [0, 2, 4]
    stats = env.stats()
    assert stats["clips_discarded"] == 3 and stats["clips_finished"] == 6 and stats["clips_broken"] == 0


def test_keep_if_on_a_clip_cut_by_video_length_sees_the_episode_so_far(tmp_path):
    seen = []
    env = envrec.RecordVideo(AlternatingEnv(), tmp_path, step_trigger=lambda s: s == 8, video_length=4,
                             keep_if=lambda o: seen.append(o) or False)
    run_episodes(env, 2)  # steps 0-4: episode 0; 5-16: episode 1, whose steps 4 to 8 the clip shows
    env.close()
    assert [(o.episode_id, o.length, o.terminated, o.truncated) for o in seen] == [(1, 8, False, False)]
    assert os.listdir(tmp_path) == [] and env.stats()["clips_discarded"] == 1


@pytest.mark.parametrize("bad", ["keep_if", "on_clip_closed"])
def test_callbacks_must_be_callable(tmp_path, bad):
    with pytest.raises(ConfigError, match=f"{bad} must be callable"):
        envrec.RecordVideo(ColourEnv(), tmp_path, **{bad: "yes"})


def test_on_batch_committed_reports_every_batch_once_in_order(tmp_path):
    import gymnasium as gym

    calls = []

    def on_batch(path, entry):
        assert os.path.exists(path) and os.path.exists(os.path.join(tmp_path, entry["bin"]))
        calls.append(entry)

    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path, batch_bytes=1_000, on_batch_committed=on_batch)
    run_episodes(env, 4)
    assert wait_for(lambda: env.stats()["batches"] >= 1, 10)
    assert not calls  # nothing happens between steps: the report waits for the next call
    run_episodes(env, 4, seed=10)
    during = len(calls)
    env.close()
    batches = envrec.TraceReader(tmp_path).recordings[0].batches
    assert len(batches) >= 4 and calls == batches  # each once, oldest first, as the manifest names them
    assert during >= 1  # reported while stepping, not only at close
    with pytest.raises(ConfigError, match="on_batch_committed must be callable"):
        envrec.TraceRecorder(tmp_path / "x", gym.spaces.Discrete(2), gym.spaces.Discrete(2), on_batch_committed=3)


def test_on_batch_committed_skips_nothing_across_manifest_segments(tmp_path, monkeypatch):
    calls = []
    env = envrec.RecordTrace(ColourEnv(episode_len=1), tmp_path, batch_bytes=50, on_batch_committed=lambda p, e: calls.append(e))
    run_episodes(env, 700)  # a batch per one-step episode: the serializer falls hundreds of commits behind,
    env.close()  # so the last look spans closed manifest segments
    batches = envrec.TraceReader(tmp_path).recordings[0].batches
    assert len(batches) > 256 and [e["fn"] for e in calls] == [e["fn"] for e in batches]


class FrameSkipEnv(ColourEnv):
    """A step spans 4 emulator frames at 60 fps, as ALE's frameskip=4; one frame is rendered per step."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}  # noqa: RUF012  (Gymnasium declares it class-level)


def _probe_fps(path) -> float:
    out = subprocess.run([FFMPEG, "-hide_banner", "-i", str(path)], capture_output=True, text=True, timeout=30).stderr
    token = next(t for t in out.replace(",", " , ").split(" , ") if t.strip().endswith(" fps"))
    return float(token.strip().split()[0])


@pytest.mark.parametrize("fps, expected", [(None, 60.0), (15, 15.0)])
def test_fps_for_an_env_whose_step_spans_several_frames(tmp_path, fps, expected):
    env = envrec.RecordVideo(FrameSkipEnv(episode_len=30), tmp_path, episode_trigger=lambda e: True, fps=fps)
    run_episodes(env, 1)
    env.close()
    meta = json.loads((tmp_path / "rl-video-episode-0.meta.json").read_text())
    assert meta["fps"] == expected and meta["frames_written"] == 31
    assert _probe_fps(tmp_path / "rl-video-episode-0.mp4") == pytest.approx(expected)
    frames = decode(tmp_path / "rl-video-episode-0.mp4", 64, 48)
    assert frames.shape[0] == 31 and abs(int(frames[0, 10, 10, 0]) - 255) < 8  # every frame, red
