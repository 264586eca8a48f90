"""Streams episodes into gym-recording-style trace batches, in bounded memory.

An episode's arrays must each be contiguous in the batch's ``.bin``, but steps
arrive interleaved. The largest array field (usually the observation) is
written straight into the batch's temporary ``.bin`` as it arrives; every
other field goes to a small spill file of its own, appended to the ``.bin``
(a kernel-side copy) when the episode ends. JSON-valued fields (infos, Text
leaves) are spilled as JSON text and spliced into the batch's ``.json`` the
same way. Nothing held in memory grows with the length of an episode.

When the recording compresses arrays, the ``.json`` is written compressed
too (``.json.zst``): zstd frames, each ended where a checkpoint records the
file's size (``state``) and at the commit, so a successor that cuts the file
back to its checkpoint lands on a frame boundary and goes on with new frames.

A batch becomes visible only through ``commit()``: both files fsynced and
moved into place, the folder fsynced; the manifest (written by the caller)
is the last to name it. Every file is created, moved and read back relative
to the recording's folder opened once (``envrec.formats.ownfolder``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from envrec.formats.atomic import TMP_SUFFIX, stream_crc32
from envrec.formats.compression import JSON_ZST_SUFFIX, json_compressor
from envrec.formats.fullwrite import writev_all
from envrec.formats.ownfolder import OwnFolder
from envrec.formats.trace_format import BatchEntry, batch_names

if TYPE_CHECKING:
    from .episode_fields import EpisodeFields
    from .spill import Spill

__all__ = ["BatchWriter"]

FILE_BUFFER_BYTES = 1 << 20  # batch files: large sequential writes
DIRECT_ROW_BYTES = 16 << 10  # rows at least this large go from the ring to the batch file without a copy in between
ALIGN = 8


class BatchWriter:
    """One batch being written: temporary ``.bin`` and ``.json`` in the output folder."""

    def __init__(self, own: OwnFolder, prefix: str, first_episode: int, head_part: dict | None = None,
                 compress_json: bool = False) -> None:
        """Args:
            own, prefix: the recording's folder (opened once) and its prefix.
            first_episode: the index of its first record's episode.
            head_part: ``{"index", "first_step"}`` when its first record continues an episode (a part p >= 1).
            compress_json: write the batch's JSON as zstd frames (``.json.zst``).
        """
        self.own = own
        self.first = first_episode
        self.head_part = head_part
        self.continues = False  # its last record is a part continued in the next batch
        self.json_name, self.bin_name = batch_names(prefix, first_episode, head_part["index"] if head_part else 0)
        self._zstd: Any = json_compressor() if compress_json else None
        self._frame: Any = None  # the zstd frame being written (a compressobj)
        self.json_name += JSON_ZST_SUFFIX if compress_json else ""
        self.bin_tmp, self.json_tmp = own.tmp_name(self.bin_name), own.tmp_name(self.json_name)
        self.bin = _create(own, self.bin_tmp, "w+b")  # read too: a part's last row (read_bin)
        try:
            self.json = _create(own, self.json_tmp, "wb")
        except BaseException:
            own.discard(self.bin, self.bin_tmp)
            raise
        self.bin_size = 0
        self.json_size = 0
        self.episodes = 0
        self.steps = 0
        self.array_bytes = 0  # the episodes' arrays uncompressed (for the compression ratio)
        self._write_json(b'{"episodes": [')

    @classmethod
    def reopen(cls, own: OwnFolder, prefix: str, state: dict) -> BatchWriter:
        """The batch a dead serializer was writing, cut back to its last checkpoint (see ``state``)."""
        self = cls.__new__(cls)
        self.own = own
        self.first = state["first"]
        self.head_part, self.continues = state.get("head_part"), state.get("continues", False)
        self.json_name, self.bin_name = batch_names(prefix, self.first, self.head_part["index"] if self.head_part else 0)
        self._zstd = json_compressor() if state.get("json_zst") else None
        self._frame = None
        self.json_name += JSON_ZST_SUFFIX if self._zstd is not None else ""
        self.bin_tmp, self.json_tmp = own.tmp_name(self.bin_name), own.tmp_name(self.json_name)
        for old, final, new in (
            (state["bin_tmp"], self.bin_name, self.bin_tmp),
            (state["json_tmp"], self.json_name, self.json_tmp),
        ):
            found = _find_batch_file(own, own.name_of(old), final)
            if found != new:
                own.replace(found, new)
        self.bin = own.open_existing(self.bin_tmp, "r+b", buffering=FILE_BUFFER_BYTES)
        self.json = own.open_existing(self.json_tmp, "r+b", buffering=FILE_BUFFER_BYTES)
        self.bin_size, self.json_size = state["bin_size"], state["json_size"]
        for f, size in ((self.bin, self.bin_size), (self.json, self.json_size)):
            f.truncate(size)
            f.seek(size)
        self.episodes, self.steps = state["episodes"], state["steps"]
        self.array_bytes = state["array_bytes"]
        return self

    def state(self) -> dict:
        """Where this batch stands, for a checkpoint (its files flushed first, a compressed JSON's frame ended)."""
        self._end_frame()
        self.bin.flush()
        self.json.flush()
        return {
            "first": self.first,
            "bin_tmp": os.path.join(self.own.path, self.bin_tmp),  # paths, as checkpoints have always said
            "json_tmp": os.path.join(self.own.path, self.json_tmp),
            "bin_size": self.bin_size,
            "json_size": self.json_size,
            "episodes": self.episodes,
            "steps": self.steps,
            "array_bytes": self.array_bytes,
            **({"head_part": self.head_part} if self.head_part else {}),
            **({"continues": True} if self.continues else {}),
            "json_zst": self._zstd is not None,
        }

    # -- writing ---------------------------------------------------------
    def _write_json(self, b) -> None:
        if self._zstd is not None:
            if self._frame is None:
                self._frame = self._zstd.compressobj()
            b = self._frame.compress(b)
        self.json.write(b)
        self.json_size += len(b)

    def _end_frame(self) -> None:
        if self._frame is not None:
            frame, self._frame = self._frame, None
            b = frame.flush()
            self.json.write(b)
            self.json_size += len(b)

    def write_bin(self, mv) -> None:
        self.bin.write(mv)
        self.bin_size += len(mv) if isinstance(mv, bytes) else mv.nbytes

    def write_bin_rows(self, rows: np.ndarray) -> None:
        """Append the rows of a (n, row_bytes) array: large rows straight from where they are (the ring)
        with one ``writev``, small ones through the file's buffer as one contiguous copy."""
        if rows.shape[1] < DIRECT_ROW_BYTES:
            self.write_bin(np.ascontiguousarray(rows))
            return
        self.bin.flush()
        writev_all(self.bin.fileno(), list(rows))
        self.bin.seek(0, os.SEEK_END)
        self.bin_size += rows.nbytes

    def read_bin(self, offset: int, n: int) -> bytes:
        """``n`` bytes of the .bin written so far, from ``offset`` on."""
        self.bin.flush()
        data = os.pread(self.bin.fileno(), n, offset)
        if len(data) != n:
            raise OSError(f"{self.bin_tmp} holds {len(data)} of the {n} bytes asked at {offset}")
        return data

    def truncate_bin(self, size: int) -> None:
        """Cut the .bin back to ``size`` bytes (an episode just reset leaving the batch: see ``episode_parts``)."""
        self.bin.flush()
        self.bin.truncate(size)
        self.bin.seek(size)
        self.bin_size = size

    def pad_bin(self) -> None:
        pad = -self.bin_size % ALIGN
        if pad:
            self.write_bin(b"\0" * pad)

    def append_spill(self, spill: Spill) -> None:
        self.bin_size += spill.append_to(self.bin)

    def write_episode(self, meta: dict, fields: EpisodeFields) -> None:
        """Finish the arrays of an episode in the .bin, then write its JSON.

        ``fields.structure`` maps the episode's top-level keys to nested
        dict/list shapes whose leaves are field keys; ``meta`` holds the
        scalar keys.
        """
        for f in fields.arrays:
            f.flush_chunk(self)  # the direct field's last chunk must follow its others, before any spill
        for f in fields.arrays:
            if f.spill is None:  # the direct field, already in place
                continue
            self.pad_bin()
            f.offset = self.bin_size
            if f.stored:
                self.append_spill(f.spill)
        by_key: dict[tuple, Any] = {f.key: f.descriptor(self.bin_name) for f in fields.arrays}
        self.array_bytes += sum(f.rows * f.row_bytes for f in fields.arrays)
        tokens = {}
        for i, jf in enumerate(fields.jsons):
            token = f"\0envrec-stream-{i}\0"
            tokens[json.dumps(token)] = jf
            by_key[jf.key] = token
        episode = dict(meta)
        for top, shape in fields.structure.items():
            episode[top] = _fill(shape, by_key)
        text = json.dumps(episode, allow_nan=False)
        if self.episodes:
            self._write_json(b",\n")
        self._splice(text, tokens)
        self.episodes += 1

    def _splice(self, text: str, tokens: dict) -> None:
        """Write ``text`` with each token replaced by a JSON list streamed from its spill."""
        for tok, jf in tokens.items():
            before, after = text.split(tok, 1)
            self._write_json(before.encode("utf-8") + b"[")
            if self._zstd is None:
                self.json_size += jf.spill.append_to(self.json)
            else:
                for piece in jf.spill.pieces():
                    self._write_json(piece)
            self._write_json(b"]")
            text = after
        self._write_json(text.encode("utf-8"))

    # -- ending ----------------------------------------------------------
    @property
    def size(self) -> int:
        return self.bin_size + self.json_size

    def commit(self, fault=lambda name: None) -> BatchEntry:
        """Make the batch durable and visible; return its manifest entry (``fault``: see envrec.contract.faults)."""
        self._write_json(b"]}\n")
        self._end_frame()
        self.bin.flush()
        fault("commit:bin-written")
        self.own.commit(self.bin, self.bin_tmp, self.bin_name, sync_dir=False)
        fault("commit:bin")
        self.own.commit(self.json, self.json_tmp, self.json_name, sync_dir=False)
        fault("commit:json")
        self.own.fsync()
        entry: BatchEntry = {
            "first": self.first,
            "len": self.episodes,
            "fn": self.json_name,
            "bin": self.bin_name,
            "steps": self.steps,
            "json_bytes": self.json_size,
            "bin_bytes": self.bin_size,
            "array_bytes": self.array_bytes,
            "json_crc32": self._crc32(self.json_name),
            "bin_crc32": self._crc32(self.bin_name),
        }
        if self.head_part:
            entry["head_part"] = self.head_part
        if self.continues:
            entry["continues"] = True
        return entry

    def _crc32(self, name: str) -> int:
        with self.own.open_read(name) as f:
            return stream_crc32(f)

    def abort(self) -> None:
        """Drop the batch: close and remove its temporary files."""
        self.own.discard(self.bin, self.bin_tmp)
        self.own.discard(self.json, self.json_tmp)


def _create(own: OwnFolder, tmp: str, mode: str) -> Any:
    """This process's temporary file ``tmp``, new: a file of the same name (a dead process of the same pid's) is
    removed first; a symlink planted there is removed too, never written through (``O_EXCL|O_NOFOLLOW``)."""
    own.unlink(tmp)
    return own.open_new(tmp, mode, buffering=FILE_BUFFER_BYTES)


def _find_batch_file(own: OwnFolder, tmp: str, final: str) -> str:
    """Where a checkpointed batch file is now: its temporary name, one a failed successor gave it, or its
    final name (its writer died inside a commit, before the manifest named the batch)."""
    if own.lstat(tmp) is not None:
        return tmp
    for name in own.listdir():
        if name.startswith(f".{final}.") and name.endswith(TMP_SUFFIX):
            return name
    return final


def _fill(shape: Any, by_key: dict) -> Any:
    if isinstance(shape, dict):
        return {k: _fill(v, by_key) for k, v in shape.items()}
    if isinstance(shape, list):
        return [_fill(v, by_key) for v in shape]
    return by_key[shape]
