"""Video: decoded frame counts, sizes and colours, Gymnasium-identical names, ansi casts, bad frames."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest

import envrec
from envrec.formats.ffmpeg import VideoSettings, encode_command, encoded_size, find_ffmpeg

from .support.envs import ColourEnv
from .support.episodes import run_episodes
from .support.video import decode, meta, probe_size


def test_every_frame_captured_is_decoded_with_size_and_metadata(tmp_path):
    env = envrec.RecordVideo(ColourEnv(episode_len=10), tmp_path, episode_trigger=lambda e: True)
    run_episodes(env, 2)
    env.close()
    for ep in (0, 1):
        name = f"rl-video-episode-{ep}"
        m = meta(tmp_path, name)
        assert m["frames_written"] == 11 and m["frames_dropped"] == 0  # the reset frame and one per step
        assert not m["broken"] and not m["empty"] and m["content_type"] == "video/mp4"
        assert m["fps"] == 25 and m["episode_id"] == ep and m["exit_status"] == "exit code 0"
        assert m["frame_size"] == {"width": 64, "height": 48, "channels": 3}
        frames = decode(tmp_path / f"{name}.mp4", 64, 48)
        assert frames.shape == (11, 48, 64, 3)
    assert sorted(os.listdir(tmp_path)) == [f"rl-video-episode-{e}.{x}" for e in (0, 1) for x in ("meta.json", "mp4")]


@pytest.mark.parametrize("channels", [3, 4])
def test_colours_stay_exact_for_rgb24_and_rgba(tmp_path, channels):
    env = envrec.RecordVideo(ColourEnv(channels=channels, episode_len=4), tmp_path, episode_trigger=lambda e: True)
    run_episodes(env, 2)
    env.close()
    red = decode(tmp_path / "rl-video-episode-0.mp4", 64, 48).reshape(-1, 3).mean(axis=0)
    blue = decode(tmp_path / "rl-video-episode-1.mp4", 64, 48).reshape(-1, 3).mean(axis=0)
    assert red[0] > 230 and red[1] < 25 and red[2] < 25, red  # red stays red
    assert blue[2] > 230 and blue[0] < 25 and blue[1] < 25, blue  # blue stays blue (not swapped, as rgb32 would)


def test_frames_after_the_first_keep_their_pixels_whatever_their_memory_layout(tmp_path):
    """Frames like the clip's first take a shorter path: views, Fortran order and grey frames still go in whole."""
    top_red = np.zeros((48, 64, 3), np.uint8)
    top_red[:24, :, 0] = 255  # top half red, bottom half black
    grey = np.zeros((48, 64), np.uint8)
    grey[24:] = 255  # bottom half white
    clips = {
        "views": [top_red, top_red[::-1], np.asfortranarray(top_red), top_red[:, ::-1].copy(), top_red[::-1]],
        "grey": [grey, grey[::-1], np.asfortranarray(grey), grey],
    }
    rec = envrec.VideoRecorder(tmp_path, fps=10)
    for name, frames in clips.items():
        rec.start_clip(name)
        for i, frame in enumerate(frames):
            rec.add_frame(frame, i)
        rec.end_clip()
    rec.close()
    red_on_top = [True, False, True, True, False]
    got = decode(tmp_path / "views.mp4", 64, 48).astype(int)
    assert len(got) == 5 and meta(tmp_path, "views")["frames_written"] == 5
    for frame, on_top in zip(got, red_on_top, strict=True):
        top, bottom = frame[4:20, :, 0].mean(), frame[28:44, :, 0].mean()
        assert (top > 230 and bottom < 25) if on_top else (bottom > 230 and top < 25), (top, bottom)
    got = decode(tmp_path / "grey.mp4", 64, 48).astype(int)
    assert len(got) == 4
    for frame, white_below in zip(got, [True, False, True, True], strict=True):
        top, bottom = frame[4:20].mean(), frame[28:44].mean()
        assert (bottom > 230 and top < 25) if white_below else (top > 230 and bottom < 25), (top, bottom)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("zero_copy", [True, False])
