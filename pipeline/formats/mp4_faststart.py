"""A fragmented MP4 rewritten as a standard one with its index first (what ffmpeg's ``-movflags +faststart``
remux makes), in the calling process.

envrec's ffmpeg writes each clip as a fragmented MP4 (``formats.ffmpeg.encode_command``: an empty ``moov``,
then a ``moof`` and an ``mdat`` per fragment), so that a clip cut short still plays. A clip closed cleanly is
rewritten here: the fragments' sample tables gathered into one ``moov`` placed before the media data, and the
media copied by the kernel (``copy_file_range``), nothing re-encoded. It reads what such a command line writes
(one track, one sample description, ``tfdt`` decode times that follow on from one fragment to the next) and
raises ``Mp4Unsupported`` for anything else, before writing a byte, for the caller to remux with ffmpeg
instead.

Layout written: ``ftyp``, ``moov`` (``mvhd``; ``trak`` with ``tkhd``, an edit list, ``mdia`` and the sample
tables ``stts``, ``stss``, ``ctts``, ``stsc``, ``stsz``, ``stco`` or ``co64``; the boxes the fragmented
``moov`` had, less ``mvex``), ``mdat``: one chunk per run of samples of the source, in order.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Mp4Unsupported", "faststart"]

MAX_INDEX_BOX = 16 << 20  # a moov or moof larger than this is not one envrec's ffmpeg wrote
_OFFSET_LIMIT = 0xFFFFFFFF  # past it, chunk offsets take 64 bits (co64) and mdat a 64-bit size
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HEAD = struct.Struct(">I4s")
_NON_SYNC = 0x00010000  # sample_is_non_sync_sample, in a sample's flags
_MAX_DURATION = 1 << 30  # ticks of one sample: above, not a frame of a clip (ffmpeg takes such as damaged)
_ANY = (0, None)  # a child box that may come any number of times (copied as it is)
# The boxes a fragmented moov may hold, each with how many times (min, max; max None: any), the sample tables
# as ffmpeg writes them there: empty. What is not listed is refused.
_SHAPES: dict[bytes, dict[bytes, tuple[int, int | None]]] = {
    b"moov": {b"mvhd": (1, 1), b"trak": (1, 1), b"mvex": (1, 1), b"udta": _ANY, b"meta": _ANY, b"iods": _ANY,
              b"free": _ANY, b"skip": _ANY},
    b"trak": {b"tkhd": (1, 1), b"mdia": (1, 1), b"udta": _ANY, b"meta": _ANY, b"free": _ANY, b"skip": _ANY},
    b"mdia": {b"mdhd": (1, 1), b"hdlr": (1, 1), b"minf": (1, 1), b"free": _ANY, b"skip": _ANY},
    b"minf": {b"vmhd": (1, 1), b"dinf": (1, 1), b"stbl": (1, 1), b"free": _ANY, b"skip": _ANY},
    b"stbl": {b"stsd": (1, 1), b"stts": (1, 1), b"stsc": (1, 1), b"stsz": (1, 1), b"stco": (1, 1)},
    b"mvex": {b"trex": (1, 1), b"mehd": (0, 1)},
}
_FULL_BODY = {  # bytes of a full box's body (version and flags included) by version: 0, 1
    b"mvhd": (100, 112), b"tkhd": (84, 96), b"mdhd": (24, 36), b"tfdt": (8, 12), b"trex": (24, None),
}


class Mp4Unsupported(ValueError):
    """The file is not a fragmented MP4 of the kind this module rewrites (the caller remuxes it otherwise)."""


@dataclass(frozen=True)
class Box:
    """One box: its type, where it starts, its header's and its whole length."""

    type: bytes
    start: int
    header: int
    size: int

    @property
    def body(self) -> int:
        return self.start + self.header

    @property
    def end(self) -> int:
        return self.start + self.size


