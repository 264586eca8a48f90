"""Compression of trace arrays: which codecs, how chunks are made and read back.

A compressed array is stored as consecutive independently compressed
*chunks* of whole rows (many rows per chunk: Atari frames compress 80-500x
one by one but 170-1,100x in chunks of 64). Its descriptor in the batch JSON
says ``"codec"`` and lists the chunks as ``[rows, stored_bytes]`` pairs, so a
reader can decompress one array without touching the others, and the
batch's CRC-32 covers the stored (compressed) bytes.

The compression happens in the serializer worker, never in the env process.
``zstd`` (the ``zstandard`` package) is a dependency; ``lz4`` (the ``lz4``
package, ``pip install envrec[lz4]``) trades ratio for speed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["CODECS", "Compression", "compressor", "decompress_into", "parse_compression"]

CODECS = ("zstd", "lz4")
DEFAULT_LEVELS = {"zstd": 3, "lz4": 0}
LEVEL_RANGES = {"zstd": (-7, 22), "lz4": (0, 16)}  # lz4: 0 is the fast mode, 3-16 its high-compression levels
DEFAULT_CHUNK_BYTES = 4 << 20
MAX_CHUNK_ROWS = 1024  # small rows (rewards, flags): a chunk per 1,024 rows at most


@dataclass(frozen=True)
class Compression:
    """How a trace's arrays are compressed: ``codec`` at ``level``, in chunks of about ``chunk_bytes``.

    Recorders also take the short form ``compression="zstd"`` or ``"zstd:LEVEL"``.

    Args:
        codec: ``"zstd"`` (the default; the ``zstandard`` package) or ``"lz4"``
            (faster, a lower ratio; ``pip install envrec[lz4]``).
        level: the codec's level, an integer: zstd -7 to 22, lz4 0 (its fast
            mode) or 3 to 16. Default None: zstd 3, lz4 0.
        chunk_bytes: about how many bytes of whole rows go into one
            independently compressed chunk, a positive integer. Default 4 MiB
            (at most 1,024 rows a chunk).

    Raises:
        ConfigError: an unknown codec, a level out of its range, a chunk size
            that is not a positive integer, or the codec's package not installed.
    """

    codec: str = "zstd"
    level: int | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ConfigError(f"compression codec {self.codec!r} is not known: use one of {', '.join(CODECS)} or None")
        if self.level is not None:
            lo, hi = LEVEL_RANGES[self.codec]
            if not isinstance(self.level, int) or not lo <= self.level <= hi:
                raise ConfigError(f"{self.codec} compression level must be an integer in [{lo}, {hi}], not {self.level!r}")
        if not isinstance(self.chunk_bytes, int) or self.chunk_bytes <= 0:
            raise ConfigError(f"compression chunk_bytes must be a positive integer, not {self.chunk_bytes!r}")
        _module(self.codec)  # a missing package is a configuration error, raised where the recorder is built

    @property
    def effective_level(self) -> int:
        return DEFAULT_LEVELS[self.codec] if self.level is None else self.level

    def chunk_rows(self, row_bytes: int) -> int:
        """Rows per chunk for rows of ``row_bytes``."""
        return max(1, min(MAX_CHUNK_ROWS, self.chunk_bytes // max(1, row_bytes)))

    def describe(self) -> dict:
        return {"codec": self.codec, "level": self.effective_level, "chunk_bytes": self.chunk_bytes}


def parse_compression(value: str | Compression | None) -> Compression | None:
    """``None``, a codec name (``"zstd"``, ``"zstd:9"``: codec and level) or a ``Compression``."""
    if value is None or isinstance(value, Compression):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"compression must be None, a codec name such as 'zstd' or a Compression, not {value!r}")
    codec, _, level = value.partition(":")
    try:
        number = int(level) if level else None
    except ValueError:
        raise ConfigError(f"compression {value!r}: the level after ':' must be an integer") from None
    return Compression(codec, number)


def _module(codec: str):
    try:
        if codec == "zstd":
            import zstandard

            return zstandard
        import lz4.frame

        return lz4.frame
    except ImportError as exc:
        extra = "" if codec == "zstd" else " (pip install 'envrec[lz4]')"
        raise ConfigError(f"{codec} compression needs the {exc.name} package{extra}") from exc


def compressor(c: Compression) -> Callable[[memoryview], bytes]:
    """A function compressing one chunk (one per array field: zstd contexts are reused, not shared)."""
    mod = _module(c.codec)
    if c.codec == "zstd":
        return mod.ZstdCompressor(level=c.effective_level, write_content_size=True).compress
    level = c.effective_level
    return lambda data: mod.compress(data, compression_level=level, store_size=True)


_decompressors: dict[str, Callable[[Any, int], bytes]] = {}


def _decompressor(codec: str) -> Callable[[Any, int], bytes]:
    if codec not in _decompressors:
        if codec not in CODECS:
            raise ValueError(f"unknown compression codec {codec!r}")
        mod = _module(codec)
        if codec == "zstd":
            d = mod.ZstdDecompressor()
            _decompressors[codec] = lambda data, size: d.decompress(data, max_output_size=size)
        else:
            _decompressors[codec] = lambda data, size: mod.decompress(data)
    return _decompressors[codec]


def decompress_into(out: memoryview, stored: memoryview, codec: str, chunks: list, row_bytes: int) -> None:
    """Decompress an array's chunks (``[rows, stored_bytes]`` pairs) from ``stored`` into ``out`` (raw bytes).

    Raises ``ValueError`` when a chunk does not decompress to its rows' size.
    """
    decompress = _decompressor(codec)
    src = dst = 0
    for rows, nbytes in chunks:
        want = rows * row_bytes
        raw = decompress(stored[src : src + nbytes], want)
        if len(raw) != want:
            raise ValueError(f"a {codec} chunk decompressed to {len(raw)} bytes, its {rows} rows need {want}")
        out[dst : dst + want] = raw
        src += nbytes
        dst += want
    if dst != len(out) or src != len(stored):
        raise ValueError(f"the chunks cover {dst} of {len(out)} bytes ({src} of {len(stored)} stored)")
