"""Video faults across process boundaries: ffmpeg or the encoder killed mid-clip, the env process killed."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import psutil
import pytest

import envrec
from envrec.contract.records import Status

from .support.processes import start_child
from .support.video import decode, meta
from .support.waiting import wait_for


def frame(i: int) -> np.ndarray:
    f = np.zeros((48, 64, 3), np.uint8)
    f[..., 1] = 200  # green
    f[0, 0, 0] = i % 256
    return f


def encoded_some(folder, name, min_bytes=2000):
    """ffmpeg has written fragments (not only taken frames into its pipe)."""
    path = os.path.join(folder, name + ".mp4")
    return os.path.exists(path) and os.path.getsize(path) >= min_bytes


def fill_clip(rec, name, frames, fps_pause=0.0):
    rec.start_clip(name)
    for i in range(frames):
        rec.add_frame(frame(i), i)
        if fps_pause:
            time.sleep(fps_pause)


def test_ffmpeg_killed_mid_clip_breaks_that_clip_only(tmp_path, caplog):
    rec = envrec.VideoRecorder(tmp_path, fps=25, settings=envrec.VideoSettings(keyframe_interval_s=0.2))
    fill_clip(rec, "first", 60)
    assert wait_for(lambda: rec._stream.status(Status.FRAMES_WRITTEN) >= 60 and encoded_some(tmp_path, "first"))
    ffmpeg_pid = rec._stream.status(Status.ENCODER_PID)
    assert "ffmpeg" in psutil.Process(ffmpeg_pid).name()
    os.kill(ffmpeg_pid, signal.SIGKILL)
    for i in range(60, 90):  # the env goes on; no exception
        rec.add_frame(frame(i), i)
    rec.end_clip()
    fill_clip(rec, "second", 20)  # a fresh ffmpeg
    rec.end_clip()
    rec.close()
    m = meta(tmp_path, "first")
    assert m["broken"] and "SIGKILL(-9)" in m["reason"] and m["exit_status"] == "SIGKILL(-9)"
    assert m["frames_written"] >= 60 and m["frames_written"] + m["frames_dropped"] == 90
    kept = decode(tmp_path / "first.mp4", 64, 48)
    assert 0 < len(kept) <= m["frames_written"]  # decodable up to its last complete fragment
    assert kept[..., 1].mean() > 150
    m2 = meta(tmp_path, "second")
    assert not m2["broken"] and m2["frames_written"] == 20
    assert len(decode(tmp_path / "second.mp4", 64, 48)) == 20
    assert sum("is broken" in r.message for r in caplog.records) == 1
    assert rec.stats()["restarts"] == 0


@pytest.mark.xdist_group("serial")
def test_encoder_killed_mid_clip_env_goes_on_and_next_clip_gets_a_fresh_encoder(tmp_path, caplog):
    rec = envrec.VideoRecorder(tmp_path, fps=25, settings=envrec.VideoSettings(keyframe_interval_s=0.2))
    fill_clip(rec, "first", 60)
    assert wait_for(lambda: rec._stream.status(Status.FRAMES_WRITTEN) >= 60 and encoded_some(tmp_path, "first"))
    old_worker, ffmpeg_pid = rec.stats()["worker_pid"], rec._stream.status(Status.ENCODER_PID)
    os.kill(old_worker, signal.SIGKILL)
    t0 = time.monotonic()
    i = 60
    while rec.stats()["broken"] is None and time.monotonic() - t0 < 5:  # never blocks, never raises
        rec.add_frame(frame(i), i)
        i += 1
        time.sleep(0.005)
    assert time.monotonic() - t0 < 1.5  # noticed within the status-check interval
    assert "SIGKILL(-9)" in rec.stats()["broken"]
    rec.end_clip()
    assert wait_for(lambda: not psutil.pid_exists(ffmpeg_pid) or psutil.Process(ffmpeg_pid).status() == psutil.STATUS_ZOMBIE)
    fill_clip(rec, "second", 20)
    rec.end_clip()
    stats = rec.stats()
    rec.close()
    assert stats["restarts"] == 1 and stats["worker_pid"] != old_worker
    m = meta(tmp_path, "first")
    assert m["broken"] and "SIGKILL(-9)" in m["reason"] and m["written_by"].startswith("env process")
    assert len(decode(tmp_path / "first.mp4", 64, 48)) > 0  # ffmpeg saw EOF and finished the fragments it had
    m2 = meta(tmp_path, "second")
    core = {"version", "written_by", "content_type", "name", "path", "episode_id", "frames_sent", "frames_written",
            "frames_dropped", "fps", "empty", "broken", "reason"}
    assert core <= set(m) and core <= set(m2)  # both authors write one schema (envrec.formats.clip_meta)
    assert m["written_by"] == "env process" and m["frames_written"] is None and m["frames_sent"] >= 60
    assert m2["written_by"] == "encoder" and m2["frames_sent"] == m2["frames_written"] == 20
    assert not m2["broken"] and m2["frames_written"] == 20
    assert len(decode(tmp_path / "second.mp4", 64, 48)) == 20
    assert sum("stream is broken" in r.message for r in caplog.records) == 1


def test_strict_mode_raises_when_the_encoder_dies(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, strict=True)
    fill_clip(rec, "first", 5)
    os.kill(rec.stats()["worker_pid"], signal.SIGKILL)
    with pytest.raises(envrec.WorkerError, match="SIGKILL"):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            rec.add_frame(frame(0))
            time.sleep(0.01)
    rec.close()


@pytest.mark.parametrize("mode", ["kill-self", "wait"])
def test_env_process_killed_mid_clip_leaves_a_playable_clip_and_no_ffmpeg(tmp_path, mode):
    child = start_child("child_video.py", str(tmp_path), "75", mode)
    worker_pid = int(child.stdout.readline())
    if mode == "wait":
        assert child.stdout.readline().strip() == "ready"
        child.kill()
    child.wait(30)
    child.stdout.close()
    assert wait_for(lambda: not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE, 10)
    m = meta(tmp_path, "clip")
    assert m["frames_written"] == 75 and m["ended_by"] == "env process died"
    assert len(decode(tmp_path / "clip.mp4", 64, 48)) == 75


@pytest.mark.slow
def test_a_second_encoder_death_is_handled_like_the_first(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25, settings=envrec.VideoSettings(keyframe_interval_s=0.2))
    for k in range(2):
        before = rec.stats()["frames_written"]
        fill_clip(rec, f"doomed{k}", 30)
        assert wait_for(lambda n=before + 30: rec.stats()["frames_written"] >= n)
        os.kill(rec.stats()["worker_pid"], signal.SIGKILL)
        assert wait_for(lambda: (rec.add_frame(frame(0)) or True) and rec.stats()["broken"] is not None, 5)
        rec.end_clip()
        fill_clip(rec, f"fine{k}", 10)  # a fresh worker
        rec.end_clip()
        assert wait_for(lambda p=tmp_path / f"fine{k}.meta.json": os.path.exists(p))
    rec.close()
    assert rec.stats()["restarts"] == 2
    for k in range(2):
        assert meta(tmp_path, f"doomed{k}")["broken"]
        m = meta(tmp_path, f"fine{k}")
        assert not m["broken"] and m["frames_written"] == 10 and m["written_by"] == "encoder" and m["frames_sent"] == 10


@pytest.mark.xdist_group("serial")
def test_hung_ffmpeg_is_killed_after_the_stall_timeout_and_the_next_clip_is_fine(tmp_path, caplog):
    """ffmpeg stopped (SIGSTOP): its input pipe fills, the worker's blocked write is ended by the watchdog."""
    settings = envrec.VideoSettings(stall_timeout_s=1.0)
    rec = envrec.VideoRecorder(tmp_path, fps=25, settings=settings)
    big = np.full((480, 640, 3), 90, np.uint8)  # 0.9 MB: two frames fill ffmpeg's 1 MiB pipe
    rec.start_clip("hung")
    rec.add_frame(big, 0)
    assert wait_for(lambda: rec._stream.status(Status.ENCODER_PID) != 0)
    ffmpeg = psutil.Process(rec._stream.status(Status.ENCODER_PID))
    ffmpeg.suspend()
    t0 = time.monotonic()
    for i in range(1, 12):
        rec.add_frame(big, i)  # never blocks the env: the frames wait in the ring
    assert time.monotonic() - t0 < 1.0
    assert wait_for(lambda: not ffmpeg.is_running() or ffmpeg.status() == psutil.STATUS_ZOMBIE, 10.0)
    rec.end_clip()
    rec.start_clip("after")
    for i in range(5):
        rec.add_frame(big, i)
    rec.end_clip()
    rec.close()
    m = meta(tmp_path, "hung")
    assert m["broken"] and "took no input for 1 s" in m["reason"]
    assert m["frames_written"] + m["frames_dropped"] == 12
    m2 = meta(tmp_path, "after")
    assert not m2["broken"] and m2["frames_written"] == 5
    assert len(decode(tmp_path / "after.mp4", 640, 480)) == 5
    assert rec.stats()["restarts"] == 0