def _box_at(head: bytes, start: int, limit: int) -> Box:
    """The box whose first (up to 16) bytes are ``head``, at ``start`` in a span ending at ``limit``."""
    if len(head) < 8:
        raise Mp4Unsupported(f"a box header cut short at byte {start}")
    size, kind = _HEAD.unpack_from(head)
    header = 8
    if size == 1:
        if len(head) < 16:
            raise Mp4Unsupported(f"a box header cut short at byte {start}")
        size, header = _U64.unpack_from(head, 8)[0], 16
    elif size == 0:
        size = limit - start
    if size < header or start + size > limit:
        raise Mp4Unsupported(f"a {kind!r} box at byte {start} of {size} bytes does not fit in its container")
    return Box(kind, start, header, size)


def _children(buf: bytes, start: int, end: int) -> Iterator[Box]:
    while start < end:
        box = _box_at(buf[start : start + 16], start, end)
        yield box
        start = box.end


def _shape(buf: bytes, parent: Box) -> dict[bytes, list[Box]]:
    """``parent``'s children by type, checked against ``_SHAPES``."""
    allowed = _SHAPES[parent.type]
    found: dict[bytes, list[Box]] = {kind: [] for kind in allowed}
    for box in _children(buf, parent.body, parent.end):
        if box.type not in allowed:
            raise Mp4Unsupported(f"a {box.type!r} box in {parent.type!r}")
        found[box.type].append(box)
    for kind, (least, most) in allowed.items():
        if len(found[kind]) < least or (most is not None and len(found[kind]) > most):
            raise Mp4Unsupported(f"{len(found[kind])} {kind!r} boxes in {parent.type!r}")
    return found


def _full(buf: bytes, box: Box) -> tuple[int, int]:
    """A full box's version (0 or 1) and flags; the box's length is checked where ``_FULL_BODY`` knows it."""
    if box.size - box.header < 4:
        raise Mp4Unsupported(f"a {box.type!r} box too short for its version")
    word = _U32.unpack_from(buf, box.body)[0]
    version, flags = word >> 24, word & 0xFFFFFF
    if version > 1:
        raise Mp4Unsupported(f"a {box.type!r} box of version {version}")
    sizes = _FULL_BODY.get(box.type)
    if sizes is not None and box.size - box.header != sizes[version]:
        raise Mp4Unsupported(f"a {box.type!r} box of version {version} and {box.size - box.header} bytes")
    return version, flags


def _box(kind: bytes, body: bytes) -> bytes:
    return _HEAD.pack(8 + len(body), kind) + body


def _full_box(kind: bytes, version: int, flags: int, body: bytes) -> bytes:
    return _box(kind, _U32.pack(version << 24 | flags) + body)


def _verbatim(buf: bytes, box: Box) -> bytes:
    """A box copied as it is, its header written again (a size of 0, "to the end", would swallow what follows)."""
    return _box(box.type, buf[box.body : box.end])


@dataclass
class _Track:
    """What the fragments say about the samples, in decode order, and where their bytes are."""

    timescale: int = 0
    track_id: int = 0
    defaults: tuple[int, ...] = (0, 0, 0)  # trex: duration, size, flags
    media_bytes: int = 0  # in every mdat box: no run holds more samples than that
    durations: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # composition time offsets
    sync: list[int] = field(default_factory=list)  # 1-based numbers of the sync samples
    chunks: list[tuple[int, int, int]] = field(default_factory=list)  # (source offset, bytes, samples)
    decode_time: int = 0  # the next fragment's tfdt


def faststart(src_fd: int, dst_fd: int) -> int:
    """Write the standard MP4 of the fragmented one ``src_fd`` reads into ``dst_fd`` (empty, at its start).

    Args:
        src_fd: a readable descriptor of the fragmented MP4 (read with ``pread``: its position is left alone).
        dst_fd: a writable descriptor of an empty file.

    Returns:
        The number of bytes written.

    Raises:
        Mp4Unsupported: the source is not what this module rewrites (nothing was written then).
        OSError: reading or writing failed.
    """
    try:
        track, head, payload = _plan(src_fd)
    except (struct.error, IndexError, KeyError) as exc:  # a box shorter than its fields say
        raise Mp4Unsupported(f"a damaged box ({type(exc).__name__}: {exc})") from exc
    written = _write_all(dst_fd, head)
    for offset, length, _ in track.chunks:
        written += _copy(src_fd, dst_fd, offset, length)
    if written != len(head) + payload:
        raise OSError(f"wrote {written} bytes of {len(head) + payload}")
    return written


