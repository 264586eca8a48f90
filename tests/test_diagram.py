"""The data-flow diagram at the top of the package (``envrec.__doc__``) names modules and names that exist."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re

import envrec

ROOMS = ("contract", "formats", "record", "supervision", "read", "workers")


def test_every_module_the_diagram_names_exists():
    doc = envrec.__doc__ or ""
    named = set(re.findall(rf"\b((?:{'|'.join(ROOMS)})\.[a-z_]+)\b", doc))
    missing = sorted(n for n in named if importlib.util.find_spec(f"envrec.{n}") is None)
    assert len(named) > 25 and not missing, f"the diagram names modules that do not exist: {missing}"


def test_the_calls_the_diagram_follows_exist():
    """A frame from RecordVideo.step to ffmpeg, a step from RecordTrace.step to a committed batch."""
    calls = {
        "record.record_trace": ["RecordTrace.step"],
        "record.record_video": ["RecordVideo.step"],
        "record.recorder": ["TraceRecorder.add_step"],
        "record.video_recorder": ["VideoRecorder.add_frame"],
        "record.packer": ["TracePacker.write_step", "frame_packer"],
        "supervision.stream": ["Stream.send", "Stream.check", "Stream.status"],
        "contract.ring": ["RingWriter.reserve", "RingWriter.publish", "RingWriter.write"],
        "contract.ring_reader": ["RingReader.poll"],
        "contract.protocol": ["Handler.handle", "ReleasePolicy"],
        "workers.loop": ["handle_records"],
        "workers.batch_writer": ["BatchWriter"],
        "workers.frame_feed": ["FrameFeed"],
        "workers.ffmpeg_process": ["FfmpegProcess"],
    }
    doc = envrec.__doc__ or ""
    for module, names in calls.items():
        mod = importlib.import_module(f"envrec.{module}")
        for name in names:
            assert name in doc, f"{name} is not in the diagram"
            obj = mod
            for part in name.split("."):
                obj = getattr(obj, part)  # raises if the diagram's name is gone


def _package_diagram() -> str:
    """The literal block after ``::`` in ``envrec.__doc__``, as it is indented there."""
    doc = envrec.__doc__ or ""
    block = doc.split("::\n\n", 1)[1]
    return block.rstrip("\n") + "\n"


def test_architecture_md_shows_the_package_diagram_itself():
    """docs/architecture.md shows the one diagram, byte for byte, rather than drawing another that drifts."""
    text = open(os.path.join(os.path.dirname(__file__), os.pardir, "docs", "architecture.md")).read()
    shown = re.search(r"^```text\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    assert shown, "docs/architecture.md has no ```text diagram"
    assert shown.group(1) == _package_diagram(), "docs/architecture.md's diagram differs from envrec.__doc__'s: copy it over"
