"""What a file can make a reader allocate: bounded before it is allocated, a ``TraceError`` within seconds.

The three bombs of ``support/bombs.py`` (a 9 KB ``.json.zst`` of 100 MiB of
``[],``, a 96 KB one of 1 GiB, a ``.bin`` whose zstd frame declares 2 GiB for
an array of a few rows, and one whose episode really is 2 GiB long) are read
by every reader in a child process whose address space is limited
(``RLIMIT_AS``): each must end in a ``TraceError`` naming the file, never in
a ``MemoryError`` or an abort. Then the smaller bounds one by one: a JSON
document's parse cost (``json_cost``), the steps and array bytes a batch
declares against its manifest entry, a manifest's ``prefix``, an export of
no step, and a verdict file of 206,000 episodes read back by envrec.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import types

import gymnasium as gym
import pyarrow.dataset as pads
import pytest

import envrec
from envrec.errors import TraceError
from envrec.export import to_parquet
from envrec.formats import json_docs
from envrec.formats.compression import decompress_into
from envrec.formats.trace_checks import JsonBudget, json_cost, parse_json
from envrec.replay.verdicts import Verdict, read_verdicts, write_verdicts

from .support import bombs
from .support.batch_json import batch_text
from .support.episodes import run_episodes
from .support.processes import child_command, child_env

pytestmark = pytest.mark.timeout(300)

LIMIT_MIB = 1536  # the reader's address space: what it has, far below what the bombs would cost
BOMB_SECONDS = 30  # each reader refuses a bomb within this (a few tenths of a second alone; the machine is shared)
BOMBS = {
    "json.zst of 100 MiB of []": lambda f: bombs.json_bomb(f, 100),
    "json.zst of 1 GiB of []": lambda f: bombs.json_bomb(f, 1024),
    "a frame that declares 2 GiB": bombs.frame_bomb,
    "an episode of 2 GiB": bombs.rows_bomb,
}
READERS = ("reader", "skip", "parquet", "inspect", "viewer")


@pytest.fixture(scope="module")
def compressed(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("bounds") / "rec")
    env = envrec.RecordTrace(gym.make("CartPole-v1"), folder, name_prefix="cp", compression="zstd", batch_bytes=1500)
    run_episodes(env, 3, 0)
    env.close()
    for name in os.listdir(folder):
        if name.startswith("."):  # the serializer's checkpoint: no reader opens it
            os.remove(os.path.join(folder, name))
    return folder


@pytest.fixture(scope="module")
def bomb_folders(compressed, tmp_path_factory):
    root = tmp_path_factory.mktemp("bombs")
    out = {}
    for kind, make in BOMBS.items():
        folder = str(root / kind.replace(" ", "_"))
        shutil.copytree(compressed, folder)
        out[kind] = (folder, make(folder))
    return out


def _bounded(folder: str, reader: str) -> dict:
    done = subprocess.run(child_command("child_bounded_reader.py", folder, reader, str(LIMIT_MIB)), env=child_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (done.returncode, done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", BOMBS)
def test_a_bomb_is_a_trace_error_within_seconds_in_little_memory(bomb_folders, kind, reader):
    folder, batch = bomb_folders[kind]
    out = _bounded(folder, reader)
    assert out["seconds"] < BOMB_SECONDS
    if reader in ("skip", "viewer"):  # the bomb's batch is left out and listed, the others read
        assert out["outcome"] == "read" and len(out["damaged"]) == 1 and batch in out["damaged"][0]
    elif reader == "inspect":
        assert out["outcome"] == "read" and out["code"] == 1
    else:
        assert out["outcome"] == "TraceError" and batch in out["message"]
    assert not os.path.exists(folder + ".out")


def test_a_bomb_is_refused_by_the_bound_that_names_it(bomb_folders):
    messages = {kind: _bounded(folder, "reader")["message"] for kind, (folder, _) in bomb_folders.items()}
    assert "parsing it would cost more than 1024 MiB" in messages["json.zst of 100 MiB of []"]
    assert "parsing it would cost more than 1024 MiB" in messages["json.zst of 1 GiB of []"]
    assert "its frame says it decompresses to 2147483648 bytes, its rows need" in messages["a frame that declares 2 GiB"]
    assert "too large to decompress" in messages["an episode of 2 GiB"]  # what it is; more than this reader has


def test_json_cost_admits_envrec_s_own_batches_and_refuses_dense_documents(compressed, tmp_path):
    for name in os.listdir(compressed):
        if ".json" in name:
            text = batch_text(os.path.join(compressed, name))
            assert len(text) <= json_cost(text) <= 30 * len(text)  # an upper estimate, within reason
    dense = b"[" + b"[]," * 100_000 + b"[]]"
    assert json_cost(dense) > 64 * 100_000
    parse_json(dense, "dense.json")  # under the default budget
    with pytest.raises(TraceError, match="dense.json: parsing it would cost more than 1 MiB"):
        JsonBudget("dense.json", limit=1 << 20)(dense)
    budget = JsonBudget("pieces.json", limit=1 << 20)
    with pytest.raises(TraceError, match="counted 1 MiB so far"):
        for _ in range(100):
            budget(b"[]," * 10_000)  # pieces add up


def test_parse_json_refuses_before_parsing_when_the_budget_is_low(monkeypatch):
    monkeypatch.setattr(json_docs, "MAX_PARSED_JSON_BYTES", 1 << 20)
    calls: list = []
    monkeypatch.setattr(json_docs, "json", types.SimpleNamespace(loads=lambda *a, **k: calls.append(a)))
    with pytest.raises(TraceError, match="x.json: parsing it would cost more than 1 MiB"):
        parse_json(b"[" + b"{}," * 200_000 + b"{}]", "x.json")
    assert calls == []  # json.loads never started


def _edit_entry(folder: str, **change) -> dict:
    path = os.path.join(folder, "cp.manifest.json")
    doc = json.load(open(path))
    doc["batches"][0].update(change)
    json.dump(doc, open(path, "w"))
    return doc["batches"][0]


@pytest.mark.parametrize("key, delta, message", [
    ("steps", 1, "episodes hold .* steps, the manifest's entry says"),
    ("steps", -1, "episodes hold .* steps, the manifest's entry says"),
    ("array_bytes", -1, "episodes' arrays take .* more than the manifest's entry says"),
])
def test_a_batch_holds_the_steps_and_no_more_array_bytes_than_its_entry_says(compressed, tmp_path, key, delta, message):
    folder = str(tmp_path / "rec")
    shutil.copytree(compressed, folder)
    entry = json.load(open(os.path.join(folder, "cp.manifest.json")))["batches"][0]
    _edit_entry(folder, **{key: entry[key] + delta})
    with pytest.raises(TraceError, match=f"{entry['fn']}: {message}"):
        list(envrec.TraceReader(folder))
    r = envrec.TraceReader(folder, on_damaged="skip")
    assert len(list(r)) == len(envrec.TraceReader(compressed)) - entry["len"] and entry["fn"] in r.damaged[0].reason


@pytest.mark.parametrize("prefix", ["../cp", "/tmp/cp", "sub/cp", "..", ""])
def test_a_prefix_that_leads_out_of_the_folder_is_refused(compressed, tmp_path, prefix):
    folder = tmp_path / "rec"
    shutil.copytree(compressed, folder)
    path = folder / "cp.manifest.json"
    doc = json.load(open(path))
    doc.update(prefix=prefix, segments={"first": 0, "next": 1})
    json.dump(doc, open(path, "w"))
    outside = tmp_path / "cp.m000000.manifest.json"  # where "../cp" would lead
    outside.write_text(json.dumps({"batches": [], "segment_of": "cp", "segment": 0}))
    for on_damaged in ("raise", "skip"):  # skip: the recording left out, so no readable manifest is left
        with pytest.raises(TraceError, match="cp.manifest.json: prefix: .* is not a name prefix envrec writes"):
            envrec.TraceReader(folder, on_damaged=on_damaged)


def test_an_export_of_no_step_writes_a_dataset_of_no_row(tmp_path):
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path / "rec", name_prefix="cp")
    env.reset(seed=0)
    env.reset(seed=1)
    env.close()
    assert [ep.length for ep in envrec.TraceReader(tmp_path / "rec")] == [0, 0]
    summary = to_parquet(tmp_path / "rec", tmp_path / "out")
    assert summary.rows == 0 and summary.files == 1
    table = pads.dataset(tmp_path / "out").to_table()
    assert table.num_rows == 0 and "observation" in table.column_names
    assert sorted(os.listdir(tmp_path)) == ["out", "rec"]


@pytest.mark.slow
def test_a_verdict_file_of_206000_episodes_is_read_back(tmp_path):
    verdicts = [Verdict("cp", i, i, "reproduced", steps=500, start="seed") for i in range(206_000)]
    path = write_verdicts(tmp_path, "cp", verdicts, atol=0.0, infos=False)
    back = read_verdicts(tmp_path, "cp")
    assert back is not None and len(back.episodes) == 206_000 and back.episodes[205_999] == verdicts[-1]
    assert os.path.getsize(path) < module_cap()


def module_cap() -> int:
    from envrec.replay import verdicts as module

    return module.MAX_BYTES


def test_verify_never_writes_a_verdict_file_it_cannot_read_back(tmp_path, monkeypatch):
    from envrec.replay import verdicts as module

    monkeypatch.setattr(module, "MAX_BYTES", 100_000)
    many = [Verdict("cp", i, i, "reproduced") for i in range(2_000)]
    with pytest.raises(TraceError, match="larger than envrec reads back"):
        write_verdicts(tmp_path, "cp", many, atol=0.0, infos=False)
    assert os.listdir(tmp_path) == []
    write_verdicts(tmp_path, "cp", many[:100], atol=0.0, infos=False)
    assert len(read_verdicts(tmp_path, "cp").episodes) == 100


def test_a_dense_batch_within_the_budget_is_parsed_and_refused_as_no_batch(compressed, tmp_path):
    folder = str(tmp_path / "rec")
    shutil.copytree(compressed, folder)
    name = bombs.json_bomb(folder, 1)  # 1 MiB of [], ~35 MiB to parse
    with pytest.raises(TraceError, match=f"{name}: episodes: 349526 episode\\(s\\), the manifest's entry says"):
        list(envrec.TraceReader(folder))


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_chunk_that_makes_more_than_its_rows_need_is_refused(codec):
    import lz4.frame
    import zstandard

    rows, row_bytes = 4, 16
    out = bytearray(rows * row_bytes)

    def frame(n: int, declare: bool) -> bytes:
        if codec == "zstd":
            return zstandard.ZstdCompressor(write_content_size=declare).compress(bytes(n))
        return lz4.frame.compress(bytes(n), store_size=declare)

    for declare in (True, False):  # said in the frame's header (refused unread), or found while decompressing
        good = frame(rows * row_bytes, declare)
        decompress_into(memoryview(out), memoryview(good), codec, [[rows, len(good)]], row_bytes)
        big = frame(1 << 20, declare)
        with pytest.raises((ValueError, zstandard.ZstdError),  # zstd: a buffer of max_output_size, found too small
                           match="its rows need 64|more than the 64 bytes its rows need|did not decompress full frame"):
            decompress_into(memoryview(out), memoryview(big), codec, [[rows, len(big)]], row_bytes)