def _plan(src_fd: int) -> tuple[_Track, bytes, int]:
    """The samples, what goes before the media and the media's length (nothing written yet)."""
    size = os.fstat(src_fd).st_size
    top = list(_top_level(src_fd, size))
    if [b.type for b in top[:2]] != [b"ftyp", b"moov"]:
        raise Mp4Unsupported("not a fragmented MP4: it does not start with ftyp and moov")
    moov = _read(src_fd, top[1])
    boxes = _moov_boxes(moov)
    track, stsd_type = _read_moov(moov, boxes)
    media = [b for b in top if b.type == b"mdat"]
    track.media_bytes = sum(m.size for m in media)
    for box in top[2:]:
        if box.type == b"moof":
            _read_fragment(_read(src_fd, box), box, track, media)
        elif box.type not in (b"mdat", b"mfra", b"free", b"skip"):
            raise Mp4Unsupported(f"an unexpected {box.type!r} box at byte {box.start}")
    if not track.sizes:
        raise Mp4Unsupported("no samples")
    head, payload = _layout(moov, boxes, track, stsd_type)
    return track, head, payload


def _top_level(fd: int, size: int) -> Iterator[Box]:
    pos = 0
    while pos < size:
        box = _box_at(os.pread(fd, 16, pos), pos, size)
        yield box
        pos = box.end


def _read(fd: int, box: Box) -> bytes:
    if box.size > MAX_INDEX_BOX:
        raise Mp4Unsupported(f"a {box.type!r} box of {box.size} bytes")
    data = os.pread(fd, box.size, box.start)
    if len(data) != box.size:
        raise Mp4Unsupported(f"the {box.type!r} box at byte {box.start} is cut short")
    return data


def _moov_boxes(moov: bytes) -> dict[bytes, Box]:
    """The boxes found once on the one track's path (mvhd, trak, tkhd, mdia, ..., stsd, mvex, trex), every
    container checked against ``_SHAPES``."""
    root = _box_at(moov[:16], 0, len(moov))
    out = {b"moov": root}
    for kind in (b"moov", b"trak", b"mdia", b"minf", b"stbl", b"mvex"):
        for child, boxes in _shape(moov, out[kind]).items():
            if len(boxes) == 1:
                out[child] = boxes[0]
    return out


def _read_moov(moov: bytes, boxes: dict[bytes, Box]) -> tuple[_Track, bytes]:
    """The track's timescale, id and fragment defaults, and its sample entry's type (the sample tables must be
    empty: every sample is in the fragments)."""
    track = _Track()
    version, _ = _full(moov, boxes[b"tkhd"])
    track.track_id = _U32.unpack_from(moov, boxes[b"tkhd"].body + (20 if version == 1 else 12))[0]
    version, _ = _full(moov, boxes[b"mdhd"])
    track.timescale = _U32.unpack_from(moov, boxes[b"mdhd"].body + (20 if version == 1 else 12))[0]
    _full(moov, boxes[b"mvhd"])
    if not track.timescale:
        raise Mp4Unsupported("a media timescale of 0")
    for box in _children(moov, boxes[b"stbl"].body, boxes[b"stbl"].end):
        if box.type != b"stsd":
            count_at = box.body + (8 if box.type == b"stsz" else 4)  # stsz: its sample size, then the count
            if box.end < count_at + 4 or _U32.unpack_from(moov, count_at)[0]:
                raise Mp4Unsupported(f"the moov's {box.type!r} lists samples: not a fragmented MP4's")
    stsd = boxes[b"stsd"]
    if stsd.size - stsd.header < 16 or _U32.unpack_from(moov, stsd.body + 4)[0] != 1:
        raise Mp4Unsupported("not one sample description")
    _full(moov, boxes[b"trex"])
    track_id, description, *defaults = struct.unpack_from(">5I", moov, boxes[b"trex"].body + 4)
    if track_id != track.track_id or description != 1:
        raise Mp4Unsupported("trex does not describe the one track with its one sample description")
    track.defaults = tuple(defaults)
    return track, moov[stsd.body + 12 : stsd.body + 16]


