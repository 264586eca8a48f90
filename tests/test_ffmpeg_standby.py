"""The ffmpeg the encoder starts ahead for the next clip (``workers/ffmpeg_output.py``): taken by a clip of the same
command, replaced when it cannot serve, and never left behind nor writing anything when no clip takes it."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import psutil

import envrec
from envrec.contract.records import Status
from envrec.supervision.launcher import CHILD_GRACE_S

from .support.video import decode, meta
from .support.waiting import wait_for


def _frame(i: int, size: tuple[int, int] = (48, 64)) -> np.ndarray:
    f = np.zeros((*size, 3), np.uint8)
    f[..., 1] = 200
    f[0, 0, 0] = i
    return f


def _clip(rec, name: str, frames: int, size: tuple[int, int] = (48, 64), end: bool = True) -> None:
    rec.start_clip(name)
    for i in range(frames):
        rec.add_frame(_frame(i, size), i)
    if end:
        rec.end_clip()


def _status(rec, word: Status) -> int:
    return rec._stream.status(word)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _whole(folder, name: str, frames: int, size: tuple[int, int] = (48, 64)) -> None:
    m = meta(folder, name)
    assert not m["broken"] and m["frames_written"] == frames and not m["fragmented"], m
    assert len(decode(os.path.join(folder, name + ".mp4"), size[1], size[0])) == frames


def test_the_next_clip_takes_the_ffmpeg_started_ahead_and_a_clip_of_another_size_starts_its_own(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25)
    _clip(rec, "c0", 5, end=False)
    assert wait_for(lambda: _status(rec, Status.STANDBY_PID) != 0)
    ahead = _status(rec, Status.STANDBY_PID)
    assert "ffmpeg" in psutil.Process(ahead).name() and ahead != _status(rec, Status.ENCODER_PID)
    rec.end_clip()
    _clip(rec, "c1", 5, end=False)
    assert wait_for(lambda: _status(rec, Status.ENCODER_PID) == ahead)  # c1 is encoded by the one started ahead
    assert wait_for(lambda: _status(rec, Status.STANDBY_PID) not in (0, ahead))
    second_ahead = _status(rec, Status.STANDBY_PID)
    rec.end_clip()
    _clip(rec, "c2", 5, size=(60, 80), end=False)  # another size: another command
    assert wait_for(lambda: _status(rec, Status.ENCODER_PID) not in (0, ahead, second_ahead))
    assert wait_for(lambda: _gone(second_ahead))  # dismissed, not kept waiting
    rec.end_clip()
    rec.close()
    assert _status(rec, Status.STANDBY_PID) == 0
    for name in ("c0", "c1"):
        _whole(tmp_path, name, 5)
    _whole(tmp_path, "c2", 5, (60, 80))
    assert sorted(os.listdir(tmp_path)) == sorted(f"c{i}.{x}" for i in range(3) for x in ("mp4", "meta.json"))


def test_an_ffmpeg_started_ahead_that_was_killed_while_waiting_is_replaced_at_the_next_clip(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25)
    _clip(rec, "c0", 5)
    assert wait_for(lambda: _status(rec, Status.STANDBY_PID) != 0)
    ahead = _status(rec, Status.STANDBY_PID)
    os.kill(ahead, signal.SIGKILL)
    assert wait_for(lambda: _gone(ahead))  # dead before the clip starts (one killed as it is taken breaks its clip)
    _clip(rec, "c1", 5, end=False)
    assert wait_for(lambda: _status(rec, Status.ENCODER_PID) not in (0, ahead))
    rec.end_clip()
    rec.close()
    assert rec.stats()["broken"] is None and rec.stats()["restarts"] == 0
    _whole(tmp_path, "c0", 5)
    _whole(tmp_path, "c1", 5)


def test_an_ffmpeg_started_ahead_exits_by_itself_writing_nothing_when_its_worker_is_killed(tmp_path):
    """No clip took it: once its worker is gone it reads the end of its input, cannot open its output (the
    worker's descriptor), and exits, before the env side's reaping (CHILD_GRACE_S after the death is seen)
    would kill it; the folder holds the clip that was finished and nothing else."""
    rec = envrec.VideoRecorder(tmp_path, fps=25, max_restarts=0)
    _clip(rec, "c0", 5)
    assert wait_for(lambda: _status(rec, Status.CLIPS) == 1 and _status(rec, Status.STANDBY_PID) != 0)
    ahead = _status(rec, Status.STANDBY_PID)
    t0 = time.monotonic()
    os.kill(rec.stats()["worker_pid"], signal.SIGKILL)
    assert wait_for(lambda: _gone(ahead), CHILD_GRACE_S)
    assert time.monotonic() - t0 < CHILD_GRACE_S
    rec.close()
    _whole(tmp_path, "c0", 5)
    assert sorted(os.listdir(tmp_path)) == ["c0.meta.json", "c0.mp4"]
