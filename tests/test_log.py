"""envrec.log: each clip logged to TensorBoard (read back from the event file) and W&B (offline: the run's media).

The packages (torch, tensorboard, tensorboardX, wandb, Pillow to decode the GIFs) come with ``envrec[test]``;
a machine without one skips with the reason printed, and under ``CI=true`` that is a failure.
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

import envrec
from envrec.errors import ConfigError
from envrec.log.gif import gif_fps

from .support.video import FFMPEG, decode

pytestmark = pytest.mark.timeout(120)

HERE = os.path.dirname(os.path.abspath(__file__))
TAG = "envrec/clip"


def need(module: str):
    """The module, or a skip (a failure under CI=true: envrec[test] installs it)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is not importable ({exc}); pip install 'envrec[test]' installs it"
        if os.environ.get("CI"):
            pytest.fail(reason + ": under CI=true this is a failure")
        pytest.skip(reason)


def torch_writer(folder):
    need("tensorboard")
    return need("torch.utils.tensorboard").SummaryWriter(str(folder))


def images(folder) -> list:
    """The image events of ``TAG`` in the event files of ``folder``, all of them (not a sample)."""
    ea_module = need("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_module.EventAccumulator(str(folder), size_guidance={ea_module.IMAGES: 0, ea_module.SCALARS: 0})
    ea.Reload()
    return ea.Images(TAG) if TAG in ea.Tags()["images"] else []


def scalars(folder, tag) -> list[tuple[int, float]]:
    ea_module = need("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_module.EventAccumulator(str(folder), size_guidance={ea_module.SCALARS: 0})
    ea.Reload()
    return [(e.step, e.value) for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def gif_frames(data: bytes) -> tuple[np.ndarray, list[int]]:
    """The GIF's frames (RGB) and their durations in ms, decoded by Pillow (not by the ffmpeg that made it)."""
    image_module = need("PIL.Image")
    sequence = need("PIL.ImageSequence")
    gif = image_module.open(io.BytesIO(data))
    assert gif.format == "GIF"
    frames, durations = [], []
    for frame in sequence.Iterator(gif):
        frames.append(np.asarray(frame.convert("RGB")))
        durations.append(frame.info["duration"])
    return np.stack(frames), durations


def record_frames(folder, frames: list[np.ndarray], callback, fps: float = 30, extra: dict | None = None) -> None:
    """One clip of ``frames`` through a real VideoRecorder, ``callback`` as its on_clip_closed."""
    rec = envrec.VideoRecorder(str(folder), fps=fps, on_clip_closed=callback)
    rec.start_clip("clip", episode_id=4)
    for i, frame in enumerate(frames):
        rec.add_frame(frame, i)
    rec.end_clip(extra=extra)
    rec.close()


def ramp(n: int, height: int = 48, width: int = 64) -> list[np.ndarray]:
    """``n`` frames whose red level climbs with time, a green bar on the left."""
    out = []
    for i in range(n):
        frame = np.zeros((height, width, 3), np.uint8)
        frame[..., 0] = int(255 * i / max(n - 1, 1))
        frame[:, : width // 4, 1] = 200
        out.append(frame)
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("moviepy", ["installed", "unimportable"])
@pytest.mark.slow
def test_cartpole_clips_reach_tensorboard_and_wandb(tmp_path, moviepy):
    for module in ("torch", "tensorboard", "wandb", *(["moviepy"] if moviepy == "installed" else [])):
        need(module)
    args = [sys.executable, os.path.join(HERE, "child_log.py"), str(tmp_path)]
    out = subprocess.run([*args, *(["--no-moviepy"] if moviepy == "unimportable" else [])], cwd=HERE,
                         capture_output=True, text=True, timeout=220)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["moviepy"] == (moviepy == "installed")
    metas = result["metas"]
    clips = sorted(glob.glob(str(tmp_path / "videos" / "*.mp4")))
    assert [m["episode_id"] for m in metas] == [0, 1, 2] and len(clips) == 3
    assert result["counts"] == {"tb": {"logged": 3, "skipped": 0, "failed": 0}, "wb": {"logged": 3, "skipped": 0, "failed": 1},
                                "late": {"logged": 0, "skipped": 0, "failed": 1}}

    events = images(tmp_path / "runs")
    assert [e.step for e in events] == [0, 1, 2] and {(e.width, e.height) for e in events} == {(600, 400)}
    for event, meta in zip(events, metas, strict=True):
        frames, durations = gif_frames(event.encoded_image_string)
        assert frames.shape == (meta["frames_written"], 400, 600, 3) and set(durations) == {20}  # CartPole: 50 fps
        mp4 = decode(tmp_path / "videos" / meta["path"], 600, 400)
        assert np.abs(frames.astype(int) - mp4.astype(int)).mean() < 8  # the clip's pictures, up to the palette

    media = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "video_*.mp4"))
    digest = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
    assert sorted(map(digest, media)) == sorted(map(digest, clips))  # the MP4s themselves, once each
    history = open(glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))[0], "rb").read()
    assert all(m["name"].encode() in history for m in metas) and b"video/episode" in history
    warnings = result["warnings"]
    assert len(warnings) == 2 and "below the run's current step" in warnings[0] and "is finished" in warnings[1]


