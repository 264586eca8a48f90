"""The frame ring's pacing (``RingWriter.set_pacing``): past half full, each record waits a little for the
consumer's next release, growing to ``pace_s`` at full, instead of not at all until the ring is full."""

from __future__ import annotations

import threading
import time

import numpy as np
import psutil
import pytest

import envrec
from envrec.contract.ring import PACE_FROM, RingWriter, record_size
from envrec.errors import ConfigError
from envrec.record.video_recorder import FRAME_PACE_S

from .support.waiting import wait_for

RECORD = record_size([1000])  # 1032 bytes: 7 fit in 8192, the 4th ends past half
PACE_S = 0.05


def _write_timed(w: RingWriter, count: int) -> list[float]:
    took = []
    for i in range(w.records, w.records + count):
        t0 = time.monotonic()
        assert w.write(1, 0, i, [bytes([i]) * 1000])
        took.append(time.monotonic() - t0)
    return took


def _share(end: int, capacity: int = 8192) -> float:
    """The pace's share for a record that ends ``end`` bytes into an unread ring."""
    return max(0.0, (end / capacity - PACE_FROM) / (1 - PACE_FROM))


def test_past_half_full_each_record_waits_its_share_of_the_pace_and_the_ring_still_fills(ring):
    w, r = ring
    w.set_pacing(PACE_S)
    _write_timed(w, 3)
    assert w.blocked_s == 0.0  # under half full: no wait
    took = [0.0, 0.0, 0.0, *_write_timed(w, 8192 // RECORD - 3)]
    expected = [PACE_S * _share((i + 1) * RECORD) for i in range(len(took))]
    assert expected[:3] == [0.0, 0.0, 0.0] and all(e > 0 for e in expected[3:])
    for t, e in zip(took[3:], expected[3:], strict=True):
        assert t >= e, (took, expected)  # each waited at least its share (poll rounds its timeout up)
    assert w.blocked_s >= sum(expected) * 0.999  # the clock's rounding
    assert w.used() == 7 * RECORD  # pacing only delays: every record went in
    for i in range(7):
        assert bytes(r.next(1.0).sections[0]) == bytes([i]) * 1000
    r.release()


def test_a_paced_record_stops_waiting_at_the_consumers_next_release(ring):
    w, r = ring
    w.set_pacing(30.0)  # a share of 30 s would fail the test: only the release can end the wait
    _write_timed(w, 4)  # the 4th ends just past half: 0.23 s

    def release_later():
        time.sleep(0.2)
        r.next(1.0)
        r.release()

    t = threading.Thread(target=release_later)
    t.start()
    t0 = time.monotonic()
    assert w.write(1, 0, 4, [b"y" * 1000])  # ends at 5/8 of the ring: its share is 7.8 s
    waited = time.monotonic() - t0
    t.join(5)
    assert 0.15 <= waited < 5.0
    assert bytes(r.next(1.0).sections[0]) == bytes([1]) * 1000


@pytest.mark.parametrize("how", ["off", "drop", "closing"])
def test_no_pacing_when_off_when_dropping_or_while_being_closed(ring, how):
    w, _ = ring
    if how != "off":
        w.set_pacing(30.0)
    if how == "drop":
        w.set_policy(block=False)
    if how == "closing":
        w.refuse_waits(True)
    took = _write_timed(w, 7)
    assert max(took) < 1.0 and w.blocked_s < 1.0


def test_pacing_turned_off_again_writes_without_waiting(ring):
    w, _ = ring
    w.set_pacing(30.0)
    _write_timed(w, 3)
    w.set_pacing(0)
    assert max(_write_timed(w, 4)) < 1.0


def test_a_negative_pace_is_refused(ring):
    w, _ = ring
    with pytest.raises(ConfigError, match="pace_s must be >= 0"):
        w.set_pacing(-0.1)


SIZE = (96, 128)
FRAME_BYTES = SIZE[0] * SIZE[1] * 3
RING_BYTES = 1 << 20  # 28 frames: half full after 14


def test_a_video_recorder_whose_encoder_is_away_makes_the_env_wait_a_little_per_frame_before_the_ring_is_full(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25, ring_bytes=RING_BYTES)
    try:
        rec.start_clip("c0")
        frames = RING_BYTES // FRAME_BYTES - 2  # the ring never full
        half = int(RING_BYTES * PACE_FROM) // FRAME_BYTES - 1  # frames that end before half (records are larger)
        worker = psutil.Process(rec.stats()["worker_pid"])
        worker.suspend()
        try:
            for i in range(half):
                rec.add_frame(np.full((*SIZE, 3), i, np.uint8), i)
            assert rec.stats()["blocked_s"] == 0.0
            for i in range(half, frames):
                rec.add_frame(np.full((*SIZE, 3), i, np.uint8), i)
        finally:
            worker.resume()
        # every frame past half waited its share of the pace at least (frame records are a little larger)
        expected = FRAME_PACE_S * sum(_share((i + 1) * FRAME_BYTES, RING_BYTES) for i in range(half, frames))
        assert expected > 0.05 and rec.stats()["blocked_s"] >= expected * 0.999
        rec.end_clip()
    finally:
        rec.close()
    assert wait_for(lambda: not psutil.pid_exists(worker.pid) or worker.status() == psutil.STATUS_ZOMBIE)
    stats = rec.stats()
    assert stats["frames_written"] == frames and stats["frames_dropped"] == 0
