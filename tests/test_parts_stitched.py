"""Reading episodes written in parts: stitched into one ``Episode`` by ``TraceReader``, and what part keys may not say.

The recordings are envrec's own, rewritten into parts by ``support.parted``
(so every layout can be made: evicted heads, damaged middles, a live tail);
``test_parts_recorded.py`` reads parts the serializer wrote itself.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil

import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.errors import TraceError
from envrec.viewer.catalog import Catalog

from .support.episodes import record_cartpole
from .support.fuzz_mutants import fix_checksums
from .support.parted import evict_oldest, rewrite_in_parts

pytestmark = pytest.mark.timeout(120)

FIELDS = ("rewards", "terminations", "truncations")


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole") / "rec"
    record_cartpole(folder, 4, name_prefix="cp", batch_bytes=10**9)
    return str(folder)


@pytest.fixture
def parted(whole, tmp_path):
    folder = str(tmp_path / "parted")
    rewrite_in_parts(whole, folder, part_steps=5, per_batch=3)
    return folder


def _same(a, b) -> None:
    """Two episodes hold the same steps."""
    assert (a.length, a.episode_id, a.seed, a.options, a.ended_by, a.complete) == (b.length, b.episode_id, b.seed, b.options,
                                                                                   b.ended_by, b.complete)
    np.testing.assert_array_equal(a.observations, b.observations)
    np.testing.assert_array_equal(a.actions, b.actions)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert repr(a.infos) == repr(b.infos)
    assert a.total_reward == pytest.approx(b.total_reward)


def test_parts_stitch_into_the_episodes_written_whole(whole, parted):
    a, b = envrec.TraceReader(whole), envrec.TraceReader(parted)
    entries = b.recordings[0].batches
    assert any("head_part" in e for e in entries) and sum(e["len"] for e in entries) > len(a)
    assert len(a) == len(b) == 4
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        _same(x, y)
        _same(x, b[i])
        _same(x, b[i - len(b)])
        assert y.index == i and y.first_step == 0
        assert len(y.parts) == -(-x.length // 5) and sum(p.length for p in y.parts) == x.length
        assert [p.index for p in y.parts] == list(range(len(y.parts)))
        assert [p.first_step for p in y.parts] == list(range(0, x.length, 5))
        assert [p.continues for p in y.parts] == [True] * (len(y.parts) - 1) + [False]
        for p in y.parts:  # each names the batch file and record it came from
            doc = json.load(open(os.path.join(parted, p.batch)))
            assert doc["episodes"][p.record].get("part", {"index": 0})["index"] == p.index
    assert len(a[0].parts) == 1 and a[0].parts[0].batch == a.recordings[0].batches[0]["fn"]


def test_iter_parts_reads_a_long_episode_part_by_part(whole, parted):
    reader, ep = envrec.TraceReader(parted), envrec.TraceReader(whole)[0]
    parts = list(reader.iter_parts(0))
    assert len(parts) > 2 and all(len(p.parts) == 1 for p in parts)
    for before, after in itertools.pairwise(parts):
        np.testing.assert_array_equal(after.observations[0], before.observations[-1])  # row 0 repeats the last
        assert after.first_step == before.first_step + before.length
    for p in parts:
        k = p.first_step
        np.testing.assert_array_equal(p.observations, ep.observations[k : k + p.length + 1])
        np.testing.assert_array_equal(p.actions, ep.actions[k : k + p.length])
    with pytest.raises(IndexError):
        next(reader.iter_parts(4))


def test_evicted_first_parts_move_first_step_and_an_old_view_names_the_evicted_batch(whole, parted):
    reader = envrec.TraceReader(parted)
    before = len(reader)
    gone = reader.recordings[0].batches[0]["fn"]
    evict_oldest(parted, 2)  # part 0 and part 1 of episode 0
    with pytest.raises(TraceError, match=rf"batch {gone} .* was evicted .*refresh\(\)"):
        reader[0]
    with pytest.raises(TraceError, match="was evicted"):
        list(reader)
    reader.refresh()
    assert len(reader) == before
    ep, full = reader[0], envrec.TraceReader(whole)[0]
    assert ep.first_step == 10 and ep.length == full.length - 10 and ep.complete == full.complete
    np.testing.assert_array_equal(ep.observations, full.observations[10:])
    np.testing.assert_array_equal(ep.actions, full.actions[10:])
    assert repr(ep.infos) == repr(full.infos[10:]) and ep.ended_by == full.ended_by
    assert [p.index for p in ep.parts] == list(range(2, 2 + len(ep.parts)))


def test_a_damaged_middle_part_splits_the_episode(whole, parted):
    entries = envrec.TraceReader(parted).recordings[0].batches
    middle = entries[1]  # part 1 of episode 0: continued from batch 0, continued by batch 2
    assert middle["head_part"]["index"] == 1 and middle.get("continues")
    with open(os.path.join(parted, middle["bin"]), "ab") as f:  # a size the manifest does not say (seen unverified too)
        f.write(b"\xff")
    with pytest.raises(TraceError, match=middle["bin"]):
        list(envrec.TraceReader(parted))
    reader = envrec.TraceReader(parted, on_damaged="skip")
    assert [d.file for d in reader.damaged] == [middle["fn"]]
    full = envrec.TraceReader(whole)
    eps = list(reader)
    assert len(eps) == len(reader) == len(full) + 1  # episode 0 in two pieces
    head, tail = eps[0], eps[1]
    assert (head.episode_id, tail.episode_id) == (0, 0) and head.first_step == 0 and tail.first_step == 10
    assert head.length == 5 and head.ended_by is None and not head.complete and head.parts[-1].continues
    np.testing.assert_array_equal(tail.actions, full[0].actions[10:])
    assert tail.ended_by == full[0].ended_by
    for got, want in zip(eps[2:], list(full)[1:], strict=True):
        _same(got, want)
    _same(reader[1], tail)
    catalog = Catalog(parted)  # the viewer lists the two pieces, told apart by first_step
    rows = [(e["episode_id"], e["first_step"], e["length"]) for e in catalog.index()["episodes"]][:2]
    assert rows == [(0, 0, 5), (0, 10, tail.length)]
    assert catalog.episode("cp", 0, first_step=10)["series"]["observations"][0]["x"][0] == 10
    assert catalog.episode("cp", 0)["length"] == 5


def test_a_live_recording_shows_its_open_episode_and_refresh_sees_it_grow(whole, parted):
    path = os.path.join(parted, "cp.manifest.json")
    complete = json.load(open(path))
    cut = next(k for k, e in enumerate(complete["batches"]) if e.get("continues") and k >= 3)
    json.dump(dict(complete, batches=complete["batches"][: cut + 1], complete=False), open(path, "w"))
    reader = envrec.TraceReader(parted)
    last = reader[-1]
    assert last.ended_by is None and not last.complete and last.parts[-1].continues
    n, length = len(reader), last.length
    json.dump(complete, open(path, "w"))
    reader.refresh()
    assert reader[n - 1].length > length and reader[n - 1].episode_id == last.episode_id
    _same(reader[n - 1], envrec.TraceReader(whole)[n - 1])


def test_an_episode_whose_last_part_says_it_continues_ends_as_its_last_step_says(whole, tmp_path):
    """Ended right after a cut (all its steps committed): the next episode, or the recording's end, settles it."""
    folder = str(tmp_path / "dangling")
    manifest = rewrite_in_parts(whole, folder, part_steps=5, per_batch=3, dangling=True)
    batches = manifest["batches"]
    assert any(b.get("continues") and "head_part" not in a for b, a in itertools.pairwise(batches))  # a new episode next
    full, reader = envrec.TraceReader(whole), envrec.TraceReader(folder)
    for a, b in zip(full, reader, strict=True):
        assert b.parts[-1].continues
        _same(a, b)  # terminated, complete, as written whole
    assert [e.ended_by for e in reader] == [e.ended_by for e in full] == ["terminated"] * 4
    path = os.path.join(folder, "cp.manifest.json")
    json.dump(dict(json.load(open(path)), complete=False), open(path, "w"))  # still recording: the last one may go on
    reader.refresh()
    last = reader[-1]
    assert last.ended_by is None and not last.complete and reader[-2].ended_by == "terminated"
    catalog = Catalog(folder)
    assert [e["ended_by"] for e in catalog.index()["episodes"]] == ["terminated"] * 3 + [None]
    assert catalog.episode("cp", 1)["complete"] and catalog.episode("cp", 3)["ended_by"] is None


