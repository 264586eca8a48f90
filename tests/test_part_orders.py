"""Batch orders nobody wrote, and declared sizes that lie: every reader refuses them, or (``on_damaged="skip"``) lists them.

A recording with its episodes in parts (``support/parted.py``: parts of 5
steps, 3 records a batch) has its manifest's batch list mutated by
hypothesis: entries listed twice, swapped, dropped from the middle, a second
batch claiming a part another batch holds (its files copied under new names),
and an entry's ``steps`` or ``array_bytes`` changed. The oracle is the
serializer's own order: a list that is a run of consecutive entries of the
original (its oldest evicted, its newest not yet read) is a recording every
reader reads whole; anything else is refused by every strict reader
(``TraceReader``, ``reader[i]``, ``iter_parts``, the Arrow/Parquet export)
with a ``TraceError``, and read by ``on_damaged="skip"``, ``envrec inspect``
and the viewer's catalog with what is wrong listed and no step read twice.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import envrec
from envrec.cli import main as cli_main
from envrec.errors import TraceError
from envrec.export import to_arrow
from envrec.export.batches import batch_rows, common_schema
from envrec.export.sources import find_recordings
from envrec.viewer.catalog import Catalog

from .support.episodes import record_cartpole
from .support.fuzz_mutants import fix_checksums
from .support.parted import rewrite_in_parts

pytestmark = pytest.mark.timeout(300)

EXAMPLES = int(os.environ.get("ENVREC_FUZZ_EXAMPLES", "30"))
MANIFEST = "cp.manifest.json"


@pytest.fixture(scope="module")
def parted(tmp_path_factory):
    root = tmp_path_factory.mktemp("orders")
    record_cartpole(root / "whole", 4, name_prefix="cp", batch_bytes=10**9)
    folder = str(root / "parted")
    rewrite_in_parts(str(root / "whole"), folder, part_steps=5, per_batch=3)
    entries = json.load(open(os.path.join(folder, MANIFEST)))["batches"]
    assert len(entries) >= 6 and sum("head_part" in e for e in entries) >= 3
    return folder


@st.composite
def orders(draw, n: int) -> list[tuple]:
    """A few edits of a list of ``n`` batch entries: ("dup", i, j), ("swap", i, j), ("drop", i), ("claim", i)."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("dup", "swap", "drop", "claim", "evict")))
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n))
        edits.append((kind, i, j))
    return edits


def _apply(folder: str, entries: list[dict], edits: list[tuple]) -> list[dict]:
    out = list(entries)
    for n, (kind, i, j) in enumerate(edits):
        i = min(i, len(out) - 1)
        if kind == "dup":
            out.insert(min(j, len(out)), dict(out[i]))
        elif kind == "swap":
            j = min(j, len(out) - 1)
            out[i], out[j] = out[j], out[i]
        elif kind == "drop" and len(out) > 1:
            del out[i]
        elif kind == "evict" and len(out) > 1:
            del out[0]
        elif kind == "claim":  # a second batch, of new files, holding the same part as entry i
            claim = dict(out[i])
            for key in ("fn", "bin"):
                claim[key] = f"claim{n}.{out[i][key]}"
                shutil.copyfile(os.path.join(folder, out[i][key]), os.path.join(folder, claim[key]))
            out.insert(i + 1, claim)
    return out


def _is_run(original: list[dict], mutated: list[dict]) -> bool:
    """``mutated`` is consecutive entries of ``original``, whatever their files are named: what the serializer
    wrote (oldest evicted, newest not read yet)."""
    def unnamed(entries: list[dict]) -> list[dict]:
        return [{k: v for k, v in e.items() if k not in ("fn", "bin")} for e in entries]

    orig, mut = unnamed(original), unnamed(mutated)
    return any(mut == orig[start : start + len(mut)] for start in range(len(orig))) and bool(mut)


def _strict(folder: str) -> dict[str, bool]:
    """Which strict readers read the folder (True) or refused it with TraceError (False)."""
    out = {}
    try:
        reader = envrec.TraceReader(folder)
        episodes = list(reader)
        assert len(episodes) == len(reader)
        [reader[i] for i in range(len(reader))]
        [list(reader.iter_parts(i)) for i in range(len(reader))]
        out["TraceReader"] = True
    except TraceError:
        out["TraceReader"] = False
    try:
        table = to_arrow(folder)
        keys = list(zip(table["episode_id"].to_pylist(), table["step"].to_pylist(), strict=True))
        assert len(keys) == len(set(keys)), "the export wrote a step twice"
        out["export"] = True
    except TraceError:
        out["export"] = False
    return out