def test_a_ring_of_four_frames_never_hands_ffmpeg_a_page_the_env_wrote_over(tmp_path, zero_copy):
    """With zero_copy ffmpeg reads frames from the ring's own pages: their room may be reused only once it
    has read them. A ring that holds four frames, under a 1 MiB pipe and a producer that never waits, would
    show any early reuse as a frame with a later frame's colour."""
    colours = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [0, 255, 255], [255, 0, 255], [255, 255, 255]], np.uint8)
    frames = [np.broadcast_to(colours[i % len(colours)], (48, 64, 3)).copy() for i in range(120)]
    record_bytes = 48 * 64 * 3 + 64
    rec = envrec.VideoRecorder(tmp_path, fps=30, ring_bytes=4 * record_bytes, settings=VideoSettings(zero_copy=zero_copy, faststart=False))
    rec.start_clip("colours")
    for i, frame in enumerate(frames):
        rec.add_frame(frame, i)
    rec.end_clip()
    stats = rec.stats()
    rec.close()
    assert stats["frames_dropped"] == 0 and stats["blocked_s"] > 0  # the ring was full again and again
    got = decode(tmp_path / "colours.mp4", 64, 48).reshape(len(frames), -1, 3).mean(axis=1)
    expected = colours[np.arange(len(frames)) % len(colours)].astype(float)
    wrong = np.flatnonzero(np.abs(got - expected).max(axis=1) > 40)
    assert not wrong.size, f"frames {wrong.tolist()[:10]} decoded as {got[wrong[:3]].round().tolist()}"


@pytest.mark.parametrize("size", [(47, 63), (1, 1), *(pytest.param(s, marks=pytest.mark.slow) for s in ((101, 2), (6, 9)))])
def test_odd_sizes_are_padded_never_refused(tmp_path, size):
    env = envrec.RecordVideo(ColourEnv(size=size, episode_len=3), tmp_path, episode_trigger=lambda e: True)
    run_episodes(env, 1)
    env.close()
    h, w = size
    m = meta(tmp_path, "rl-video-episode-0")
    assert not m["broken"] and m["frame_size"] == {"width": w, "height": h, "channels": 3}
    ew, eh = w + w % 2, h + h % 2
    assert m["encoded_size"] == {"width": ew, "height": eh}
    assert probe_size(tmp_path / "rl-video-episode-0.mp4") == (ew, eh)
    frames = decode(tmp_path / "rl-video-episode-0.mp4", ew, eh)
    assert len(frames) == 4
    if min(size) >= 4:  # 4:2:0 shares one colour sample per 2x2 block: a 1-pixel picture cannot keep its colour
        assert frames[:, 1 : h - 1, 1 : w - 1, 0].mean() > 200


def _names_with(wrapper_cls, folder, **kwargs):
    env = wrapper_cls(ColourEnv(episode_len=5), str(folder), disable_logger=True, **kwargs)
    run_episodes(env, 10)
    env.close()
    return sorted(n for n in os.listdir(folder) if n.endswith(".mp4"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # capped cubic schedule: episodes 0, 1, 8
        pytest.param({"episode_trigger": lambda e: e % 3 == 0, "name_prefix": "every3"}, marks=pytest.mark.slow),
        {"step_trigger": lambda s: s % 20 == 0, "video_length": 7},
        {"video_length": 12},  # clips spanning episodes
    ],
)
def test_file_names_and_lengths_match_gymnasiums_record_video(tmp_path, kwargs):
    from gymnasium.wrappers import RecordVideo as GymRecordVideo

    captured = {}

    class Counting(GymRecordVideo):  # what Gymnasium captured (moviepy may drop a clip's last frame when writing)
        def stop_recording(self):
            captured[self._video_name + ".mp4"] = len(self.recorded_frames)
            super().stop_recording()

    ours = _names_with(envrec.RecordVideo, tmp_path / "envrec", **kwargs)
    theirs = _names_with(Counting, tmp_path / "gym", **kwargs)
    assert ours == theirs and ours
    for name in ours:
        ours_n = meta(tmp_path / "envrec", name[:-4])["frames_written"]
        assert ours_n == captured[name] == len(decode(tmp_path / "envrec" / name, 64, 48))


def test_start_and_stop_recording_by_hand(tmp_path):
    env = envrec.RecordVideo(ColourEnv(), tmp_path, episode_trigger=lambda e: False)
    env.reset(seed=0)
    env.start_recording("manual")
    for _ in range(5):
        env.step(0)
    env.stop_recording()
    env.close()
    assert meta(tmp_path, "manual")["frames_written"] == 5
    assert len(decode(tmp_path / "manual.mp4", 64, 48)) == 5


def test_step_and_reset_after_close_raise_closed_error_as_record_trace_does(tmp_path):
    """Issue 36: RecordVideo.step() after close() stepped the env silently; it raises ClosedError, env untouched."""
    class Counting(ColourEnv):
        steps = 0

        def step(self, action):
            Counting.steps += 1
            return super().step(action)

    env = envrec.RecordVideo(Counting(), tmp_path, episode_trigger=lambda e: True)
    env.reset(seed=0)
    env.step(0)
    env.close()
    for call in (lambda: env.step(0), lambda: env.reset(seed=1)):
        with pytest.raises(envrec.ClosedError, match="after close"):
            call()
    assert Counting.steps == 1 and meta(tmp_path, "rl-video-episode-0")["frames_written"] == 2


