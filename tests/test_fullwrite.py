"""Short writes are completed or reported (``envrec.formats.fullwrite``), and a checkpoint counts only once whole."""

from __future__ import annotations

import errno
import io
import os

import numpy as np
import pytest

from envrec.formats.fullwrite import pwrite_all, write_all, writev_all
from envrec.formats.ownfolder import OwnFolder
from envrec.formats.trace_format import checkpoint_names, trace_file_names
from envrec.workers.checkpoint import Checkpoint, CheckpointFile, read_checkpoint
from envrec.workers.spill import Spill, append_file

DATA = bytes(range(256)) * 40


@pytest.fixture
def short_writes(monkeypatch):
    """os.write, os.pwrite and os.writev put down at most 7 bytes a call (really: the rest is not written)."""
    real_write, real_pwrite, real_writev = os.write, os.pwrite, os.writev
    calls = {"n": 0}

    def count(k):
        calls["n"] += 1
        return k

    monkeypatch.setattr(os, "write", lambda fd, b: count(real_write(fd, memoryview(b)[:7])))
    monkeypatch.setattr(os, "pwrite", lambda fd, b, off: count(real_pwrite(fd, memoryview(b)[:7], off)))
    monkeypatch.setattr(os, "writev", lambda fd, bufs: count(real_writev(fd, [memoryview(bufs[0])[:7]])))
    return calls


def test_short_writes_are_completed(tmp_path, short_writes):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        write_all(fd, DATA)
        writev_all(fd, [DATA[:100], b"", np.frombuffer(DATA, np.uint8)[100:]])
        pwrite_all(fd, b"X" * 20, 5)
    finally:
        os.close(fd)
    expected = bytearray(DATA + DATA)
    expected[5:25] = b"X" * 20
    assert path.read_bytes() == expected
    assert short_writes["n"] > 2 * len(DATA) // 7  # they really were cut short


@pytest.mark.parametrize("call", ["write", "pwrite", "writev"])
def test_a_write_that_makes_no_progress_fails_loudly(tmp_path, monkeypatch, call):
    real = getattr(os, call)
    done = {"n": 0}

    def once_then_nothing(fd, b, *off):
        done["n"] += 1
        if done["n"] > 1:
            return 0
        return real(fd, [memoryview(b[0])[:3]]) if call == "writev" else real(fd, memoryview(b)[:3], *off)

    monkeypatch.setattr(os, call, once_then_nothing)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="wrote nothing after 3 of 10 bytes") as err:
            {"write": lambda: write_all(fd, b"0123456789"), "pwrite": lambda: pwrite_all(fd, b"0123456789", 0),
             "writev": lambda: writev_all(fd, [b"0123456789"])}[call]()
    finally:
        os.close(fd)
    assert err.value.errno == errno.EIO


def test_spills_complete_short_writes(tmp_path, short_writes, monkeypatch):
    s = Spill(str(tmp_path / "spill"))
    s.write(DATA)
    s.flush()
    assert (tmp_path / "spill").read_bytes() == DATA and s.tell() == len(DATA)
    src = os.open(tmp_path / "spill", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT)
    try:
        def unsupported(*a):
            raise OSError(errno.EXDEV, "cross-device")

        monkeypatch.setattr(os, "copy_file_range", unsupported)  # the pread/write fallback
        append_file(src, dst, len(DATA))
    finally:
        os.close(src)
        os.close(dst)
        s.close()
    assert (tmp_path / "dst").read_bytes() == DATA


def test_buffered_files_complete_short_writes():
    """Batch files, manifests and clip metadata are written through io.BufferedWriter, which writes the rest."""

    class Short(io.RawIOBase):
        def __init__(self):
            self.out = bytearray()

        def writable(self):
            return True

        def write(self, b):
            self.out += bytes(b[:7])
            return min(7, len(b))

    raw = Short()
    f = io.BufferedWriter(raw, buffer_size=64)
    f.write(DATA[:50])
    f.write(DATA)  # larger than the buffer: written through
    f.flush()
    assert bytes(raw.out) == DATA[:50] + DATA