# exit (os._exit(3)) and kill (SIGKILL) end the encoder alike (no finally run): one path for its successor, only
# the status reported differs, so each point dies one way, the two ways in turn.
VIDEO_CASES = [(p, h) for i, p in enumerate(("record", "frame", "clip:end", "clip:meta")) for h in ("raise", ("exit", "kill")[i % 2])] + [
    ("frame", "hang"),
    ("clip:end", "hang"),
    ("clip:open", "raise"),  # the clip's ffmpeg (started ahead) pointed at its video, given no frame yet
    ("clip:open", "kill"),
]
VIDEO_REPORTED = {"raise": "InjectedFault", "exit": "exit code 3", "kill": "SIGKILL(-9)", "hang": "made no progress"}
FAULT_AFTER = {"record": 15, "frame": 12, "clip:end": 2, "clip:meta": 2, "clip:open": 2}  # each lands in the second clip


@pytest.mark.parametrize("point, how", [  # the development tier: the first two points, raised and died
    pytest.param(p, h, id=f"{p}-{h}", marks=() if p in ("record", "frame") and h != "hang" else pytest.mark.slow)
    for p, h in VIDEO_CASES])
def test_encoder_fault_battery(tmp_path, point, how):
    """An encoder that raises, exits, is killed or hangs at a named point of the second of three clips:
    the first clip, finished (counted in ``Status.CLIPS``) before the second starts, is intact, the second
    has metadata saying why, the third is recorded by a fresh worker. (A clip's ffmpeg finishes beside the
    next clip's frames: a failure in those ~50 ms breaks the clip, as one while it was encoded does.)"""
    from envrec.contract.faults import FaultSpec

    rec = envrec.VideoRecorder(
        tmp_path, fps=25, faults=FaultSpec(at=point, after=FAULT_AFTER[point], how=how),
        settings=envrec.VideoSettings(stall_timeout_s=0.5), hang_timeout_s=1.0,
    )
    fill_clip(rec, "c0", 10)
    rec.end_clip()
    assert wait_for(lambda: rec._stream.status(Status.CLIPS) == 1)
    fill_clip(rec, "c1", 10)  # the env goes on: no exception
    rec.end_clip()
    assert wait_for(lambda: rec._stream.check() or rec._stream.broken is not None, 15)
    reason = rec._stream.broken
    fill_clip(rec, "c2", 10)  # a fresh encoder, without the fault
    rec.end_clip()
    rec.close()
    assert VIDEO_REPORTED[how] in reason
    assert rec.stats()["restarts"] == 1
    for name in ("c0", "c2"):
        m = meta(tmp_path, name)
        assert not m["broken"] and m["frames_written"] == 10, (name, m)
        assert len(decode(tmp_path / f"{name}.mp4", 64, 48)) == 10
    m1 = meta(tmp_path, "c1")
    assert m1["broken"] and VIDEO_REPORTED[how] in (m1.get("error") or m1["reason"]), m1
    if m1["path"] is not None:  # what ffmpeg encoded before the fault is kept playable
        assert 0 < len(decode(tmp_path / m1["path"], 64, 48)) <= 10


