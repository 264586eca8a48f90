"""A recorder used in a forked child says so (ClosedError, a RecordError) instead of losing its records; the child
never closes, or writes into, its parent's recording."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from gymnasium import spaces

import envrec
from envrec.supervision import closers

pytestmark = pytest.mark.timeout(60)


def _in_forked_child(rec: envrec.TraceRecorder, obs: np.ndarray) -> dict:
    """What a forked child sees when it uses its parent's recorder (run in the child, reported by pipe)."""
    report: dict = {}
    for call in ("add_step", "add_reset"):
        try:
            if call == "add_step":
                rec.add_step(0, obs, 1.0, False, False, {})
            else:
                rec.add_reset(obs, {})
            report[call] = "recorded"
        except envrec.RecordError as exc:
            report[call] = f"{type(exc).__name__}: {exc}"
    rec.close()  # harmless: the recording is the parent's
    closers._close_forgotten()  # what interpreter exit runs
    report["closed_in_child"] = rec.closed
    return report


def test_a_forked_child_is_refused_and_leaves_the_parents_recording_alone(tmp_path):
    rec = envrec.TraceRecorder(tmp_path, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2))
    obs = np.zeros(3, np.float32)
    rec.add_reset(obs, {})
    for _ in range(10):
        rec.add_step(1, obs, 1.0, False, False, {})
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's (pytest's) exit handlers
        try:
            os.write(w, json.dumps(_in_forked_child(rec, obs)).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        report = json.loads(f.read())
    assert os.waitpid(pid, 0)[1] == 0
    for call in ("add_step", "add_reset"):
        assert report[call].startswith("ClosedError: ") and "is a fork of it" in report[call], report
        assert str(os.getpid()) in report[call], report
    assert report["closed_in_child"] is False
    for _ in range(10):
        rec.add_step(1, obs, 1.0, False, False, {})
    rec.close()
    [ep] = envrec.TraceReader(tmp_path)
    assert ep.length == 20 and ep.ended_by == "close"
    assert rec.stats()["records_sent"] == 21 and rec.stats()["restarts"] == 0
