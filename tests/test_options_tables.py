"""The options tables of README.md and docs/reference.md say what the code defines: every option's name, its
default (the signature's or ``StreamOptions``' field's) and, in docs/reference.md, what it accepts (the words of
the option's ``Accepts`` in ``envrec.option_checks``' tables, as the ``ConfigError`` for a bad value says them)."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re

import pytest

import envrec
from envrec.record.record_video import RECORD_VIDEO_OPTIONS
from envrec.record.recorder import DEFAULT_RING_BYTES, TRACE_OPTIONS
from envrec.record.video_recorder import DEFAULT_FRAME_RING_BYTES, VIDEO_RECORDER_OPTIONS
from envrec.sb3 import VecRecordVideo

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))

# What is not an option: the env, the folder and spaces (arguments), the options object and test hooks.
NOT_OPTIONS = {"self", "env", "directory", "observation_space", "action_space", "options", "faults", "env_description",
               "stream_options", "video_folder", "folder"}
STREAM = {f.name: f for f in dataclasses.fields(envrec.StreamOptions)}
# Defaults whose None stands for a value the recorder picks: the table says which.
PICKED = {
    "name_prefix": "openaigym.trace.<n>.<pid>",
    "ring_bytes": f"{DEFAULT_RING_BYTES >> 20} MiB (video: {DEFAULT_FRAME_RING_BYTES >> 20} MiB)",
}


REQUIRED = object()  # an argument without a default: the table says "(required)"


def _keywords(*callables, required: bool = False) -> dict[str, object]:
    """The keyword options of the callables' signatures and their defaults (the first callable's win); with
    ``required``, the arguments without one too."""
    found: dict[str, object] = {}
    for c in reversed(callables):
        for p in inspect.signature(c).parameters.values():
            if p.name not in NOT_OPTIONS | {"venv"} and p.kind is not p.VAR_KEYWORD and (required or p.default is not p.empty):
                found[p.name] = REQUIRED if p.default is p.empty else p.default
    return found


TRACE = {**_keywords(envrec.RecordTrace.__init__, envrec.TraceRecorder.__init__),
         **{name: f.default for name, f in STREAM.items()}}
VIDEO = _keywords(envrec.RecordVideo.__init__, envrec.VideoRecorder.__init__)
SB3_VIDEO = _keywords(VecRecordVideo.__init__, required=True)  # its own; the rest are VideoRecorder's
TRACE_ACCEPTS = {**TRACE_OPTIONS, **{name: f.metadata["accepts"] for name, f in STREAM.items()}}
VIDEO_ACCEPTS = {**VIDEO_RECORDER_OPTIONS, **RECORD_VIDEO_OPTIONS}


def _table(doc: str, heading: str) -> dict[str, dict[str, str]]:
    """The first table under ``heading`` in ``doc``: {option: {column: cell}}, backticks kept."""
    text = open(os.path.join(ROOT, doc)).read()
    start = text.index(f"\n{heading}\n")
    lines = text[start:].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    header, body = rows[0], rows[2:]
    return {row[0].strip("`"): dict(zip(header, row, strict=True)) for row in body}


def _says_default(cell: str, name: str, value: object) -> bool:
    cell = cell.replace("`", "").strip()
    if value is REQUIRED:
        return cell == "(required)"
    if value is None and name in PICKED:
        return cell == PICKED[name]
    if value is None or isinstance(value, bool):
        return cell == str(value)
    if isinstance(value, str):
        return cell == f'"{value}"'
    if isinstance(value, int | float):
        try:
            return float(cell.replace(" ", "").replace(",", "")) == value
        except ValueError:
            return False
    if isinstance(value, tuple):
        return cell == repr(value)
    return False


def _accepts_text(cell: str) -> str:
    return cell.replace("`", "").replace("\\|", "|")


TABLES = [
    ("docs/reference.md", "## Options", TRACE, TRACE_ACCEPTS),
    ("docs/reference.md", "### Video options", VIDEO, VIDEO_ACCEPTS),
    ("README.md", "### Options", TRACE, None),
    ("docs/reference.md", "## Stable-Baselines3", SB3_VIDEO, None),
]


@pytest.mark.parametrize(("doc", "heading", "defined", "accepts"), TABLES, ids=[f"{d} {h}" for d, h, _, _ in TABLES])
def test_a_table_lists_every_option_with_its_default(doc, heading, defined, accepts):
    table = _table(doc, heading)
    # the README lists what RecordTrace users set; docs/reference.md all of it (TraceRecorder's, the deprecated one)
    deprecated = {"start_method", "recorder", "env_id"} if doc == "README.md" else set()
    assert set(table) == set(defined) - deprecated, f"{doc} {heading}: missing {sorted(set(defined) - deprecated - set(table))}, " \
                                                   f"not options {sorted(set(table) - set(defined))}"
    wrong = [f"{name}: says {row['default']!r}, the code {defined[name]!r}" for name, row in table.items()
             if not _says_default(row["default"], name, defined[name])]
    assert not wrong, f"{doc} {heading}: {wrong}"
    if accepts is not None:
        wrong = [f"{name}: says {row['accepts']!r}, the check {accepts[name].what!r}" for name, row in table.items()
                 if name in accepts and _accepts_text(row["accepts"]) != accepts[name].what]
        assert not wrong, f"{doc} {heading}: {wrong}"


def test_the_check_catches_a_wrong_default_and_wrong_words():
    assert _says_default("5 000 000", "batch_bytes", 5_000_000) and not _says_default("5 MB", "batch_bytes", 5_000_000)
    assert _says_default("`None`", "max_bytes", None) and not _says_default("`False`", "strict", True)
    assert _says_default('`"block"`', "backpressure", "block") and _says_default("60", "close_timeout_s", 60.0)
    assert _says_default("(required)", "record_video_trigger", REQUIRED) and not _says_default("None", "x", REQUIRED)
    assert _accepts_text("`True` or `False`") == STREAM["strict"].metadata["accepts"].what