def _read_fragment(moof: bytes, at: Box, track: _Track, media: list[Box]) -> None:
    """Add one fragment's samples to ``track``; ``at``: where the moof lies in the file (its data offsets count
    from there). Its boxes must come as ffmpeg writes them: mfhd, then one traf of tfhd, tfdt and truns."""
    root = _box_at(moof[:16], 0, len(moof))
    top = list(_children(moof, root.body, root.end))
    if [b.type for b in top] != [b"mfhd", b"traf"]:
        raise Mp4Unsupported(f"a fragment of boxes {[b.type for b in top]}")
    traf = top[1]
    parts = list(_children(moof, traf.body, traf.end))
    if len(parts) < 3 or [b.type for b in parts[:2]] != [b"tfhd", b"tfdt"] or {b.type for b in parts[2:]} != {b"trun"}:
        raise Mp4Unsupported(f"a fragment's track of boxes {[b.type for b in parts]}")
    tfhd, tfdt, runs = parts[0], parts[1], parts[2:]
    base, defaults = _read_tfhd(moof, tfhd, at, track)
    version, _ = _full(moof, tfdt)
    start = (_U64 if version == 1 else _U32).unpack_from(moof, tfdt.body + 4)[0]
    if start != track.decode_time:
        raise Mp4Unsupported(f"a fragment starts at decode time {start}, not {track.decode_time}: a gap or overlap")
    for run in runs:
        _read_trun(moof, run, base, defaults, track, media)


def _read_tfhd(moof: bytes, tfhd: Box, at: Box, track: _Track) -> tuple[int, list[int]]:
    """The fragment's base data offset and its sample defaults (duration, size, flags)."""
    _, flags = _full(moof, tfhd)
    pos = tfhd.body + 4
    if _U32.unpack_from(moof, pos)[0] != track.track_id:
        raise Mp4Unsupported("a fragment of another track")
    pos += 4
    base = at.start
    if flags & 0x1:
        base = _U64.unpack_from(moof, pos)[0]
        pos += 8
    if flags & 0x2:
        if _U32.unpack_from(moof, pos)[0] != 1:
            raise Mp4Unsupported("a fragment of another sample description")
        pos += 4
    defaults = list(track.defaults)
    for i, bit in enumerate((0x8, 0x10, 0x20)):
        if flags & bit:
            defaults[i] = _U32.unpack_from(moof, pos)[0]
            pos += 4
    if flags & 0x10000:
        raise Mp4Unsupported("an empty fragment (duration-is-empty)")
    if pos != tfhd.end:
        raise Mp4Unsupported("a tfhd box whose length is not what its flags say")
    return base, defaults


def _read_trun(moof: bytes, run: Box, base: int, defaults: list[int], track: _Track, media: list[Box]) -> None:
    """Add one run's samples (each run says where its data starts: ffmpeg's do)."""
    _, flags = _full(moof, run)
    count = _U32.unpack_from(moof, run.body + 4)[0]
    if not flags & 0x1:
        raise Mp4Unsupported("a trun box without a data offset")
    if count > track.media_bytes:  # every sample has a byte at least
        raise Mp4Unsupported(f"a trun box of {count} samples in {track.media_bytes} bytes of media")
    position = base + struct.unpack_from(">i", moof, run.body + 8)[0]
    pos = run.body + 12
    first_flags = None
    if flags & 0x4:
        first_flags = _U32.unpack_from(moof, pos)[0]
        pos += 4
    fields = [bit for bit in (0x100, 0x200, 0x400, 0x800) if flags & bit]
    if pos + 4 * len(fields) * count != run.end:
        raise Mp4Unsupported("a trun box whose length is not what its samples say")
    values = struct.unpack_from(f">{len(fields) * count}I", moof, pos)
    per = dict(zip(fields, range(len(fields)), strict=True))
    duration, size, sample_flags = defaults
    total = 0
    for i in range(count):
        row = values[i * len(fields) : (i + 1) * len(fields)]
        d = row[per[0x100]] if 0x100 in per else duration
        s = row[per[0x200]] if 0x200 in per else size
        f = row[per[0x400]] if 0x400 in per else (first_flags if i == 0 and first_flags is not None else sample_flags)
        c = row[per[0x800]] if 0x800 in per else 0
        if not 0 < d <= _MAX_DURATION or not s:
            raise Mp4Unsupported(f"a sample of duration {d} and {s} bytes")
        track.durations.append(d)
        track.sizes.append(s)
        track.offsets.append(c - (1 << 32) if c >= 1 << 31 else c)  # signed whatever the version, as ffmpeg reads
        if not f & _NON_SYNC:
            track.sync.append(len(track.sizes))
        track.decode_time += d
        total += s
    if count:
        if not any(m.body <= position and position + total <= m.end for m in media):
            raise Mp4Unsupported(f"a run's samples at byte {position} are not inside one mdat box")
        track.chunks.append((position, total, count))