def test_dict_tuple_and_text_fields_stitch_leaf_by_leaf(tmp_path):
    obs = S.Dict({"pos": S.Box(-1, 1, (3,), np.float32), "name": S.Text(6)})
    act = S.Tuple((S.Discrete(3), S.MultiDiscrete([2, 5])))
    rec = envrec.TraceRecorder(tmp_path / "whole", obs, act, name_prefix="sp")
    obs.seed(1)
    act.seed(1)
    for ep in range(2):
        rec.add_reset(obs.sample(), {"start": ep}, seed=ep)
        for t in range(11):
            rec.add_step(act.sample(), obs.sample(), float(t), t == 10, False, {"t": t, "arr": np.arange(t)})
    rec.close()
    rewrite_in_parts(str(tmp_path / "whole"), str(tmp_path / "parted"), part_steps=4)
    for a, b in zip(envrec.TraceReader(tmp_path / "whole"), envrec.TraceReader(tmp_path / "parted"), strict=True):
        assert len(b.parts) == 3 and b.length == a.length == 11
        assert b.observations["name"] == a.observations["name"]
        np.testing.assert_array_equal(b.observations["pos"], a.observations["pos"])
        for x, y in zip(b.actions, a.actions, strict=True):
            np.testing.assert_array_equal(x, y)
        assert repr(b.infos) == repr(a.infos)