def _steps_once(folder: str) -> list:
    """What ``on_damaged="skip"`` lists; every (episode_id, step) it read is read once."""
    reader = envrec.TraceReader(folder, on_damaged="skip")
    seen = [(ep.episode_id, ep.first_step + k) for ep in reader for k in range(ep.length)]
    assert len(seen) == len(set(seen)), "on_damaged='skip' read a step twice"
    return reader.damaged


def _inspect(folder: str) -> int:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["inspect", folder])
    assert "Traceback" not in err.getvalue()
    return code


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_a_batch_order_nobody_wrote_is_refused_or_listed_by_every_reader(parted, tmp_path_factory, data):
    folder = str(tmp_path_factory.mktemp("order") / "rec")
    shutil.copytree(parted, folder)
    original = json.load(open(os.path.join(folder, MANIFEST)))["batches"]
    edits = data.draw(orders(len(original)))
    mutated = _apply(folder, original, edits)
    note(f"edits {edits}: {[e['fn'] for e in mutated]}")
    doc = json.load(open(os.path.join(folder, MANIFEST)))
    json.dump(dict(doc, batches=mutated), open(os.path.join(folder, MANIFEST), "w"))
    written = _is_run(original, mutated)
    assert _strict(folder) == {"TraceReader": written, "export": written}
    damaged = _steps_once(folder)
    assert bool(damaged) == (not written) and all(d.file == MANIFEST for d in damaged)
    assert _inspect(folder) == (0 if written else 1)
    assert bool(Catalog(folder).index()["damaged"]) == (not written)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_declared_sizes_that_lie_are_refused_for_their_batch(parted, tmp_path_factory, data):
    folder = str(tmp_path_factory.mktemp("sizes") / "rec")
    shutil.copytree(parted, folder)
    doc = json.load(open(os.path.join(folder, MANIFEST)))
    k = data.draw(st.integers(0, len(doc["batches"]) - 1))
    key = data.draw(st.sampled_from(("steps", "array_bytes")))
    entry = doc["batches"][k]
    lie = data.draw(st.integers(-entry[key], 1 << 40).filter(lambda d: d != 0 and (key == "steps" or d < 0)))
    entry[key] += lie
    note(f"batches[{k}].{key} {entry[key] - lie} -> {entry[key]}")
    json.dump(doc, open(os.path.join(folder, MANIFEST), "w"))
    assert _strict(folder) == {"TraceReader": False, "export": False}
    damaged = _steps_once(folder)
    assert [d.file for d in damaged] == [entry["fn"]]
    assert ("steps" if key == "steps" else "array_bytes") in damaged[0].reason


def _edit_first_continued(folder: str, edit) -> dict:
    """Edit the first record of the first batch that continues a part (its JSON; sizes and CRC-32s fixed)."""
    doc = json.load(open(os.path.join(folder, MANIFEST)))
    entry = next(e for e in doc["batches"] if "head_part" in e)
    path = os.path.join(folder, entry["fn"])
    batch = json.load(open(path))
    edit(batch["episodes"][0])
    json.dump(batch, open(path, "w"))
    fix_checksums(folder)
    return entry


@pytest.mark.parametrize("what, edit", [
    ("of another episode", lambda r: r.update(episode_id=r["episode_id"] + 1)),
    ("from another step", lambda r: (r["part"].update(first_step=r["part"]["first_step"] + 1))),
])
def test_a_continued_part_that_does_not_follow_is_refused_by_every_export_path(parted, tmp_path, what, edit):
    folder = str(tmp_path / "rec")
    shutil.copytree(parted, folder)
    if what == "from another step":  # head_part says the same: only the step the part before ended at differs
        doc = json.load(open(os.path.join(folder, MANIFEST)))
        next(e for e in doc["batches"] if "head_part" in e)["head_part"]["first_step"] += 1
        json.dump(doc, open(os.path.join(folder, MANIFEST), "w"))
    entry = _edit_first_continued(folder, edit)
    assert _strict(folder) == {"TraceReader": False, "export": False}
    (src,) = find_recordings(folder)
    k = [e["fn"] for e in src.batches].index(entry["fn"])
    schema = common_schema([src])
    batch_rows(src, src.batches[k], schema)  # alone, the batch is a batch: the part before is what it must follow
    with pytest.raises(TraceError, match=f"{entry['fn']}: episodes\\[0\\].part \\(after "):
        batch_rows(src, src.batches[k], schema, continued=src.batches[k - 1])  # what a read task of read_traces does
    catalog = Catalog(folder)  # the viewer's lazy listing: the part is a piece of its own, and listed
    (name,) = [r["name"] for r in catalog.summary()["recordings"]]
    catalog.episodes(name, 0, 1000, "-length")
    listed = [d["file"] for d in catalog.summary()["damaged"]]
    assert listed[0] == entry["fn"] and set(listed) <= {e["fn"] for e in src.batches}  # (and the part after it)
