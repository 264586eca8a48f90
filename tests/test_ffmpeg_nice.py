"""ffmpeg's niceness follows the encoder's pace (``workers/ffmpeg_nice.py``): ``behind_nice`` until the encoder is
seen keeping up, ``nice`` while it does, ``behind_nice`` again for a clip that starts with the ring half full."""

from __future__ import annotations

import os

import numpy as np
import psutil
import pytest

import envrec
from envrec.contract.records import Status
from envrec.workers.ffmpeg_nice import BEHIND_AT, CAUGHT_UP_AT, PROBATION, NiceChoice, Pace

from .support.video import meta
from .support.waiting import wait_for

SIZE = (96, 128)
FRAME_BYTES = SIZE[0] * SIZE[1] * 3
RING_BYTES = 4 << 20  # ~110 frames: the probation ends after ~55


class _Gauge:
    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self.used = 0.0

    def used_fraction(self) -> float:
        return self.used


def test_the_pace_is_unknown_until_half_a_ring_went_to_ffmpeg_then_follows_the_ring_with_hysteresis():
    ring, choice = _Gauge(), NiceChoice(10, 0)
    assert choice.now(ring) == 0 and choice.pace is Pace.UNKNOWN
    assert not choice.handed(ring, int(PROBATION * ring.capacity) - 1)
    assert choice.handed(ring, 1)  # the probation's end: the open clip's ffmpeg is reniced
    assert choice.pace is Pace.KEEPING_UP and choice.now(ring) == 10
    assert not choice.handed(ring, 10**6)  # once
    ring.used = BEHIND_AT
    assert choice.now(ring) == 0 and choice.pace is Pace.BEHIND
    ring.used = (BEHIND_AT + CAUGHT_UP_AT) / 2
    assert choice.now(ring) == 0  # not caught up yet
    ring.used = CAUGHT_UP_AT - 0.01
    assert choice.now(ring) == 10 and choice.pace is Pace.KEEPING_UP


def test_a_ring_half_full_during_the_probation_makes_the_pace_behind_and_behind_nice_never_exceeds_nice():
    ring, choice = _Gauge(), NiceChoice(5, 8)
    ring.used = 0.6
    assert not choice.handed(ring, 10**6)
    assert choice.pace is Pace.BEHIND and choice.now(ring) == 5  # behind_nice 8 is taken as nice's 5
    assert NiceChoice(10, 10).now(ring) == 10  # behind_nice=nice: one niceness


def test_behind_nice_is_checked_like_nice():
    with pytest.raises(envrec.ConfigError, match="behind_nice"):
        envrec.VideoSettings(behind_nice=20)
    assert envrec.VideoSettings().behind_nice == 0


def _nices(pid: int) -> set[int]:
    """The niceness of every thread of ``pid`` (field 19 of /proc/PID/task/TID/stat)."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            out.add(int(f.read().rsplit(")", 1)[1].split()[16]))
    return out


def _status(rec, word: Status) -> int:
    return rec._stream.status(word)


def _add(rec, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        frame = np.zeros((*SIZE, 3), np.uint8)
        frame[0, 0, 0] = i
        rec.add_frame(frame, i)


def _written(rec, n: int) -> bool:
    return wait_for(lambda: _status(rec, Status.FRAMES_WRITTEN) >= n)


def test_ffmpeg_runs_at_behind_nice_until_the_encoder_keeps_up_and_again_for_a_clip_started_behind(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25, ring_bytes=RING_BYTES)
    probation = int(PROBATION * RING_BYTES) // FRAME_BYTES + 1
    # c0: the pace is unknown at its start; handed half a ring, the ring nearly empty, it keeps up: reniced
    rec.start_clip("c0")
    _add(rec, 1)
    assert _written(rec, 1) and wait_for(lambda: _status(rec, Status.ENCODER_PID) != 0)
    c0 = _status(rec, Status.ENCODER_PID)
    assert _nices(c0) == {0}
    for k in range(1, probation + 10, 10):
        _add(rec, 10, k)
        assert _written(rec, k + 10)  # the ring never holds more than ~10 frames
    assert wait_for(lambda: _nices(c0) == {10})
    rec.end_clip()
    # c1 starts keeping up: nice 10 (the ffmpeg started ahead, already at 10)
    rec.start_clip("c1")
    _add(rec, 5)
    assert wait_for(lambda: _status(rec, Status.ENCODER_PID) not in (0, c0))
    c1 = _status(rec, Status.ENCODER_PID)
    assert _nices(c1) == {10}
    assert wait_for(lambda: _status(rec, Status.STANDBY_PID) != 0)
    ahead_at_10 = _status(rec, Status.STANDBY_PID)
    rec.end_clip()
    assert wait_for(lambda: _status(rec, Status.CLIPS) == 2)  # all of c1 handled: the ring is empty
    # c2 starts with the ring 3/4 full (its worker stopped while the env wrote): behind, so its ffmpeg runs at
    # behind_nice, a fresh one: the one started ahead at 10 cannot be lowered
    worker = psutil.Process(rec.stats()["worker_pid"])
    worker.suspend()
    try:
        rec.start_clip("c2")
        _add(rec, int(0.75 * RING_BYTES) // FRAME_BYTES)
    finally:
        worker.resume()
    assert wait_for(lambda: _status(rec, Status.ENCODER_PID) not in (0, c1))
    c2 = _status(rec, Status.ENCODER_PID)
    assert c2 != ahead_at_10 and _nices(c2) == {0}
    assert wait_for(lambda: not psutil.pid_exists(ahead_at_10) or psutil.Process(ahead_at_10).status() == psutil.STATUS_ZOMBIE)
    assert wait_for(lambda: _status(rec, Status.STANDBY_PID) != 0)
    ahead_at_0 = _status(rec, Status.STANDBY_PID)
    assert _nices(ahead_at_0) == {0}
    rec.end_clip()
    # c3 starts with the ring drained: caught up, the one started ahead at 0 is taken and raised to 10
    assert wait_for(lambda: _status(rec, Status.CLIPS) == 3, 20)
    rec.start_clip("c3")
    _add(rec, 5)
    assert wait_for(lambda: _status(rec, Status.ENCODER_PID) == ahead_at_0)
    assert _nices(ahead_at_0) == {10}
    rec.end_clip()
    rec.close()
    nices = {name: meta(tmp_path, name)["ffmpeg_nice"] for name in ("c0", "c1", "c2", "c3")}
    assert nices == {"c0": 10, "c1": 10, "c2": 0, "c3": 10}
    for name in nices:
        assert not meta(tmp_path, name)["broken"]


def test_behind_nice_equal_to_nice_keeps_one_niceness_from_the_first_frame(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25, settings=envrec.VideoSettings(behind_nice=10))
    rec.start_clip("c0")
    _add(rec, 1)
    assert wait_for(lambda: _status(rec, Status.ENCODER_PID) != 0)
    assert _nices(_status(rec, Status.ENCODER_PID)) == {10}
    rec.end_clip()
    rec.close()
    assert meta(tmp_path, "c0")["ffmpeg_nice"] == 10