def _cp(cursor: int, **kw) -> Checkpoint:
    doc = {"cursor": cursor, "records": cursor, "steps_total": 0, "orphan_steps": 0, "episodes_written": 0, "pending": None,
           "batch": None, "episode_open": False, "ep": {"options": "x" * kw.pop("pad", 0)}, "arrays": [], "jsons": [],
           "spills": []}
    return Checkpoint(**{**doc, **kw})


def test_a_checkpoint_counts_only_once_whole(tmp_path, monkeypatch):
    folder, prefix = str(tmp_path), "p"
    a, b = (tmp_path / n for n in checkpoint_names(prefix))
    assert read_checkpoint(folder, prefix) is None
    own = OwnFolder(folder, trace_file_names(prefix))
    cpf = CheckpointFile(own, prefix)
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, off: (_ for _ in ()).throw(OSError(errno.EIO, "injected")))
    with pytest.raises(OSError):
        cpf.write(_cp(100))  # the very first one fails: an empty slot file
    assert a.exists() and a.read_bytes() == b"" and read_checkpoint(folder, prefix) is None  # absent: nothing released
    monkeypatch.setattr(os, "pwrite", real)
    cpf.write(_cp(100))
    cpf.write(_cp(200, pad=5000))  # larger than a page: still in place, in the other slot
    assert read_checkpoint(folder, prefix).checkpoint.cursor == 200
    # The next one goes over the older slot (a); cut short by a failure after 10 bytes, b still counts.
    monkeypatch.setattr(os, "pwrite", lambda fd, data, off: real(fd, memoryview(data)[:10], off) if off == 0 else 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cpf.write(_cp(300))
    monkeypatch.setattr(os, "pwrite", real)
    found = read_checkpoint(folder, prefix)
    assert found.checkpoint.cursor == 200 and found.slot == 1
    cpf.close()
    # A successor numbers on and never writes over the newest whole one.
    succ = CheckpointFile(own, prefix)
    succ.continue_after(found)
    b_before = b.read_bytes()
    succ.write(_cp(250))
    assert b.read_bytes() == b_before and read_checkpoint(folder, prefix).checkpoint.cursor == 250
    # Torn anywhere (a byte flipped in the header or the document): that slot does not count.
    for pos in (3, 12, 40, len(a.read_bytes()) - 2):
        good = a.read_bytes()
        a.write_bytes(good[:pos] + bytes([good[pos] ^ 1]) + good[pos + 1 :])
        assert read_checkpoint(folder, prefix).checkpoint.cursor == 200
        a.write_bytes(good)
    succ.discard()
    own.close()
    assert not a.exists() and not b.exists()


def test_a_checkpoint_of_another_version_is_refused(tmp_path):
    with OwnFolder(str(tmp_path), trace_file_names("p")) as own:
        cpf = CheckpointFile(own, "p")
        cpf.write(_cp(1, version=99))
        cpf.close()
    with pytest.raises(ValueError, match="version 99"):
        read_checkpoint(str(tmp_path), "p")


def test_a_vmsplice_into_ffmpegs_pipe_that_moves_nothing_fails_loudly(monkeypatch):
    from envrec.workers import pipe_splice

    if not pipe_splice.available():  # Linux has it: under CI=true its absence fails
        if os.environ.get("CI") == "true":
            pytest.fail("vmsplice is not available on this machine")
        pytest.skip("no vmsplice here")
    monkeypatch.setattr(pipe_splice, "_vmsplice", lambda *a: 0)
    r, w = os.pipe()
    try:
        with pytest.raises(OSError, match="moved nothing") as err:
            pipe_splice.splice_all(w, pipe_splice.iovec_of(memoryview(bytearray(b"frame"))), lambda k: None)
    finally:
        os.close(r)
        os.close(w)
    assert err.value.errno == errno.EIO
