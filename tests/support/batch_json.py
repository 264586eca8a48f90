"""A batch's JSON as the tests read and rewrite it: ``PREFIX.epNNNNNNNNN.json`` as it is, ``.json.zst`` decompressed.

A recording that compresses any array writes its batch JSON as zstd frames
(``.json.zst``, see ``envrec.formats.compression``); gym-recording's reader
and a plain ``json.load`` read only the uncompressed ones.
"""

from __future__ import annotations

import json
import os
from typing import Any

import zstandard

__all__ = ["batch_text", "load_batch", "stored_bytes"]


def batch_text(path: str | os.PathLike) -> bytes:
    """The JSON text of a batch file (or of any JSON document; ``.zst`` ones decompressed)."""
    with open(path, "rb") as f:
        data = f.read()
    if os.fspath(path).endswith(".zst"):
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as r:
            return r.read()
    return data


def load_batch(path: str | os.PathLike) -> Any:
    """A batch file parsed."""
    return json.loads(batch_text(path))


def stored_bytes(path: str | os.PathLike, text: bytes) -> bytes:
    """``text`` as a file named ``path`` stores it: one zstd frame for a ``.zst``, as it is otherwise."""
    return zstandard.ZstdCompressor().compress(text) if os.fspath(path).endswith(".zst") else text