@pytest.mark.parametrize(("fps", "max_frames", "expect_frames", "expect_ms"), [
    (None, 300, 120, 40),  # every frame at the clip's 25 fps
    (None, 30, 30, 160),   # 120 frames in at most 30: 6.25 fps, the clip's whole 4.8 s
    (10, 300, 48, 100),    # asked for 10 fps
])
def test_gif_rate_and_frame_limit(tmp_path, fps, max_frames, expect_frames, expect_ms):
    writer = torch_writer(tmp_path / "runs")
    callback = envrec.log.to_tensorboard(writer, fps=fps, max_frames=max_frames)
    record_frames(tmp_path / "v", ramp(120), callback, fps=25)
    assert callback.close(timeout_s=60)
    writer.close()
    (event,) = images(tmp_path / "runs")
    frames, durations = gif_frames(event.encoded_image_string)
    assert abs(len(frames) - expect_frames) <= 1 and len(frames) <= max_frames
    assert abs(sum(durations) - 4800) <= 2 * expect_ms  # plays as long as the clip, whatever the subsampling
    assert abs(np.median(durations) - expect_ms) <= 10
    red = frames[:, 20, 40, 0].astype(int)
    assert red[0] < 20 and red[-1] > 200 and (np.diff(red) >= -8).all()  # in order, first to last


def test_an_odd_frame_size_padded_by_the_encoder_is_cropped_back(tmp_path):
    writer = torch_writer(tmp_path / "runs")
    callback = envrec.log.to_tensorboard(writer)
    frames = ramp(10, height=33, width=61)
    for f in frames:
        f[-2:, :, 2] = 255  # the last two rows and columns blue: cropping must keep them
        f[:, -2:, 2] = 255
    record_frames(tmp_path / "v", frames, callback)
    assert callback.close(timeout_s=60)
    writer.close()
    (event,) = images(tmp_path / "runs")
    gif, _ = gif_frames(event.encoded_image_string)
    assert (event.width, event.height) == (61, 33) and gif.shape == (10, 33, 61, 3)
    assert gif[:, -1, 30, 2].min() > 120 and gif[:, 16, -1, 2].min() > 120  # (lossy: ~140-180 in the MP4 too)
    mp4 = decode(tmp_path / "v" / "clip.mp4", 62, 34)  # as encoded: padded to even sizes
    assert np.abs(gif.astype(int) - mp4[:, :33, :61].astype(int)).mean() < 8


def test_scalars_from_the_metadata_and_a_step_function(tmp_path):
    writer = torch_writer(tmp_path / "runs")
    callback = envrec.log.to_tensorboard(writer, step=lambda meta: 1000 + meta["episode_id"])
    record_frames(tmp_path / "v", ramp(5), callback, extra={"episode_return": 12.5, "length": 5, "note": "x"})
    assert callback.close(timeout_s=60)
    writer.close()
    assert [e.step for e in images(tmp_path / "runs")] == [1004]
    assert scalars(tmp_path / "runs", f"{TAG}/episode_return") == [(1004, 12.5)]
    assert scalars(tmp_path / "runs", f"{TAG}/length") == [(1004, 5.0)]
    assert callback.logged == 1


def test_clips_rendered_later_from_a_trace(tmp_path):
    """envrec.replay.render calls on_clip_closed once its clips are done, in episode order, as RecordVideo does."""
    env = envrec.RecordTrace(gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=12), str(tmp_path / "t"))
    env.action_space.seed(0)
    for e in range(3):
        env.reset(seed=e)
        while not any(env.step(env.action_space.sample())[2:4]):
            pass
    env.close()
    writer = torch_writer(tmp_path / "runs")
    callback = envrec.log.to_tensorboard(writer)
    clips = envrec.replay.render(str(tmp_path / "t"), "0,2", out=str(tmp_path / "videos"), on_clip_closed=callback)
    assert callback.pending == 0 and callback.logged == 2  # render returns once its logger has them all
    assert callback.close(timeout_s=60)
    writer.close()
    events = images(tmp_path / "runs")
    assert [e.step for e in events] == [0, 2] and callback.logged == 2
    for event, clip in zip(events, clips, strict=True):
        assert gif_frames(event.encoded_image_string)[0].shape[0] == clip.frames


