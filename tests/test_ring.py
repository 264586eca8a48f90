"""The shared-memory ring on its own: layout, wrap-around, backpressure, limits."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envrec.contract import reservation, shm
from envrec.contract.ring import HEADER_BYTES, ConsumerGone, RingWriter, record_size
from envrec.contract.ring_reader import RingReader
from envrec.errors import RecordTooLargeError, SharedMemoryError

from .support.waiting import wait_for


def _payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_records_round_trip_with_header_fields(ring):
    w, r = ring
    parts = [b"abc", memoryview(np.arange(5, dtype=np.float32)).cast("B"), b""]
    assert w.write(7, 3, 11, parts)
    rec = r.next(1.0)
    assert (rec.kind, rec.episode, rec.step) == (7, 3, 11)
    assert [bytes(p) for p in rec.sections] == [b"abc", np.arange(5, dtype=np.float32).tobytes(), b""]
    r.release()
    assert r.next(0.01) is None


def test_memfd_name_is_short_prefixed_and_carries_the_pid(ring):
    w, _ = ring
    assert w.name.startswith(f"envrec_{os.getpid()}_")
    assert len(w.name) <= 30
    assert w.name in shm.list_memfds()


def test_records_wrap_with_padding_and_never_split(ring):
    w, r = ring
    sizes = [3000, 3000, 3000, 3000, 3000, 3000]  # the third cannot fit the tail: padded to offset 0
    for i, n in enumerate(sizes):
        assert w.write(1, 0, i, [_payload(n, i)])
        rec = r.next(1.0)
        assert rec.step == i and bytes(rec.sections[0]) == _payload(n, i)
        r.release()


def test_tail_shorter_than_a_record_header_is_skipped(ring):
    w, r = ring
    assert record_size([8152]) == 8184  # leaves an 8-byte tail, too short for a PAD header
    assert w.write(1, 0, 0, [b"a" * 8152])
    assert bytes(r.next(1.0).sections[0]) == b"a" * 8152
    r.release()
    assert w.write(1, 0, 1, [b"b" * 100])
    rec = r.next(1.0)
    assert rec.step == 1 and bytes(rec.sections[0]) == b"b" * 100
    r.release()


def test_record_larger_than_ring_is_rejected_and_ring_still_works(ring):
    w, r = ring
    with pytest.raises(RecordTooLargeError, match="ring_bytes"):
        w.write(1, 0, 0, [b"x" * 9000])
    assert w.write(1, 0, 1, [b"ok"])
    rec = r.next(1.0)
    assert bytes(rec.sections[0]) == b"ok" and rec.step == 1
    r.release()


def test_drop_policy_returns_false_when_full_and_loses_nothing_already_in(ring):
    w, r = ring
    n_fit = 0
    w.set_policy(block=False)
    while w.write(1, 0, n_fit, [_payload(1000, n_fit)]):
        n_fit += 1
    assert n_fit == 8192 // record_size([1000])
    for i in range(n_fit):
        rec = r.next(1.0)
        assert bytes(rec.sections[0]) == _payload(1000, i)
    r.release()
    assert w.write(1, 0, 99, [b"again"])
    assert bytes(r.next(1.0).sections[0]) == b"again"
    r.release()


def fill(w):
    w.set_policy(block=False)
    while w.write(1, 0, 0, [b"x" * 1000]):
        pass


def test_block_with_timeout_gives_up_after_the_timeout(ring):
    w, _ = ring
    fill(w)
    w.set_policy(block=True, timeout_s=0.2)
    t0 = time.monotonic()
    assert not w.write(1, 0, 0, [b"x" * 1000])
    waited = time.monotonic() - t0
    assert 0.18 <= waited < 2.0
    assert w.blocked_s >= 0.18


@pytest.mark.xdist_group("serial")
def test_blocked_writer_wakes_when_the_consumer_releases(ring):
    w, r = ring
    fill(w)

    def consume_later():
        time.sleep(0.2)
        r.next(1.0)
        r.release()

    t = threading.Thread(target=consume_later)
    t.start()
    w.set_policy(block=True, timeout_s=5.0)
    t0 = time.monotonic()
    assert w.write(1, 0, 1, [b"y" * 1000])
    t.join(5)
    assert time.monotonic() - t0 < 2.0


@pytest.mark.xdist_group("serial")
def test_blocked_writer_raises_when_consumer_is_gone(ring):
    w, _ = ring
    fill(w)
    w.set_policy(block=True, alive=lambda: False)
    t0 = time.monotonic()
    with pytest.raises(ConsumerGone):
        w.write(1, 0, 0, [b"x" * 1000])
    assert time.monotonic() - t0 < 1.0


def test_creation_fails_clearly_when_memory_is_short(monkeypatch):
    monkeypatch.setattr(shm, "memory_available", lambda: 1 << 20)
    with pytest.raises(SharedMemoryError, match=r"64\.0 MiB.*only 1\.0 MiB of memory is available"):
        RingWriter(64 << 20)


KIB64 = 64 << 10


def _allocated(w: RingWriter) -> int:
    """Bytes of the ring's memfd that have pages (reserved or touched)."""
    return os.fstat(w._shm.fd).st_blocks * 512


def _reserving_in_64k_chunks(monkeypatch, fail_at: int | None = None) -> tuple[list, threading.Event]:
    """Reserve 64 KiB up front and 64 KiB a chunk; the thread's chunks wait for the returned event, and the
    ``fail_at``th reservation (the constructor's is the 1st) fails with ENOMEM."""
    for name in ("RESERVE_FIRST_BYTES", "RESERVE_CHUNK_BYTES", "RESERVE_AHEAD_BYTES"):
        monkeypatch.setattr(reservation, name, KIB64)
    monkeypatch.setattr("envrec.contract.ring.RESERVE_FIRST_BYTES", KIB64)
    real, calls, go = shm.Memfd.reserve, [], threading.Event()

    def reserve(self, offset, length):
        calls.append((offset, length))
        if len(calls) > 1:
            assert go.wait(10)
        if len(calls) == fail_at:
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        real(self, offset, length)

    monkeypatch.setattr(shm.Memfd, "reserve", reserve)
    return calls, go