# -- writing ---------------------------------------------------------------------------------------------------

def _layout(moov: bytes, boxes: dict[bytes, Box], track: _Track, stsd_type: bytes) -> tuple[bytes, int]:
    """What goes before the media: ftyp, the new moov and mdat's header; and the media's length."""
    payload = sum(length for _, length, _ in track.chunks)
    ftyp = _ftyp(stsd_type)
    mdat_header = 8 if payload + 8 <= _OFFSET_LIMIT else 16
    co64 = False
    probe = _new_moov(moov, boxes, track, [0] * len(track.chunks), co64)
    if len(ftyp) + len(probe) + mdat_header + payload > _OFFSET_LIMIT:
        co64 = True
        probe = _new_moov(moov, boxes, track, [0] * len(track.chunks), co64)
    offsets, at = [], len(ftyp) + len(probe) + mdat_header
    for _, length, _ in track.chunks:
        offsets.append(at)
        at += length
    new_moov = _new_moov(moov, boxes, track, offsets, co64)
    assert len(new_moov) == len(probe)  # the offsets' width was chosen with the probe
    mdat = _HEAD.pack(8 + payload, b"mdat") if mdat_header == 8 else _HEAD.pack(1, b"mdat") + _U64.pack(16 + payload)
    return ftyp + new_moov + mdat, payload


def _ftyp(stsd_type: bytes) -> bytes:
    brands = [b"isom", b"iso2", *([b"avc1"] if stsd_type == b"avc1" else []), b"mp41"]
    return _box(b"ftyp", b"isom" + _U32.pack(0x200) + b"".join(brands))


def _new_moov(moov: bytes, boxes: dict[bytes, Box], track: _Track, chunk_offsets: list[int], co64: bool) -> bytes:
    """The moov of the standard MP4: the fragmented one's boxes in their order, mvex left out, the headers'
    durations and the sample tables made from the fragments, an edit list after tkhd."""
    duration = sum(track.durations)
    made = {
        b"mvhd": _with_duration(moov, boxes[b"mvhd"], duration, track.timescale),
        b"tkhd": _with_duration(moov, boxes[b"tkhd"], duration) + _edit_list(track, duration),
        b"mdhd": _with_duration(moov, boxes[b"mdhd"], duration),
        b"stbl": _box(b"stbl", _verbatim(moov, boxes[b"stsd"]) + _sample_tables(track, chunk_offsets, co64)),
        b"mvex": b"",
    }

    def rebuilt(parent: Box) -> bytes:
        parts = []
        for box in _children(moov, parent.body, parent.end):
            if box.type in made:
                parts.append(made[box.type])
            elif box.type in (b"trak", b"mdia", b"minf"):  # the track's path: one level each (_SHAPES)
                parts.append(rebuilt(box))
            else:
                parts.append(_verbatim(moov, box))
        return _box(parent.type, b"".join(parts))

    return rebuilt(boxes[b"moov"])


def _with_duration(buf: bytes, box: Box, duration: int, timescale: int | None = None) -> bytes:
    """mvhd, tkhd or mdhd with ``duration`` (and mvhd with ``timescale``), version 1 only where needed."""
    version, flags = _full(buf, box)
    wide = version == 1
    pos = box.body + 4
    created, modified = struct.unpack_from(">QQ" if wide else ">II", buf, pos)
    pos += 16 if wide else 8
    middle_bytes = 8 if box.type == b"tkhd" else 4  # tkhd: track_ID and a reserved word; the others: timescale
    middle = buf[pos : pos + middle_bytes] if timescale is None else _U32.pack(timescale)
    pos += middle_bytes + (8 if wide else 4)
    v1 = max(created, modified, duration) > 0xFFFFFFFF
    head = struct.pack(">QQ" if v1 else ">II", created, modified)
    return _full_box(box.type, int(v1), flags, head + middle + (_U64 if v1 else _U32).pack(duration) + buf[pos : box.end])