def _edit(folder: str, name_part: str, edit) -> None:
    if name_part == "last":  # the last batch
        name = json.load(open(os.path.join(folder, "cp.manifest.json")))["batches"][-1]["fn"]
    else:
        name = next(n for n in sorted(os.listdir(folder)) if name_part in n and n.endswith(".json"))
    path = os.path.join(folder, name)
    doc = json.load(open(path))
    edit(doc)
    json.dump(doc, open(path, "w"))
    fix_checksums(folder)


def _head_part(doc, **change) -> None:
    next(e for e in doc["batches"] if "head_part" in e)["head_part"].update(change)


BAD_PARTS = {
    "a part's index of the wrong type": (".p000001.", lambda d: d["episodes"][0]["part"].update(index="1")),
    "a part's first step that does not follow": (".p000001.", lambda d: d["episodes"][0]["part"].update(first_step=6)),
    "a part of another episode": (".p000001.", lambda d: d["episodes"][0].update(episode_id=7)),
    "continues not a bool": (".p000001.", lambda d: d["episodes"][0]["part"].update(continues=1)),
    "a continuing part that says how it ended": (".p000001.", lambda d: d["episodes"][0].update(ended_by="terminated")),
    "part 0 from step 3": ("cp.ep000000000.json", lambda d: d["episodes"][0]["part"].update(first_step=3)),
    "a part that is not the object": (".p000001.", lambda d: d["episodes"][0].update(part=[1, 5, True])),
    "an empty part": (".p000001.", lambda d: d["episodes"][0].update(length=0)),
    "the part key lost": (".p000001.", lambda d: d["episodes"][0].pop("part")),
    "ended_by null in a last part": ("last", lambda d: d["episodes"][-1].update(ended_by=None)),
    "a head_part index 0": ("manifest", lambda d: _head_part(d, index=0)),
    "a head_part of another part": ("manifest", lambda d: _head_part(d, first_step=99)),
    "a head_part not an object": ("manifest", lambda d: next(e for e in d["batches"] if "head_part" in e).update(head_part=5)),
    "continues false written out": ("manifest", lambda d: d["batches"][-1].update(continues=False)),
    "continues lost from an entry": ("manifest", lambda d: next(e for e in d["batches"] if "continues" in e).pop("continues")),
}


@pytest.mark.parametrize("what", BAD_PARTS)
def test_bad_part_keys_are_trace_errors(parted, tmp_path, what):
    name_part, edit = BAD_PARTS[what]
    folder = str(tmp_path / "bad")
    shutil.copytree(parted, folder)
    _edit(folder, name_part, edit)
    with pytest.raises(TraceError):
        reader = envrec.TraceReader(folder)
        list(reader)
        [reader[i] for i in range(len(reader))]