def _write_and_read(w: RingWriter, r: RingReader, count: int, sizes: list[int]) -> None:
    """``count`` records of the given sizes in turn, each read back intact right after it was written."""
    for i in range(count):
        payload = _payload(sizes[i % len(sizes)], i)
        assert w.write(1, 0, i, [payload])
        rec = r.next(1.0)
        assert rec.step == i and bytes(rec.sections[0]) == payload
        r.release()


def test_the_producer_writes_only_into_reserved_memory_while_the_rest_is_reserved(monkeypatch):
    calls, go = _reserving_in_64k_chunks(monkeypatch)
    w = RingWriter(1 << 20)
    r = RingReader(w.spec)
    try:
        w.set_policy(block=False)
        written = 0
        while written < 5000 and w.write(1, 0, written, [_payload(1000, written)]):
            r.next(1.0)
            r.release()
            written += 1
        # the consumer released every record, yet the producer stops at the end of the first reservation
        assert (KIB64 - 2 * 1032) // 1032 <= written <= KIB64 // 1032
        assert _allocated(w) <= HEADER_BYTES + KIB64 + 4096 and calls[0] == (0, HEADER_BYTES + KIB64)
        w.set_policy(block=True, timeout_s=10)
        go.set()  # the reservation goes on: the producer waits for it, not for the consumer
        _write_and_read(w, r, 3 * 1024, [1000, 3000, 500])  # ~5 laps
        assert _allocated(w) >= HEADER_BYTES + (1 << 20)
        assert [c[1] for c in calls[1:]] == [KIB64] * 15  # the rest, a chunk at a time
    finally:
        go.set()
        r.close()
        w.close()


def test_a_ring_whose_reservation_fails_midway_records_in_what_it_got(monkeypatch, caplog):
    calls, go = _reserving_in_64k_chunks(monkeypatch, fail_at=3)  # 64 KiB up front, a chunk, then ENOMEM
    go.set()
    w = RingWriter(1 << 20)
    r = RingReader(w.spec)
    try:
        w.set_policy(block=True, timeout_s=10)
        with caplog.at_level(logging.WARNING, "envrec"):
            _write_and_read(w, r, 2000, [1000, 3000, 7, 500])  # ~20 laps of the 128 KiB it got
        assert w._reservation._thread.join(5) is None and len(calls) == 3
        assert any("could reserve only 128.0 KiB of a 1.0 MiB ring (Cannot allocate memory)" in m for m in caplog.messages)
        assert _allocated(w) <= HEADER_BYTES + 2 * KIB64 + 4096  # nothing past it was touched, by either side
        with pytest.raises(RecordTooLargeError, match="ring_bytes"):
            w.write(1, 0, 0, [b"x" * (2 * KIB64)])
        _write_and_read(w, r, 10, [KIB64 - 100])  # half of what it got still fits, every lap (as in any ring)
    finally:
        r.close()
        w.close()


def test_a_short_recording_reserves_only_what_it_used_and_a_long_one_all():
    w = RingWriter(256 << 20)
    r = RingReader(w.spec)
    try:
        w.set_policy(block=True, timeout_s=10)
        _write_and_read(w, r, 100, [20_000])  # 2 MB: within the first reservation
        time.sleep(0.2)  # what the thread would reserve unasked, it has by now
        assert _allocated(w) <= HEADER_BYTES + reservation.RESERVE_FIRST_BYTES + reservation.RESERVE_CHUNK_BYTES
        _write_and_read(w, r, 300, [1 << 20])  # 300 MiB: more than a lap
        assert wait_for(lambda: _allocated(w) >= HEADER_BYTES + (256 << 20), 5)
        assert w._reservation.reserved == reservation.UNBOUNDED
    finally:
        r.close()
        w.close()


def test_rings_are_memfds_no_file_in_dev_shm(ring):
    w, _ = ring
    assert w.name in shm.list_memfds()  # held by this process
    assert not os.path.exists(f"/dev/shm/{w.name}")  # nothing a crash could leave behind


def test_sweep_removes_dev_shm_files_of_dead_owners_only(ring):
    w, _ = ring
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    name = f"envrec_{dead.pid}_deadbeef"
    fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    swept = shm.sweep_orphans()
    assert name in swept and name not in shm.list_memfds()
    assert w.name in shm.list_memfds()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 700), min_size=0, max_size=4), st.integers(1, 6)),
        min_size=1,
        max_size=80,
    )
)
def test_property_random_sizes_wrap_many_times_without_corruption(ring, batches):
    """Produce records of random sizes and consume them in random-sized bursts: all arrive intact, in order."""
    w, r = ring
    w.set_policy(block=False)
    sent, received = [], []
    for seq, (section_sizes, burst) in enumerate(batches):
        parts = [_payload(n, seq * 7 + k) for k, n in enumerate(section_sizes)]
        while not w.write(2, seq, seq, parts):
            rec = r.next(1.0)
            assert rec is not None
            received.append((rec.step, [bytes(p) for p in rec.sections]))
            r.release()
        sent.append((seq, parts))
        for _ in range(burst):
            rec = r.poll()
            if rec is None:
                break
            received.append((rec.step, [bytes(p) for p in rec.sections]))
            r.release()
    while (rec := r.poll()) is not None:
        received.append((rec.step, [bytes(p) for p in rec.sections]))
        r.release()
    assert received == sent
