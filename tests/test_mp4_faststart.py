"""The remux in the encoder's process (``envrec.formats.mp4_faststart``): the standard MP4 it writes holds the same
packets as ffmpeg's ``+faststart`` remux of the same fragmented clip, its index first; what it does not rewrite
raises ``Mp4Unsupported`` before a byte is written, whatever the bytes."""

from __future__ import annotations

import errno
import os
import struct
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envrec
from envrec.formats import mp4_faststart
from envrec.formats.ffmpeg import VideoSettings, encode_command, find_ffmpeg, remux_command
from envrec.formats.mp4_faststart import Mp4Unsupported, faststart

from .support.video import meta

FFMPEG = find_ffmpeg(None)[0]


def _encode(path, frames: int, h: int = 48, w: int = 64, fps: float = 25, **settings) -> str:
    """A fragmented MP4 of ``frames`` frames, by envrec's own encode command."""
    cmd = encode_command(FFMPEG, w, h, 3, fps, str(path), VideoSettings(**settings))
    rng = np.random.default_rng(0)
    pixels = b"".join((rng.integers(0, 40, (h, w, 3)) + 5 * i).astype(np.uint8).tobytes() for i in range(frames))
    subprocess.run(cmd, input=pixels, check=True, capture_output=True)
    return str(path)


def _faststart(src: str, dst: str) -> int:
    fd_in = os.open(src, os.O_RDONLY)
    fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return faststart(fd_in, fd_out)
    finally:
        os.close(fd_in)
        os.close(fd_out)


def _packets(path: str) -> list[str]:
    """Every packet's stream, dts, pts, duration, size and checksum, as ffmpeg demuxes them."""
    out = subprocess.run([FFMPEG, "-v", "error", "-i", path, "-c", "copy", "-f", "framecrc", "-"],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if not line.startswith("#")]


def _decoded(path: str) -> list[str]:
    out = subprocess.run([FFMPEG, "-v", "error", "-i", path, "-f", "framemd5", "-"],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if not line.startswith("#")]


def _top_boxes(path: str) -> list[bytes]:
    data, pos, kinds = open(path, "rb").read(), 0, []
    while pos < len(data):
        size, kind = struct.unpack_from(">I4s", data, pos)
        size = struct.unpack_from(">Q", data, pos + 8)[0] if size == 1 else size
        kinds.append(kind)
        pos += size
    return kinds


CASES = {
    "one frame": {"frames": 1},
    "ultrafast, several fragments": {"frames": 130, "keyframe_interval_s": 1.0},
    "B-frames (composition offsets, an edit list)": {"frames": 90, "preset": "medium"},
    "odd size, 7 fps": {"frames": 40, "h": 37, "w": 53, "fps": 7},
}


@pytest.mark.parametrize("case", CASES)
def test_the_same_packets_and_frames_as_ffmpegs_remux_with_the_index_first(tmp_path, case):
    src = _encode(tmp_path / "frag.mp4", **CASES[case])
    ours, theirs = str(tmp_path / "ours.mp4"), str(tmp_path / "theirs.mp4")
    written = _faststart(src, ours)
    subprocess.run(remux_command(FFMPEG, src, theirs), check=True)
    assert written == os.path.getsize(ours)
    assert _packets(ours) == _packets(theirs)
    assert len(_packets(ours)) == CASES[case]["frames"]
    assert _decoded(ours) == _decoded(theirs)
    assert _top_boxes(ours) == [b"ftyp", b"moov", b"mdat"]
    assert b"mvex" not in open(ours, "rb").read(4096)  # not fragmented any more


def test_past_4_gib_chunk_offsets_and_the_media_box_take_64_bits(tmp_path, monkeypatch):
    src = _encode(tmp_path / "frag.mp4", 60, keyframe_interval_s=0.5)
    ours = str(tmp_path / "ours.mp4")
    monkeypatch.setattr(mp4_faststart, "_OFFSET_LIMIT", 1000)  # as if this small file ended past 4 GiB
    _faststart(src, ours)
    data = open(ours, "rb").read()
    at = data.index(b"mdat") - 4
    assert b"co64" in data and b"stco" not in data
    assert struct.unpack_from(">I", data, at)[0] == 1 and struct.unpack_from(">Q", data, at + 8)[0] == len(data) - at
    assert _packets(ours) == _packets(src)
    assert _decoded(ours) == _decoded(src)