def test_a_tensorboardx_writer(tmp_path):
    writer = need("tensorboardX").SummaryWriter(str(tmp_path / "runs"))
    callback = envrec.log.to_tensorboard(writer, "clips/x")
    record_frames(tmp_path / "v", ramp(6), callback)
    assert callback.close(timeout_s=60)
    writer.close()
    ea_module = need("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_module.EventAccumulator(str(tmp_path / "runs"), size_guidance={ea_module.IMAGES: 0})
    ea.Reload()
    (event,) = ea.Images("clips/x")
    assert (event.step, event.width, event.height) == (4, 64, 48)
    assert gif_frames(event.encoded_image_string)[0].shape == (6, 48, 64, 3)


@pytest.mark.parametrize(("options", "words"), [
    ({"fps": 0}, "to_tensorboard: fps must be a number in (0, 50]"),
    ({"fps": 60}, "to_tensorboard: fps must be a number in (0, 50]"),
    ({"max_frames": 0}, "max_frames must be a positive integer"),
    ({"tag": ""}, "tag must be a non-empty string"),
    ({"step": 3}, "step must be callable or None"),
    ({"scalars": "episode_return"}, "scalars must be a tuple of metadata keys"),
    ({"ffmpeg": "/no/such/ffmpeg"}, "is not an executable file"),
    ({"background": 1}, "background must be True or False"),
])
def test_bad_options_are_refused_when_the_callback_is_made(tmp_path, options, words):
    writer = torch_writer(tmp_path / "runs")
    with pytest.raises(ConfigError, match=re.escape(words)):
        envrec.log.to_tensorboard(writer, **options)
    writer.close()


@pytest.mark.parametrize("thing", [object(), "runs/ppo", None])
def test_what_is_no_writer_or_run_is_refused(thing):
    with pytest.raises(ConfigError, match="writer must be a torch.utils.tensorboard.SummaryWriter or a tensorboardX"):
        envrec.log.to_tensorboard(thing)
    with pytest.raises(ConfigError, match=r"run must be a wandb run \(run = wandb.init"):
        envrec.log.to_wandb(thing)


def test_a_summary_writer_is_no_wandb_run(tmp_path):
    writer = torch_writer(tmp_path / "runs")
    need("wandb")
    with pytest.raises(ConfigError, match="to_wandb: run must be a wandb run.*torch.utils.tensorboard.writer.SummaryWriter"):
        envrec.log.to_wandb(writer)
    writer.close()


def test_a_failing_ffmpeg_is_a_warning_and_the_loop_goes_on(tmp_path, caplog):
    writer = torch_writer(tmp_path / "runs")
    callback = envrec.log.to_tensorboard(writer, ffmpeg="/bin/false")
    env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), str(tmp_path / "v"),
                             episode_trigger=lambda e: True, on_clip_closed=callback)
    env.action_space.seed(0)
    env.reset(seed=0)
    with caplog.at_level(logging.WARNING, logger="envrec.log"):
        for _ in range(3):
            while not any(env.step(env.action_space.sample())[2:4]):
                pass
            env.reset()
        env.close()
        assert callback.close(timeout_s=60)
    writer.close()
    failures = [r for r in caplog.records if r.name == "envrec.log.clip_logger"]
    assert callback.failed == len(failures) == 4 and callback.logged == 0  # 3 episodes and the one close() ended
    assert "was not logged to TensorBoard: FfmpegError: ffmpeg exited with status 1" in failures[0].getMessage()
    assert failures[0].exc_info and not any(r.exc_info for r in failures[1:])  # one traceback, not one a clip
    assert images(tmp_path / "runs") == [] and len(glob.glob(str(tmp_path / "v" / "*.mp4"))) == 4  # the clips stay


def test_a_hung_ffmpeg_is_killed_after_timeout_s(tmp_path, caplog):
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    writer = torch_writer(tmp_path / "runs")
    callback = envrec.log.to_tensorboard(writer, ffmpeg=str(hang), timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="envrec.log"):
        record_frames(tmp_path / "v", ramp(3), callback)
        assert callback.close(timeout_s=60)
    writer.close()
    assert callback.failed == 1
    (failure,) = [r for r in caplog.records if r.name == "envrec.log.clip_logger"]
    assert "ffmpeg took more than 0.5 s to make a GIF" in failure.getMessage()  # and no sleep left (fixture)


def test_clips_without_a_video_are_skipped(tmp_path):
    writer = torch_writer(tmp_path / "runs")
    callback = envrec.log.to_tensorboard(writer)
    callback(None, {"name": "empty", "path": None, "reason": "no frames"})
    cast = tmp_path / "text.cast"
    cast.write_text('{"version": 2}\n')
    callback(str(cast), {"name": "text", "path": "text.cast", "content_type": "application/x-asciicast"})
    assert callback.close(timeout_s=60)
    writer.close()
    assert (callback.skipped, callback.logged, callback.failed) == (2, 0, 0) and images(tmp_path / "runs") == []