def test_an_encoder_killed_before_enforcing_its_clip_budget_is_finished_by_its_successor(tmp_path):
    """The successor finds the clips its predecessor finished (by their recorder id) and keeps to the budget."""
    from envrec.contract.faults import FaultSpec

    rec = envrec.VideoRecorder(tmp_path, fps=25, keep_last_clips=2, faults=FaultSpec(at="clip:evict", after=3, how="kill"))
    for i in range(3):
        fill_clip(rec, f"c{i}", 5)
        rec.end_clip()
    assert wait_for(lambda: rec._stream.check() or rec._stream.broken is not None, 15)
    for i in range(3, 5):
        fill_clip(rec, f"c{i}", 5)
        rec.end_clip()
    rec.close()
    assert rec.stats()["restarts"] == 1
    assert sorted(os.listdir(tmp_path)) == [f"c{i}.{x}" for i in (3, 4) for x in ("meta.json", "mp4")]
    for i in (3, 4):
        assert len(decode(tmp_path / f"c{i}.mp4", 64, 48)) == 5


HUNG_FFMPEG = """#!/bin/bash
# Answers -version; otherwise takes no input, ignores SIGHUP/SIGTERM and never exits: an ffmpeg hung for good.
[ "$1" = -version ] && echo "ffmpeg version fake" && exit 0
trap '' HUP TERM PIPE
while :; do sleep 0.2; done
"""


@pytest.mark.xdist_group("serial")
def test_an_ffmpeg_that_outlives_its_killed_encoder_is_killed_after_the_grace_period(tmp_path):
    """SIGKILL the encoder mid-clip while its ffmpeg (own process group) would never exit by itself, nor the one
    started ahead for the next clip: the env side kills both by the pids the worker published, CHILD_GRACE_S
    later."""
    from envrec.supervision.launcher import CHILD_GRACE_S

    fake = tmp_path / "fake-ffmpeg"
    fake.write_text(HUNG_FFMPEG)
    fake.chmod(0o755)
    rec = envrec.VideoRecorder(tmp_path / "v", fps=25, ffmpeg=str(fake))
    fill_clip(rec, "doomed", 5)
    words = (Status.ENCODER_PID, Status.STANDBY_PID)
    assert wait_for(lambda: all(rec._stream.status(w) != 0 for w in words))
    pids = [rec._stream.status(w) for w in words]
    t0 = time.monotonic()
    os.kill(rec.stats()["worker_pid"], signal.SIGKILL)
    assert wait_for(lambda: (rec.add_frame(frame(0)) or True) and rec.stats()["broken"] is not None, 5)
    rec.end_clip()

    def gone() -> bool:
        return all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE for pid in pids)

    assert [psutil.Process(pid).name() for pid in pids] == ["fake-ffmpeg"] * 2  # still there when the death was noticed
    assert wait_for(gone, CHILD_GRACE_S + 3)
    assert time.monotonic() - t0 <= CHILD_GRACE_S + 2.5  # noticed within the status-check interval, then the grace
    rec.close()
    assert meta(tmp_path / "v", "doomed")["broken"]