def test_frames_are_rendered_only_while_a_clip_records(tmp_path):
    class Counting(ColourEnv):
        renders = 0

        def render(self):
            Counting.renders += 1
            return super().render()

    env = envrec.RecordVideo(Counting(episode_len=5), tmp_path, episode_trigger=lambda e: e == 1)
    run_episodes(env, 3)
    env.close()
    assert Counting.renders == 6


def test_ansi_environments_are_recorded_as_asciicast(tmp_path):
    env = envrec.RecordVideo(gym.make("FrozenLake-v1", render_mode="ansi"), tmp_path, episode_trigger=lambda e: True)
    steps = run_episodes(env, 2)
    env.close()
    casts = sorted(p for p in os.listdir(tmp_path) if p.endswith(".cast"))
    assert casts == ["rl-video-episode-0.cast", "rl-video-episode-1.cast"]
    events = 0
    for cast in casts:
        lines = (tmp_path / cast).read_text().splitlines()
        header = json.loads(lines[0])
        assert header["version"] == 2 and header["width"] > 4 and header["height"] >= 5
        for line in lines[1:]:
            t, kind, data = json.loads(line)
            assert kind == "o" and data.startswith("\x1b[2J") and "\r\n" in data and isinstance(t, float)
        events += len(lines) - 1
        assert meta(tmp_path, cast[:-5])["content_type"] == "application/x-asciicast"
    assert events == steps + 2


class BadFrames(ColourEnv):
    def __init__(self, bad, at=3, **kwargs):
        super().__init__(**kwargs)
        self.bad, self.at = bad, at

    def render(self):
        frame = super().render()
        return self.bad(frame) if self.t >= self.at else frame


@pytest.mark.variants
@pytest.mark.parametrize(
    "bad, reason",
    [
        (lambda f: f.astype(np.float32), "dtype uint8"),
        (lambda f: f[:-2], "the clip started with"),
        (lambda f: f[..., :2], "shape"),
        (lambda f: None, "numpy array"),
    ],
)
def test_bad_frame_breaks_its_clip_and_the_env_goes_on(tmp_path, bad, reason, caplog):
    env = envrec.RecordVideo(BadFrames(bad, at=3, episode_len=6), tmp_path, episode_trigger=lambda e: e == 0)
    run_episodes(env, 2)
    env.close()
    m = meta(tmp_path, "rl-video-episode-0")
    assert m["broken"] and reason in m["reason"]
    assert m["frames_written"] == 3 and m["frames_dropped"] == 4
    assert len(decode(tmp_path / "rl-video-episode-0.mp4", 64, 48)) == 3  # what came before stays playable
    assert sum("is broken" in r.message for r in caplog.records) == 1


def test_bad_frame_raises_in_strict_mode(tmp_path):
    env = envrec.RecordVideo(BadFrames(lambda f: f.astype(np.int16), at=2), tmp_path, strict=True)
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(envrec.RecordError, match="dtype uint8"):
        env.step(0)
    env.close()


def test_text_frames_follow_old_gyms_rules(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=4)
    rec.start_clip("text", text=True)
    rec.add_frame("ok\n")
    rec.add_frame("no newline")
    rec.end_clip()
    rec.close()
    m = meta(tmp_path, "text")
    assert m["broken"] and "must end with a newline" in m["reason"] and m["frames_written"] == 1


def test_empty_clip_leaves_metadata_only(tmp_path):
    rec = envrec.VideoRecorder(tmp_path)
    rec.start_clip("nothing")
    rec.end_clip()
    rec.close()
    assert sorted(os.listdir(tmp_path)) == ["nothing.meta.json"]
    assert meta(tmp_path, "nothing")["empty"]


def test_missing_ffmpeg_and_bad_names_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(envrec.ConfigError, match="not an executable"):
        envrec.VideoRecorder(tmp_path, ffmpeg="/no/such/ffmpeg")
    monkeypatch.setenv("ENVREC_FFMPEG", "/no/such/either")
    with pytest.raises(envrec.ConfigError, match="ENVREC_FFMPEG"):
        find_ffmpeg()
    monkeypatch.delenv("ENVREC_FFMPEG")
    with pytest.raises(ValueError, match="not allowed"):
        envrec.RecordVideo(ColourEnv(), tmp_path, name_prefix="../up")
    with pytest.raises(ValueError, match="render_mode|Render mode"):
        envrec.RecordVideo(ColourEnv(render_mode=None), tmp_path)