def slow_ffmpeg(tmp_path, delay_s: float = 1.0) -> str:
    """An ffmpeg that waits ``delay_s`` before doing its job."""
    script = tmp_path / "slow-ffmpeg.sh"
    script.write_text(f"#!/bin/sh\nsleep {delay_s}\nexec {FFMPEG} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.slow
def test_in_the_background_the_loop_does_not_wait_for_the_gif(tmp_path):
    frames = ramp(8)
    writer = torch_writer(tmp_path / "runs")
    rec = envrec.VideoRecorder(str(tmp_path / "v"), fps=30)
    rec.start_clip("clip", episode_id=0)
    for i, frame in enumerate(frames):
        rec.add_frame(frame, i)
    rec.close()
    path, meta = str(tmp_path / "v" / "clip.mp4"), json.load(open(tmp_path / "v" / "clip.meta.json"))
    slow = slow_ffmpeg(tmp_path)
    background = envrec.log.to_tensorboard(writer, ffmpeg=slow)
    start = time.monotonic()
    background(path, meta)
    returned_after = time.monotonic() - start
    assert returned_after < 0.5 and background.pending == 1 and background.logged == 0
    assert background.close(timeout_s=60) and background.logged == 1 and background.pending == 0
    in_place = envrec.log.to_tensorboard(writer, "inline", ffmpeg=slow, background=False)
    start = time.monotonic()
    in_place(path, meta)
    assert time.monotonic() - start >= 1.0 and in_place.logged == 1  # done when the call returns
    background(path, meta)  # after close(): logged in the caller's thread
    assert background.logged == 2
    writer.close()
    assert [e.step for e in images(tmp_path / "runs")] == [0, 0]  # both of the background callback, at episode 0


def test_the_step_is_taken_when_the_clip_is_reported_not_when_its_gif_is_made(tmp_path, caplog):
    writer = torch_writer(tmp_path / "runs")
    trainer = {"num_timesteps": 2048}
    callback = envrec.log.to_tensorboard(writer, ffmpeg=slow_ffmpeg(tmp_path), step=lambda meta: trainer["num_timesteps"])
    record_frames(tmp_path / "v", ramp(4), callback)
    trainer["num_timesteps"] = 4096  # the trainer goes on while the GIF is made
    broken = envrec.log.to_tensorboard(writer, "broken", step=lambda meta: 1 / 0)
    with caplog.at_level(logging.WARNING, logger="envrec.log"):
        record_frames(tmp_path / "w", ramp(4), broken)
    assert callback.close(timeout_s=60) and broken.close(timeout_s=60)
    writer.close()
    assert [e.step for e in images(tmp_path / "runs")] == [2048]
    (failure,) = [r for r in caplog.records if r.name == "envrec.log.clip_logger"]
    assert broken.failed == 1 and "was not logged to TensorBoard: ZeroDivisionError" in failure.getMessage()


@pytest.mark.slow
def test_clips_still_queued_at_exit_are_logged_before_the_process_ends(tmp_path):
    need("torch")
    rec = envrec.VideoRecorder(str(tmp_path / "v"), fps=30)
    rec.start_clip("clip", episode_id=7)
    for i, frame in enumerate(ramp(8)):
        rec.add_frame(frame, i)
    rec.close()
    code = f"""
import json, envrec
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter({str(tmp_path / "runs")!r})
callback = envrec.log.to_tensorboard(writer, ffmpeg={slow_ffmpeg(tmp_path)!r})
callback({str(tmp_path / "v" / "clip.mp4")!r}, json.load(open({str(tmp_path / "v" / "clip.meta.json")!r})))
print(callback.pending, callback.logged)
"""  # no close(), no writer.close(): the interpreter exits with the GIF still being made
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["1", "0"], out.stdout + out.stderr
    (event,) = images(tmp_path / "runs")
    assert event.step == 7 and gif_frames(event.encoded_image_string)[0].shape == (8, 48, 64, 3)


@pytest.mark.parametrize(("clip_fps", "frames", "fps", "max_frames", "expect"), [
    (30, 100, None, 300, None),   # every frame, as encoded
    (60, 100, None, 300, 50),     # capped: GIF delays below 2/100 s play slow
    (50, 1000, None, 300, 15),    # 1000 frames in 300: the whole clip at 15 fps
    (50, 1000, 10, 300, 10),      # asked for 10 fps: 200 frames, under the limit
    (None, None, None, 300, None),
    (None, None, 12, 300, 12),
    (30, None, None, 300, None),  # frame count unknown: cut at max_frames by ffmpeg, not subsampled
])
def test_gif_fps(clip_fps, frames, fps, max_frames, expect):
    assert gif_fps(clip_fps, frames, fps, max_frames) == expect
