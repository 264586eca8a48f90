"""Folders envrec did not write whole: a damaged batch named by default or skipped on request, nothing outside the folder read."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

import envrec
from envrec import errors
from envrec.cli import main as cli_main
from envrec.errors import ConfigError, TraceError
from envrec.formats.inside import open_inside
from envrec.read import batch_files, reader

from .support.episodes import record_cartpole
from .support.scripts import write_segmented

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def three_batches(tmp_path):
    """A CartPole trace of several batches; the second batch's .bin then has a byte changed."""
    folder = tmp_path / "rec"
    record_cartpole(folder, 4, name_prefix="cp", batch_bytes=1500)
    batches = json.load(open(folder / "cp.manifest.json"))["batches"]
    assert len(batches) >= 3
    damaged = batches[1]
    data = bytearray((folder / damaged["bin"]).read_bytes())
    data[0] ^= 0xFF
    (folder / damaged["bin"]).write_bytes(bytes(data))
    return folder, batches, damaged


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_trace_error_is_one_class_importable_from_every_old_place():
    assert envrec.TraceError is TraceError is batch_files.TraceError is reader.TraceError is errors.TraceError
    assert issubclass(TraceError, errors.EnvrecError) and issubclass(TraceError, ValueError)


def test_by_default_the_damaged_batch_is_named(three_batches):
    folder, _, damaged = three_batches
    with pytest.raises(TraceError, match=f"batch {damaged['fn']} .* is damaged: {damaged['bin']}: its CRC-32 differs"):
        list(envrec.TraceReader(folder))


def test_on_damaged_skip_yields_the_intact_batches_and_lists_the_damaged_one(three_batches):
    folder, batches, damaged = three_batches
    r = envrec.TraceReader(folder, on_damaged="skip")
    intact = sum(b["len"] for b in batches if b is not damaged)
    assert len(r) == intact and len(list(r)) == intact
    assert [d.file for d in r.damaged] == [damaged["fn"]] and "CRC-32 differs" in r.damaged[0].reason
    assert [len(rec.batches) for rec in r.recordings] == [len(batches) - 1]
    with pytest.raises(ConfigError, match="on_damaged must be one of 'raise', 'skip'"):
        envrec.TraceReader(folder, on_damaged="ignore")


def test_on_damaged_skip_leaves_out_an_unreadable_manifest_and_reads_the_others(three_batches):
    folder, batches, damaged = three_batches
    (folder / "other.manifest.json").write_text('{"batches": [{"first": 0, "len": "two", "fn": "x.json"}]}')
    with pytest.raises(TraceError, match=r"other.manifest.json: batches\[0\].len: 'two' is not an integer"):
        envrec.TraceReader(folder)
    r = envrec.TraceReader(folder, on_damaged="skip")
    assert sorted(d.file for d in r.damaged) == sorted([damaged["fn"], "other.manifest.json"])
    assert len(list(r)) == sum(b["len"] for b in batches if b is not damaged)


def test_inspect_lists_what_is_damaged_and_counts_the_rest(three_batches):
    folder, batches, damaged = three_batches
    code, out, err = _cli("inspect", str(folder))
    assert code == 1 and "Traceback" not in err
    assert f"{damaged['fn']}: damaged: batch {damaged['fn']}" in err
    intact = sum(b["len"] for b in batches if b is not damaged)
    assert f"episodes: {intact}," in out


def test_export_of_a_damaged_folder_exits_with_a_message(three_batches, tmp_path):
    folder, _, damaged = three_batches
    code, _, err = _cli("export", str(folder), "--parquet", str(tmp_path / "out"))
    assert code == 2 and damaged["fn"] in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    (folder / "cp.manifest.json").write_bytes(b"\xff\xfe not json")
    code, _, err = _cli("export", str(folder), "--parquet", str(tmp_path / "out"))
    assert code == 2 and "cp.manifest.json: not JSON" in err


@pytest.mark.parametrize("field, value, message", [
    ("fn", "../outside.json", "is not a name inside the folder"),
    ("fn", "/etc/passwd", "is not a name inside the folder"),
    ("bin", "sub/../../x.bin", "is not a name inside the folder"),
    ("fn", 7, "is not a file name"),
])
def test_a_manifest_naming_a_file_outside_is_refused(three_batches, field, value, message):
    folder, _, _ = three_batches
    path = folder / "cp.manifest.json"
    doc = json.load(open(path))
    doc["batches"][0][field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=rf"cp.manifest.json: batches\[0\].{field}: .*{message}"):
        envrec.TraceReader(folder)


def test_a_batch_file_that_is_a_symlink_out_is_not_followed(three_batches, tmp_path):
    folder, batches, _ = three_batches
    first = batches[0]
    os.rename(folder / first["bin"], tmp_path / "moved.bin")
    os.symlink(tmp_path / "moved.bin", folder / first["bin"])  # the same bytes, CRC and all: only the link is wrong
    with pytest.raises(TraceError, match="goes through a symlink"):
        envrec.TraceReader(folder)[0]


def test_open_inside_refuses_every_way_out(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "ok").write_bytes(b"fine")
    (tmp_path / "secret").write_bytes(b"not yours")
    os.symlink(tmp_path / "secret", root / "link")
    os.symlink(tmp_path, root / "linkdir")
    os.symlink(root / "sub" / "ok", root / "inner-link")  # even one that stays inside: a symlink is never followed
    os.mkfifo(root / "fifo")
    with open_inside(str(root), "sub/ok", "test") as f:
        assert f.read() == b"fine"
    for name, message in [("link", "symlink"), ("linkdir/secret", "symlink"), ("inner-link", "symlink"),
                          ("../secret", "inside the folder"), ("sub/../ok", "inside the folder"), ("/etc/passwd", "inside"),
                          ("sub//ok", "inside"), ("sub\\ok", "inside"), ("fifo", "not a regular file"),
                          ("sub", "not a regular file"), ("", "not a file name"), (None, "not a file name")]:
        with pytest.raises(TraceError, match=message):
            open_inside(str(root), name, "test")
    with pytest.raises(FileNotFoundError):
        open_inside(str(root), "sub/nope", "test")


def test_on_damaged_skip_leaves_out_a_recording_whose_segment_is_gone(tmp_path):
    write_segmented(str(tmp_path / "seg"), 2, [1] * 5)
    _cp_record(tmp_path / "seg")
    os.remove(tmp_path / "seg" / "bench.m000000.manifest.json")
    with pytest.raises(TraceError, match="keeps vanishing"):
        envrec.TraceReader(tmp_path / "seg")
    r = envrec.TraceReader(tmp_path / "seg", on_damaged="skip")
    assert [d.file for d in r.damaged] == ["bench.manifest.json"] and "bench.m000000.manifest.json" in r.damaged[0].reason
    assert [rec.manifest["prefix"] for rec in r.recordings] == ["cp"] and len(list(r)) == 2


def _cp_record(folder) -> None:
    record_cartpole(folder, 2, name_prefix="cp")