def _find(data: bytes, path: list[bytes]) -> list[tuple[int, int]]:
    """(start, size) of each box along ``path`` from the top level (32-bit sizes, the first of each type)."""
    found, start, end = [], 0, len(data)
    for kind in path:
        pos = start
        while pos < end:
            size, k = struct.unpack_from(">I4s", data, pos)
            if k == kind:
                break
            pos += size
        assert pos < end, f"no {kind!r} box"
        found.append((pos, size))
        start, end = pos + 8, pos + size
    return found


def _with(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value) :]


def _inserted(data: bytes, path: list[bytes], blob: bytes) -> bytes:
    """``blob`` appended inside the box at ``path``, every box on the path grown by it."""
    boxes = _find(data, path)
    start, size = boxes[-1]
    data = data[: start + size] + blob + data[start + size :]
    for start, size in boxes:
        data = _with(data, start, struct.pack(">I", size + len(blob)))
    return data


def _nested(kind: bytes, depth: int) -> bytes:
    blob = b""
    for _ in range(depth):
        blob = struct.pack(">I4s", 8 + len(blob), kind) + blob
    return blob


def _damaged(data: bytes, how: str) -> bytes:
    """A fragmented clip damaged as a hand-made or corrupted file would be."""
    moof = data.index(b"moof") - 4
    if how == "a run of 2**32-1 samples in a few bytes":
        trun = data.index(b"trun", moof)  # no per-sample field: nothing in the box bounds the count
        return _with(data, trun + 4, struct.pack(">II", 0x000001, 0xFFFFFFFF))
    if how == "2000 boxes nested in minf":
        return _inserted(data, [b"moov", b"trak", b"mdia", b"minf"], _nested(b"minf", 2000))
    if how == "a sample description of size 0 (to its parent's end)":
        return _with(data, _find(data, [b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stsd"])[-1][0], b"\0\0\0\0")
    if how == "no movie header":
        return _with(data, _find(data, [b"moov", b"mvhd"])[-1][0] + 4, b"xxxx")
    if how == "a run without a data offset":
        trun = data.index(b"trun", moof)
        return _with(data, trun + 7, bytes([data[trun + 7] & ~1]))
    if how == "samples of duration 0":
        tfhd = data.index(b"tfhd", moof)
        flags = int.from_bytes(data[tfhd + 5 : tfhd + 8], "big")
        assert flags & 0x8 and not flags & 0x3  # a default duration, right after the track id
        return _with(data, tfhd + 12, b"\0\0\0\0")
    raise AssertionError(how)


DAMAGES = ["a run of 2**32-1 samples in a few bytes", "2000 boxes nested in minf",
           "a sample description of size 0 (to its parent's end)", "no movie header", "a run without a data offset",
           "samples of duration 0"]


@pytest.mark.parametrize("how", ["a standard MP4", "not an MP4", "cut in its media", "cut in a fragment's index",
                                 "a gap in decode times", "two tracks", *DAMAGES])
def test_what_it_does_not_rewrite_is_refused_before_a_byte_is_written(tmp_path, how):
    src = _encode(tmp_path / "frag.mp4", 60, keyframe_interval_s=0.5)
    data = open(src, "rb").read()
    if how == "a standard MP4":
        subprocess.run(remux_command(FFMPEG, src, str(tmp_path / "std.mp4")), check=True)
        data = open(tmp_path / "std.mp4", "rb").read()
    elif how == "not an MP4":
        data = b"plain text, not boxes\n" * 100
    elif how == "cut in its media":
        data = data[: len(data) - 700]
    elif how == "cut in a fragment's index":
        data = data[: data.index(b"moof") + 40]
    elif how == "a gap in decode times":
        at = data.index(b"tfdt", data.index(b"moof") + 8)  # the first fragment's
        version = data[at + 4]
        field = at + 8
        value = struct.unpack_from(">Q" if version == 1 else ">I", data, field)[0] + 512
        data = data[:field] + struct.pack(">Q" if version == 1 else ">I", value) + data[field + (8 if version == 1 else 4):]
    elif how == "two tracks":
        subprocess.run([FFMPEG, "-v", "error", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=25", "-f", "lavfi",
                        "-i", "sine", "-t", "1", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac",
                        "-movflags", "+frag_keyframe+empty_moov+default_base_moof", str(tmp_path / "av.mp4")],
                       check=True)
        data = open(tmp_path / "av.mp4", "rb").read()
    elif how in DAMAGES:
        data = _damaged(data, how)
    (tmp_path / "in.mp4").write_bytes(data)
    with pytest.raises(Mp4Unsupported):
        _faststart(str(tmp_path / "in.mp4"), str(tmp_path / "out.mp4"))
    assert os.path.getsize(tmp_path / "out.mp4") == 0


@pytest.fixture(scope="module")
def fuzz_source(tmp_path_factory) -> bytes:
    return open(_encode(tmp_path_factory.mktemp("src") / "frag.mp4", 30, keyframe_interval_s=0.5), "rb").read()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1, max_size=6))
def test_damaged_bytes_give_mp4unsupported_or_a_file_never_another_error(tmp_path_factory, fuzz_source, flips):
    where = tmp_path_factory.mktemp("fuzz")
    data = bytearray(fuzz_source)
    index_end = data.index(b"mdat") + 8  # damage the index and the first fragment's, where the parsing is
    for at, value in flips:
        data[at % index_end] = value
    (where / "in.mp4").write_bytes(bytes(data))
    try:
        _faststart(str(where / "in.mp4"), str(where / "out.mp4"))
    except Mp4Unsupported:
        assert os.path.getsize(where / "out.mp4") == 0


def test_a_disk_that_fails_mid_copy_raises_and_a_kernel_without_copy_file_range_falls_back(tmp_path, monkeypatch):
    src = _encode(tmp_path / "frag.mp4", 60, keyframe_interval_s=0.5)

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", full)
    with pytest.raises(OSError, match="No space left"):
        _faststart(src, str(tmp_path / "full.mp4"))

    def across_devices(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", across_devices)
    _faststart(src, str(tmp_path / "copied.mp4"))
    assert _packets(str(tmp_path / "copied.mp4")) == _packets(src)


def _clip(tmp_path, name: str, settings: VideoSettings) -> dict:
    rec = envrec.VideoRecorder(tmp_path, fps=25, settings=settings)
    try:
        rec.start_clip(name)
        for i in range(30):
            rec.add_frame(np.full((48, 64, 3), 4 * i, np.uint8), i)
        rec.end_clip()
    finally:
        rec.close()
    return meta(tmp_path, name)


def test_the_encoder_remuxes_in_its_process_and_leaves_to_ffmpeg_what_it_does_not_rewrite(tmp_path):
    m = _clip(tmp_path, "ours", VideoSettings())
    assert not m["fragmented"] and "remux_error" not in m
    assert _top_boxes(str(tmp_path / "ours.mp4")) == [b"ftyp", b"moov", b"mdat"]
    assert len(_decoded(str(tmp_path / "ours.mp4"))) == 30
    # a global sidx index is not what mp4_faststart rewrites: ffmpeg remuxes that clip (its file has a free box)
    sidx = VideoSettings(extra_args=("-movflags", "+frag_keyframe+empty_moov+default_base_moof+global_sidx"))
    m = _clip(tmp_path, "theirs", sidx)
    assert not m["fragmented"] and "remux_error" not in m
    assert _top_boxes(str(tmp_path / "theirs.mp4")) == [b"ftyp", b"moov", b"free", b"mdat"]
    assert len(_decoded(str(tmp_path / "theirs.mp4"))) == 30


def test_a_remux_that_cannot_write_keeps_the_fragmented_clip_and_says_why(tmp_path):
    rec = envrec.VideoRecorder(tmp_path, fps=25)
    try:
        planted = tmp_path / f".c0.mp4.{rec.stats()['worker_pid']}.tmp"  # the remux's temporary name, taken
        planted.mkdir()
        (planted / "theirs").write_text("not envrec's")
        rec.start_clip("c0")
        for i in range(30):
            rec.add_frame(np.full((48, 64, 3), 4 * i, np.uint8), i)
        rec.end_clip()
    finally:
        rec.close()
    m = meta(tmp_path, "c0")
    assert m["fragmented"] and not m["broken"] and "Is a directory" in m["remux_error"]
    assert b"mvex" in (tmp_path / "c0.mp4").read_bytes()[:4096]  # the fragmented video, whole
    assert len(_decoded(str(tmp_path / "c0.mp4"))) == 30
    assert (planted / "theirs").read_text() == "not envrec's"
