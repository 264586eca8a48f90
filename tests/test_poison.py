"""Poison records: no info breaks a step, and a record that makes the serializer fail every time costs
that one record (skipped by a successor, counted as ``records_poisoned``, named in the manifest)."""

from __future__ import annotations

import itertools
import json
import pickle
import threading
import time

import numpy as np
import pytest
from gymnasium import spaces

import envrec
from envrec.formats.infos import MAX_INFO_DEPTH, Unrepresentable
from envrec.record import recorder as recorder_module

pytestmark = pytest.mark.timeout(120)

STEPS = 60
POISON_AT = 25  # the step whose info is poison


def _cyclic() -> dict:
    d: dict = {"a": 1}
    d["self"] = d
    return d


def _self_list_twice() -> dict:
    items: list = [1]
    items.append(items)
    return {"l": items, "t": (items, items)}


def _deep(levels: int) -> list:
    root: list = []
    cur = root
    for _ in range(levels):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    return root


STRANGE_INFOS = {
    "contains itself": lambda: {"x": _cyclic()},
    "a list inside itself, twice": lambda: _self_list_twice(),
    "a generator": lambda: {"g": (i for i in range(3))},
    "nested 100,000 levels": lambda: {"deep": _deep(100_000)},
    "a lock, a file, an iterator": lambda: {"lock": threading.Lock(), "file": open(__file__), "it": itertools.count()},
    "a repr that raises": lambda: {"bad": BadRepr()},
    "a numpy array of generators": lambda: {"a": np.array([(i for i in ()), 1], dtype=object)},
}


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _record(folder, info_at_poison, **options) -> envrec.TraceRecorder:
    rec = envrec.TraceRecorder(folder, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2), **options)
    obs = np.zeros(3, np.float32)
    rec.add_reset(obs, {})
    for t in range(STEPS):
        rec.add_step(t % 2, obs, float(t), False, False, info_at_poison() if t == POISON_AT else {"t": t})
    return rec


@pytest.mark.parametrize("name", list(STRANGE_INFOS))
def test_no_info_breaks_a_step_or_the_serializer(tmp_path, name):
    rec = _record(tmp_path, STRANGE_INFOS[name])
    rec.close()
    stats = rec.stats()
    assert stats["restarts"] == 0 and stats["broken"] is None and stats["records_poisoned"] == 0
    [ep] = envrec.TraceReader(tmp_path)
    assert ep.length == STEPS
    infos = ep.infos[1:]
    assert [i["t"] for k, i in enumerate(infos) if k != POISON_AT] == [t for t in range(STEPS) if t != POISON_AT]
    stored = json.dumps(infos[POISON_AT], default=repr)
    assert "Unrepresentable" in stored or "__envrec_error__" in stored


def test_what_cannot_travel_becomes_unrepresentable_and_the_rest_stays():
    from envrec.formats.infos import decode_json, encode_json, pack_info, unpack_info

    out = decode_json(json.loads(json.dumps(encode_json(unpack_info(pack_info(
        {"x": _cyclic(), "g": (i for i in ()), "deep": _deep(MAX_INFO_DEPTH + 10), "ok": [1, 2.5, "s"]}))))))
    assert out["ok"] == [1, 2.5, "s"] and out["x"]["a"] == 1
    assert isinstance(out["x"]["self"], Unrepresentable) and "holds itself" in out["x"]["self"].repr
    assert isinstance(out["g"], Unrepresentable) and out["g"].type == "builtins.generator"
    level, kept = out["deep"], 1  # the info dict itself is the first level
    while isinstance(level, list):
        level, kept = level[0], kept + 1
    assert isinstance(level, Unrepresentable) and "deeper than" in level.repr and kept == MAX_INFO_DEPTH


@pytest.mark.xdist_group("serial")
def test_a_record_that_fails_every_serializer_costs_that_record_only(tmp_path, monkeypatch):
    """The info's bytes are made so the worker cannot store them (a cycle its JSON encoder refuses),
    past the env side's checks: the record travels the real ring to real serializers."""
    cyclic = pickle.dumps({"x": _cyclic()}, protocol=5)
    real = recorder_module.pack_info
    monkeypatch.setattr(recorder_module, "pack_info", lambda info: cyclic if info.get("poison") else real(info))
    t0 = time.monotonic()
    rec = _record(tmp_path, lambda: {"poison": True})
    rec.close()
    took = time.monotonic() - t0
    stats = rec.stats()
    assert stats["broken"] is None, stats["broken"]
    assert stats["records_poisoned"] == 1 and stats["restarts"] == 2  # failed once, failed again on it alone, skipped
    assert stats["records_lost"] == 0
    [ep] = envrec.TraceReader(tmp_path)
    assert ep.length == STEPS - 1  # every step but the poisoned one
    assert [i["t"] for i in ep.infos[1:]] == [t for t in range(STEPS) if t != POISON_AT]
    with open(rec.manifest_path) as f:
        manifest = json.load(f)
    assert manifest["counters"]["records_poisoned"] == 1
    [entry] = manifest["poisoned"]  # records number steps from 1
    assert entry["kind"] == "STEP" and entry["step"] == POISON_AT + 1 and "RecursionError" in entry["reason"], entry
    assert took < rec._stream.close_timeout_s


def test_two_poison_records_do_not_use_up_the_restarts(tmp_path, monkeypatch):
    cyclic = pickle.dumps({"x": _cyclic()}, protocol=5)
    real = recorder_module.pack_info
    monkeypatch.setattr(recorder_module, "pack_info", lambda info: cyclic if info.get("t") in (10, 40) else real(info))
    rec = envrec.TraceRecorder(tmp_path, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2), max_restarts=2)
    obs = np.zeros(3, np.float32)
    rec.add_reset(obs, {})
    for t in range(STEPS):
        rec.add_step(t % 2, obs, float(t), False, False, {"t": t})
        if t in (20, 50):
            time.sleep(1.0)  # the successors take over in between
    rec.close()
    stats = rec.stats()
    assert stats["broken"] is None and stats["records_poisoned"] == 2
    [ep] = envrec.TraceReader(tmp_path)
    assert ep.length == STEPS - 2
