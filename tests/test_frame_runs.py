"""Frames taken in runs (``RingReader.poll_run`` + ``Encoder._on_frame_run``): one hand-over to ffmpeg per run.

The encoder's real worker loop runs here in this process, fed by a producer
thread through a ring that wraps many times, with runs and a frame at a
time, the ring's pages handed to ffmpeg (zero copy) and written: every
frame decodes to the colour it was sent with, the counts add up, and a
frame of another shape inside a run, or ffmpeg killed mid-run, ends the
clip where one-at-a-time handling would.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from envrec.contract.protocol import EncoderConfig, Kind
from envrec.contract.ring import RingWriter
from envrec.contract.ring_reader import RingReader
from envrec.formats.ffmpeg import VideoSettings
from envrec.record.packer import frame_packer
from envrec.workers import loop
from envrec.workers.encoder import Encoder
from envrec.workers.ffmpeg_process import FfmpegProcess
from envrec.workers.frame_feed import FrameFeed

from .support.video import FFMPEG, decode, meta
from .support.worker_loop import Conn, count_runs

COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [0, 255, 255], [255, 0, 255], [255, 255, 255]], np.uint8)


def _frames(n: int, shape: tuple[int, int]) -> list[np.ndarray]:
    return [np.broadcast_to(COLOURS[i % len(COLOURS)], (*shape, 3)).copy() for i in range(n)]


def _encode(folder, clips: dict, zero_copy: bool, runs: bool, prefill: bool = False, during=None, ring_bytes: int = 1 << 20) -> dict:
    """Send each clip's frames through a ring (1 MiB) to the encoder's real worker loop (in this process).
    ``prefill``: every record is in the ring before the loop starts; ``during(encoder, frames_sent)`` is
    called by the producer after each frame. Returns how many runs were taken and the encoder's summary."""
    ring = RingWriter(ring_bytes)
    reader = RingReader(ring.spec)
    cfg = EncoderConfig(str(folder), FFMPEG, "ffmpeg", settings=VideoSettings(zero_copy=zero_copy, faststart=False))
    enc = Encoder(cfg, status=reader.set_status)
    enc.takes_runs = runs
    taken = count_runs(reader)

    def produce() -> None:
        for name, frames in clips.items():
            assert ring.write(Kind.CLIP_START, 0, 0, (json.dumps({"name": name, "fps": 30, "episode_id": 0}).encode(),))
            for i, frame in enumerate(frames):
                assert frame_packer(frame.shape).write_single(ring, 0, i, frame, frame.shape)
                if during is not None:
                    during(enc, i + 1)
            assert ring.write(Kind.CLIP_END, 0, 0, (b"{}",))
        assert ring.write(Kind.CLOSE, 0, 0, (b"{}",))

    producer = threading.Thread(target=produce)
    if prefill:
        produce()
    else:
        producer.start()
    try:
        assert loop.handle_records(reader, enc, Conn(), os.getppid()) is False
    finally:
        if not prefill:
            producer.join(30)
        reader.close()
        ring.close()
    assert not producer.is_alive()
    return {"runs": taken["runs"], "summary": enc.summary()}


def _colours_ok(path, frames: list[np.ndarray], decoded_at_least: int) -> None:
    h, w = frames[0].shape[:2]
    got = decode(path, w + w % 2, h + h % 2)[:, 1 : h - 1, 1 : w - 1].reshape(-1, (h - 2) * (w - 2), 3).mean(axis=1)  # odd sizes are padded
    assert decoded_at_least <= len(got) <= len(frames)
    expected = np.array([f[0, 0] for f in frames[: len(got)]], float)
    wrong = np.flatnonzero(np.abs(got - expected).max(axis=1) > 40)
    assert not wrong.size, f"frames {wrong.tolist()[:10]} decoded as {got[wrong[:3]].round().tolist()}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("zero_copy", [True, False])
