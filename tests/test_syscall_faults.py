"""The syscall fault battery: EIO and ENOSPC injected by strace into the serializer's and the encoder's
openat, write, pwrite, fsync and rename calls, once and for good (see ``syscall_faults``).

Every case asserts what survived (each batch the manifest names reads back with
its CRC; a one-off fault loses no step; the clips after a fault are whole),
what was reported (the OS error in the restart's log line, in the stats'
``broken`` and the manifest's ``error``, or in the clip's metadata), that the
env never saw an exception, and that nothing was left: no temporary file
(also the ``no_leaks`` fixture), no checkpoint, no batch file the manifest does
not name, no worker or strace process.
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest
from gymnasium import spaces

import envrec
from envrec.formats.trace_format import manifest_name, read_manifest
from envrec.supervision.launcher import PYTHON_ENV_VAR

from .support.episodes import feed
from .support.syscall_faults import Fault, injected, need_strace, trace_paths, tracers, video_paths, wrapper
from .support.video import decode, meta
from .support.waiting import wait_for

pytestmark = pytest.mark.slow  # strace, and a battery whose paths the development tier's fault tests take

OBS = spaces.Box(0, 255, (16, 16, 3), np.uint8)
ACT = spaces.Discrete(2)
PREFIX = "t"
EPISODES, STEPS = 6, 10
BATCH_PER_EPISODE = 9_000  # an episode (8.6 KB of rows) is never cut, its batch (9.5 KB with its JSON) committed at its end
CLIPS = ["c0", "c1", "c2"]
ERRNO_TEXT = {"EIO": "Input/output error", "ENOSPC": "No space left on device"}

S, E = "serializer", "encoder"
ONCE = [
    Fault(S, "pwrite64", "checkpoint", 1, "EIO"),  # the very first checkpoint (issue 21)
    Fault(S, "pwrite64", "checkpoint", 1, "ENOSPC"),
    Fault(S, "pwrite64", "checkpoint", 4, "EIO"),
    Fault(S, "pwrite64", "spill", 1, "ENOSPC"),  # a checkpoint inside an episode puts its spills on disk
    Fault(S, "openat", "checkpoint", 1, "ENOSPC"),
    Fault(S, "openat", "manifest", 1, "EIO"),  # the first manifest, before the worker is ready
    Fault(S, "openat", "manifest", 3, "ENOSPC"),
    Fault(S, "openat", "batch", 1, "EIO"),
    Fault(S, "write", "batch", 1, "ENOSPC"),
    Fault(S, "write", "batch", 4, "EIO"),
    Fault(S, "write", "manifest", 2, "EIO"),
    Fault(S, "fsync", "batch", 1, "EIO"),
    Fault(S, "fsync", "manifest", 3, "ENOSPC"),
    Fault(S, "fsync", "folder", 2, "EIO"),
    # the serializer's openat and renameat are relative to its folder opened once: matched by the bare names of
    # the row's role (see trace_paths), counted as they were by path
    Fault(S, "renameat", "batch", 1, "ENOSPC"),
    Fault(S, "renameat", "batch", 2, "EIO"),  # the .bin is in place already, the .json is not
    Fault(S, "renameat", "manifest", 2, "ENOSPC"),
    # the encoder's openat and renameat are relative to its folder opened once: matched by that descriptor, the
    # folder's own open (at its start) the 1st openat; per clip the video's (for its ffmpeg), the remuxed video's,
    # then the metadata's
    Fault(E, "openat", "folder", 2, "EIO"),  # the first video, opened for its ffmpeg
    Fault(E, "openat", "folder", 3, "ENOSPC"),  # the first remuxed video (fsynced before its rename)
    Fault(E, "openat", "folder", 4, "EIO"),  # the first metadata
    Fault(E, "write", "meta", 2, "ENOSPC"),
    Fault(E, "fsync", "meta", 1, "EIO"),
    Fault(E, "renameat", "folder", 2, "ENOSPC"),  # the first metadata
    Fault(E, "renameat", "folder", 1, "EIO"),  # the remuxed file over the fragmented one
]
PERSISTENT = [
    Fault(S, "pwrite64", "checkpoint", 1, "ENOSPC", True),
    Fault(S, "openat", "manifest", 1, "ENOSPC", True),  # no serializer ever starts
    Fault(S, "openat", "batch", 1, "EIO", True),
    Fault(S, "write", "batch", 1, "EIO", True),
    Fault(S, "fsync", "folder", 1, "EIO", True),
    Fault(S, "renameat", "manifest", 2, "ENOSPC", True),
    Fault(E, "openat", "folder", 3, "ENOSPC", True),
    Fault(E, "write", "meta", 1, "EIO", True),
    Fault(E, "fsync", "video", 1, "ENOSPC", True),
    Fault(E, "renameat", "folder", 2, "EIO", True),
]
BATTERY = ONCE + PERSISTENT


@pytest.fixture
def case_dir(tmp_path):
    """The output folder (symlinks resolved: strace matches a descriptor by its real path) and the case's own."""
    need_strace()
    out = tmp_path / "out"
    out.mkdir()
    return os.path.realpath(out), tmp_path / "strace"


def _under_strace(monkeypatch, where, fault, paths):
    where.mkdir()
    monkeypatch.setenv(PYTHON_ENV_VAR, str(wrapper(where, fault, paths[fault.target])))


def _record_trace(rec) -> None:
    """EPISODES episodes of STEPS steps; a pause inside the fourth makes an idle checkpoint fall in it."""

    def pause(ep: int, t: int) -> None:
        if ep == 3 and t == 4:  # the serializer has taken all so far, then idles for a while
            wait_for(lambda: rec._stream.check() or rec.backlog_bytes == 0 or rec.broken is not None, 10)
            time.sleep(0.15)

    feed(rec, EPISODES, STEPS, during=pause)


