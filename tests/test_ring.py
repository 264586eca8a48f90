"""The shared-memory ring on its own: layout, wrap-around, backpressure, limits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envrec.contract import shm
from envrec.contract.ring import ConsumerGone, RingWriter, record_size
from envrec.contract.ring_reader import RingReader
from envrec.errors import RecordTooLargeError, SharedMemoryError


@pytest.fixture
def ring():
    w = RingWriter(8192)
    r = RingReader(w.spec)
    yield w, r
    r.close()
    w.close()


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