def _edit_list(track: _Track, duration: int) -> bytes:
    """The presentation starts at the first sample's composition time (after B-frames' delay) and lasts the
    track's duration, as ffmpeg's remux writes; a track shown otherwise is refused."""
    decode, first, last = 0, track.offsets[0], 0
    for d, c in zip(track.durations, track.offsets, strict=True):
        if decode + c < first:
            raise Mp4Unsupported("a sample shown before the first")
        last = max(last, decode + c + d)
        decode += d
    if first < 0 or last - first != duration:
        raise Mp4Unsupported(f"a presentation from {first} to {last} in a track of duration {duration}")
    v1 = max(duration, first) > 0x7FFFFFFF
    entry = struct.pack(">Qq" if v1 else ">Ii", duration, first) + struct.pack(">hh", 1, 0)
    return _box(b"edts", _full_box(b"elst", int(v1), 0, _U32.pack(1) + entry))


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """Run-length pairs (count, value)."""
    out: list[tuple[int, int]] = []
    for v in values:
        if out and out[-1][1] == v:
            out[-1] = (out[-1][0] + 1, v)
        else:
            out.append((1, v))
    return out


def _sample_tables(track: _Track, chunk_offsets: list[int], co64: bool) -> bytes:
    n = len(track.sizes)
    stts = _runs(track.durations)
    out = [_full_box(b"stts", 0, 0, _U32.pack(len(stts)) + b"".join(struct.pack(">II", *r) for r in stts))]
    if len(track.sync) != n:
        out.append(_full_box(b"stss", 0, 0, _U32.pack(len(track.sync)) + struct.pack(f">{len(track.sync)}I", *track.sync)))
    if any(track.offsets):
        signed = min(track.offsets) < 0
        ctts = _runs(track.offsets)
        rows = b"".join(struct.pack(">Ii" if signed else ">II", *r) for r in ctts)
        out.append(_full_box(b"ctts", int(signed), 0, _U32.pack(len(ctts)) + rows))
    stsc: list[tuple[int, int, int]] = []
    for i, (_, _, count) in enumerate(track.chunks):
        if not stsc or stsc[-1][1] != count:
            stsc.append((i + 1, count, 1))
    out.append(_full_box(b"stsc", 0, 0, _U32.pack(len(stsc)) + b"".join(struct.pack(">III", *r) for r in stsc)))
    if len(set(track.sizes)) == 1:
        out.append(_full_box(b"stsz", 0, 0, struct.pack(">II", track.sizes[0], n)))
    else:
        out.append(_full_box(b"stsz", 0, 0, struct.pack(f">II{n}I", 0, n, *track.sizes)))
    k = len(chunk_offsets)
    kind, fmt = (b"co64", f">{k}Q") if co64 else (b"stco", f">{k}I")
    out.append(_full_box(kind, 0, 0, _U32.pack(k) + struct.pack(fmt, *chunk_offsets)))
    return b"".join(out)


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


_NO_COPY_FILE_RANGE = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM)


def _copy(src: int, dst: int, offset: int, length: int) -> int:
    """Copy ``length`` bytes at ``offset`` of ``src`` to ``dst``'s position, in the kernel where it can."""
    left = length
    try:
        while left:
            n = os.copy_file_range(src, dst, left, offset + length - left)
            if n == 0:
                raise OSError(errno.EIO, f"the source ended {left} bytes early")
            left -= n
    except OSError as exc:
        if exc.errno not in _NO_COPY_FILE_RANGE or left != length:
            raise
        while left:
            block = os.pread(src, min(left, 1 << 20), offset + length - left)
            if not block:
                raise OSError(errno.EIO, f"the source ended {left} bytes early") from exc
            left -= _write_all(dst, block)
    return length