@pytest.mark.parametrize("runs", [True, False])
def test_frames_in_runs_decode_to_what_was_sent(tmp_path, zero_copy, runs):
    clips = {"colours": _frames(600, (48, 64)), "odd": _frames(100, (47, 63))}  # 5 laps of the ring; rows with padding
    r = _encode(tmp_path, clips, zero_copy, runs)
    assert (r["runs"] > 10) if runs else (r["runs"] == 0)
    s = r["summary"]
    assert s["frames_written"] == 700 and s["frames_dropped"] == 0 and s["clips"] == 2 and s["clips_broken"] == 0
    for name, frames in clips.items():
        m = meta(tmp_path, name)
        assert m["frames_written"] == len(frames) and m["step_range"] == [0, len(frames) - 1] and not m["broken"]
        _colours_ok(tmp_path / f"{name}.mp4", frames, len(frames))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runs", [True, False])
@pytest.mark.parametrize("at", [50, 43])
def test_a_frame_of_another_shape_inside_a_run_breaks_the_clip_there(tmp_path, runs, at):
    """48x64 and 64x48 frames are the same size, so the turned one matches the run's header: its shape part
    tells them apart. Every record is in the ring first, so the turned frame is inside a run (frame 0 alone,
    then runs of 14: frame 50 in the middle of one, frame 43 first in one)."""
    frames = _frames(at, (48, 64)) + [np.zeros((64, 48, 3), np.uint8)] + _frames(20, (48, 64))
    r = _encode(tmp_path, {"turned": frames}, zero_copy=True, runs=runs, prefill=True)
    assert (r["runs"] >= 3) if runs else (r["runs"] == 0)
    m = meta(tmp_path, "turned")
    assert m["broken"] and f"frame {at} has shape (64, 48, 3), the clip started with (48, 64, 3)" in m["reason"]
    assert m["frames_written"] == at and m["frames_dropped"] == 21 and m["step_range"] == [0, at - 1]
    _colours_ok(tmp_path / "turned.mp4", frames[:at], 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("zero_copy", [True, False])
def test_ffmpeg_killed_mid_run_keeps_the_count_of_what_it_took(tmp_path, zero_copy):
    """SIGKILL to ffmpeg while frames stream in runs: the frames it took count as written, the rest of the
    run and of the clip as dropped, none twice; what it wrote decodes to the colours sent, in order."""
    frames = _frames(1500, (120, 160))

    def kill_at_frame_600(enc: Encoder, sent: int) -> None:
        if sent == 600:
            os.kill(enc.clip.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]  # the clip is open and encoding
            time.sleep(0.05)

    r = _encode(tmp_path, {"killed": frames}, zero_copy, runs=True, during=kill_at_frame_600)
    s = r["summary"]
    m = meta(tmp_path, "killed")
    assert m["broken"] and "SIGKILL" in (m["exit_status"] or "") and m["reason"]
    assert s["frames_written"] + s["frames_dropped"] == 1500 and m["frames_written"] == s["frames_written"]
    assert 1 <= s["frames_written"] <= 600 and m["frames_dropped"] == s["frames_dropped"]
    _colours_ok(tmp_path / "killed.mp4", frames[: s["frames_written"]], 0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("zero_copy", [True, False])
def test_runs_of_frames_larger_than_ffmpegs_pipe(tmp_path, zero_copy):
    """1.15 MB frames, all waiting in a ring whose run limit (1/8) is 3 of them: each frame goes into the
    1 MiB pipe in parts, ffmpeg reading between them; every frame decodes right, in order."""
    frames = _frames(12, (480, 800))
    r = _encode(tmp_path, {"large": frames}, zero_copy=zero_copy, runs=True, prefill=True, ring_bytes=32 << 20)
    assert r["runs"] >= 3 and r["summary"]["frames_written"] == 12
    _colours_ok(tmp_path / "large.mp4", frames, 12)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("zero_copy", [True, False])
def test_a_producer_waiting_for_room_gets_it_frame_by_frame_while_a_run_goes_to_ffmpeg(tmp_path, monkeypatch, zero_copy):
    """A producer with no env to step fills the ring and waits for room: while a run of frames is handed to
    ffmpeg, the room of each frame ffmpeg took is given back then (inside the run), not once the run is
    over; no room is given back before ffmpeg read it (every frame decodes to the colour it was sent with)."""
    runs: list[tuple[int, int]] = []  # (ring position of a run's first frame, of the end of its last)
    released_inside: list[int] = []
    send_run = FrameFeed.send_run

    def watched_send_run(feed, proc, position, record_bytes, frames, between=None):
        runs.append((position, position + len(frames) * record_bytes))
        return send_run(feed, proc, position, record_bytes, frames, between)

    release_if_waited_for = loop._release_if_waited_for

    def watched_release(reader, handler):
        release_if_waited_for(reader, handler)
        read_pos = reader.cursor - reader.held_bytes()
        start, end = runs[-1]
        if start < read_pos < end:
            released_inside.append(read_pos)

    monkeypatch.setattr(FrameFeed, "send_run", watched_send_run)
    monkeypatch.setattr(loop, "_release_if_waited_for", watched_release)
    frames = _frames(600, (120, 160))  # 57.6 KB each: 145 fill the ring, runs of up to 18 (its 1/8) fill the pipe
    r = _encode(tmp_path, {"waited": frames}, zero_copy, runs=True, ring_bytes=8 << 20)
    assert len(runs) > 10 and r["summary"]["frames_written"] == 600
    assert len(released_inside) > 10, f"room given back inside a run {len(released_inside)} times in {len(runs)} runs"
    _colours_ok(tmp_path / "waited.mp4", frames, 600)


@pytest.mark.timeout(120)
def test_the_next_clips_frames_go_to_its_ffmpeg_while_the_last_clips_ffmpeg_finishes(tmp_path, monkeypatch):
    """A clip's ffmpeg finishes (and its remux runs) in the ending thread: the next clip's frames reach their
    own ffmpeg meanwhile, through a ring that wraps while the first is finishing; the frames the finishing
    ffmpeg had not read stay held until it exits, so both clips decode to the colours sent, and their
    metadata is written in the order the clips ended."""
    finishing: list[int] = []  # pid of each ffmpeg told to finish
    next_clip_fed = threading.Event()
    overlapped: list[bool] = []
    finish, send_run = FfmpegProcess.finish, FrameFeed.send_run

    def slow_finish(proc, *args, **kwargs):
        if not finishing:
            overlapped.append(next_clip_fed.wait(10))  # the first clip's: until the second's frames flow
            time.sleep(0.3)  # they go on, and wrap the ring
        finishing.append(proc.pid)
        return finish(proc, *args, **kwargs)

    fed: list[int] = []  # pid of each ffmpeg given frames, in order: the first clip's, then the second's

    def noting_send_run(feed, proc, *args, **kwargs):
        if proc.pid not in fed:
            fed.append(proc.pid)
        if len(fed) > 1:
            next_clip_fed.set()
        return send_run(feed, proc, *args, **kwargs)

    monkeypatch.setattr(FfmpegProcess, "finish", slow_finish)
    monkeypatch.setattr(FrameFeed, "send_run", noting_send_run)
    clips = {"first": _frames(60, (48, 64)), "second": _frames(300, (48, 64))}  # 9 KB frames, a 1 MiB ring
    r = _encode(tmp_path, clips, zero_copy=True, runs=True)
    assert overlapped == [True]
    assert r["summary"]["frames_written"] == 360 and r["summary"]["clips"] == 2 and r["summary"]["clips_broken"] == 0
    first, second = meta(tmp_path, "first"), meta(tmp_path, "second")
    assert first["finished_seq"] < second["finished_seq"] and not first["broken"] and not second["broken"]
    for name, frames in clips.items():
        _colours_ok(tmp_path / f"{name}.mp4", frames, len(frames))