def _no_leftovers(folder, where, named: set[str]) -> None:
    left = [n for n in os.listdir(folder) if n not in named]
    assert left == [], f"files nothing names: {left}"
    assert wait_for(lambda: not tracers(where), 5), "strace left running"


def _named_by(manifest) -> set[str]:
    return {manifest_name(PREFIX)} | {n for b in manifest["batches"] for n in (b["fn"], b["bin"])}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", [f for f in BATTERY if f.worker == S], ids=lambda f: f.id)
def test_serializer_syscall_fault(case_dir, monkeypatch, caplog, fault):
    folder, where = case_dir
    _under_strace(monkeypatch, where, fault, trace_paths(folder, PREFIX))
    rec = envrec.TraceRecorder(folder, OBS, ACT, batch_bytes=BATCH_PER_EPISODE, name_prefix=PREFIX, max_restarts=1)
    _record_trace(rec)  # raises nothing: the env never sees the fault
    if fault.persistent:
        assert wait_for(lambda: rec._stream.check() or rec.broken is not None, 20)
        _no_leftovers(folder, where, _named_by(read_manifest(rec.manifest_path)))  # already while the env goes on
    rec.close()
    monkeypatch.delenv(PYTHON_ENV_VAR)
    s = rec.stats()
    assert injected(where) == 1 if not fault.persistent else injected(where) >= 2
    head = read_manifest(rec.manifest_path)
    reader = envrec.TraceReader(folder) if head["batches"] else None  # (one with none raises, quoting the error)
    for b in head["batches"]:
        assert reader.check_batch(b) == []  # size and CRC of every batch named
    if fault.persistent:
        assert s["broken"] and ERRNO_TEXT[fault.error] in s["broken"]
        assert ERRNO_TEXT[fault.error] in head["error"]
        committed = sum(e.length + 1 for e in reader) if reader else 0
        assert s["records_lost"] + s["records_dropped"] == EPISODES * (STEPS + 1) - committed
        _no_leftovers(folder, where, _named_by(head))
        return
    else:
        assert s["restarts"] == 1 and s["broken"] is None
        handed_over = [r.message for r in caplog.records if "takes over its ring" in r.message]
        assert len(handed_over) == 1 and ERRNO_TEXT[fault.error] in handed_over[0]
        assert [e.seed for e in reader] == list(range(EPISODES))  # every episode, once, in order
        for e in reader:
            assert e.length == STEPS and e.complete and e.observations[1:, 0, 0, 0].tolist() == list(range(STEPS))
        assert s["steps_committed"] == EPISODES * STEPS and s["records_lost"] == 0 and s["records_dropped"] == 0
        assert reader.manifests[0]["complete"] and reader.manifests[0]["closed_cleanly"]
    _no_leftovers(folder, where, _named_by(head))


def _frame(i: int) -> np.ndarray:
    f = np.zeros((48, 64, 3), np.uint8)
    f[..., 1] = 200
    f[0, 0, 0] = i
    return f


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault", [f for f in BATTERY if f.worker == E], ids=lambda f: f.id)
def test_encoder_syscall_fault(case_dir, monkeypatch, fault):
    folder, where = case_dir
    _under_strace(monkeypatch, where, fault, video_paths(folder, CLIPS))
    rec = envrec.VideoRecorder(folder, fps=25, max_restarts=1)
    for name in CLIPS:  # one clip at a time: the fault falls in the first one its calls reach
        rec.start_clip(name)
        for i in range(10):
            rec.add_frame(_frame(i), i)
        rec.end_clip()
        done = os.path.join(folder, name + ".meta.json")
        assert wait_for(lambda p=done: os.path.exists(p) or (rec._stream.check() or rec._stream.broken is not None), 20)
    rec.close()
    monkeypatch.delenv(PYTHON_ENV_VAR)
    assert injected(where) == 1 if not fault.persistent else injected(where) >= 2
    metas = {c: meta(folder, c) for c in CLIPS}  # every clip has its metadata
    hit = []  # what each clip the fault reached says about it
    for c, m in metas.items():
        if m["broken"]:  # the fault broke the clip: the metadata says why
            hit.append(" ".join(str(m.get(k)) for k in ("reason", "stderr_tail")))
            continue
        # whole: every frame decodes (a failed remux keeps the fragmented video; a failed metadata write was retried)
        assert m["frames_written"] == 10 and len(decode(os.path.join(folder, c + ".mp4"), 64, 48)) == 10
        assert m["fragmented"] == ("remux_error" in m)
        retried = [m[k] for k in ("remux_error", "meta_retried", "video_open_retried") if k in m]
        if retried:
            hit.append(retried[0])
    if fault.persistent:
        assert len(hit) == len(CLIPS), metas  # every clip met the fault, and says so
    else:
        assert len(hit) == 1 and not [c for c in CLIPS if metas[c]["broken"]], metas  # nothing lost, the fault named
    assert ERRNO_TEXT[fault.error] in hit[0], metas
    _no_leftovers(folder, where, {c + ".meta.json" for c in CLIPS} | {m["path"] for m in metas.values() if m["path"]})


def test_without_strace_the_battery_fails_under_ci_and_skips_elsewhere(monkeypatch):
    from .support import syscall_faults

    monkeypatch.setattr(syscall_faults, "STRACE", None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="needs strace"):
        syscall_faults.need_strace()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="needs strace"):
        syscall_faults.need_strace()
    monkeypatch.setattr(syscall_faults, "STRACE", shutil.which("false"))  # present, but it cannot trace
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot trace here"):
        syscall_faults.need_strace()