def test_missing_codec_breaks_the_clip_with_ffmpegs_words(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, settings=VideoSettings(codec="no_such_codec", preset=None, crf=None))
    rec.start_clip("nocodec")
    for _ in range(3):
        rec.add_frame(np.zeros((8, 8, 3), np.uint8))
    rec.end_clip()
    rec.close()
    m = meta(tmp_path, "nocodec")
    assert m["broken"] and "no_such_codec" in m["reason"] + " ".join(m.get("stderr_tail", []))


def test_encode_command_is_pure_and_pads_odd_sizes():
    s = VideoSettings()
    cmd = encode_command("ffmpeg", 7, 5, 4, 30, "out.mp4", s)
    assert cmd[cmd.index("-pix_fmt") + 1] == "rgba" and "-vf" in cmd and cmd[-1] == "out.mp4"
    assert "+frag_keyframe+empty_moov+default_base_moof" in cmd
    assert "-vf" not in encode_command("ffmpeg", 8, 6, 3, 30, "o.mp4", s)
    assert encoded_size(7, 5, "yuv420p") == (8, 6) and encoded_size(7, 5, "yuv444p") == (7, 5)
    with pytest.raises(ValueError):
        encode_command("ffmpeg", 8, 8, 2, 30, "o.mp4", s)


def test_faststart_off_keeps_the_fragmented_clip_without_a_second_ffmpeg_run(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25, settings=envrec.VideoSettings(faststart=False))
    rec.start_clip("frag")
    for i in range(12):
        rec.add_frame(np.full((48, 64, 3), (10 * i) % 256, np.uint8), i)
    rec.end_clip()
    rec.close()
    m = meta(tmp_path, "frag")
    assert m["fragmented"] and not m["broken"] and m["frames_written"] == 12
    assert len(decode(tmp_path / "frag.mp4", 64, 48)) == 12
    head = (tmp_path / "frag.mp4").read_bytes()[:4096]
    assert b"mvex" in head  # a fragmented MP4: its moov announces movie fragments
    on = envrec.VideoRecorder(tmp_path / "std", fps=25)
    on.start_clip("std")
    on.add_frame(np.zeros((48, 64, 3), np.uint8), 0)
    on.end_clip()
    on.close()
    assert not meta(tmp_path / "std", "std")["fragmented"]
    assert b"mvex" not in (tmp_path / "std" / "std.mp4").read_bytes()[:4096]


def test_keep_last_clips_and_max_bytes_delete_the_oldest_whole_clips(tmp_path):
    env = envrec.RecordVideo(ColourEnv(episode_len=6), tmp_path / "last", episode_trigger=lambda e: True, keep_last_clips=2)
    run_episodes(env, 5)
    env.close()
    assert sorted(os.listdir(tmp_path / "last")) == [f"rl-video-episode-{e}.{x}" for e in (3, 4) for x in ("meta.json", "mp4")]
    s = env.stats()
    assert s["clips_finished"] == 5 and s["clips_evicted"] == 3 and s["bytes_evicted"] > 0
    for e in (3, 4):
        assert len(decode(tmp_path / "last" / f"rl-video-episode-{e}.mp4", 64, 48)) == 7  # the kept ones are whole

    one_clip = sum(os.path.getsize(tmp_path / "last" / n) for n in os.listdir(tmp_path / "last")) // 2
    budget = 3 * one_clip + one_clip // 2
    env = envrec.RecordVideo(ColourEnv(episode_len=6), tmp_path / "bytes", episode_trigger=lambda e: True, max_bytes=budget)
    run_episodes(env, 7)
    env.close()
    names = sorted(os.listdir(tmp_path / "bytes"))
    kept = sorted({n.split(".")[0] for n in names})
    assert 2 <= len(kept) <= 3 and kept[-1] == "rl-video-episode-6"  # the newest is always kept
    assert all(f"{k}.mp4" in names and f"{k}.meta.json" in names for k in kept)  # never half a clip
    assert sum(os.path.getsize(tmp_path / "bytes" / n) for n in names) <= budget
    assert env.stats()["clips_evicted"] == 7 - len(kept)


def test_clip_budgets_refuse_bad_values(tmp_path):
    for kwargs, message in (({"keep_last_clips": 0}, "keep_last_clips"), ({"max_bytes": 0}, "max_bytes")):
        with pytest.raises(envrec.ConfigError, match=message):
            envrec.RecordVideo(ColourEnv(), tmp_path, **kwargs)
