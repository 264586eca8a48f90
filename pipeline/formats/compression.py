"""Compression of trace arrays: which codecs, how chunks are made and read back.

A compressed array is stored as consecutive independently compressed
*chunks* of whole rows (many rows per chunk: Atari frames compress 80-500x
one by one but 170-1,100x in chunks of 64). Its descriptor in the batch JSON
says ``"codec"`` and lists the chunks as ``[rows, stored_bytes]`` pairs, so a
reader can decompress one array without touching the others, and the
batch's CRC-32 covers the stored (compressed) bytes.

Integer and bool arrays may also be *delta filtered* before compression
(``"filter": "xor"`` in the descriptor): in each chunk every row is XORed
with the row before it, the chunk's first row kept as it is, so consecutive
frames that share most of their pixels become mostly zeros and every chunk
still decodes alone. The serializer chooses it per array, once per
recording, by compressing its first chunk of two or more rows both ways
(``Compression(delta=False)`` never filters).

``compression="auto"`` (the recorders' default) compresses image-like arrays
only (``IMAGE_ROW_BYTES``): integer, at least two dimensions, rows of at
least 1 KiB; small vector arrays (CartPole's) stay raw and readable by
gym-recording. When any array of a recording is compressed, its batches'
JSON is compressed as well (``.json.zst``, zstd frames, see
``decompress_frames``).

The compression happens in the serializer worker, never in the env process.
``zstd`` (the ``zstandard`` package) is a dependency; ``lz4`` (the ``lz4``
package, ``pip install envrec[lz4]``) trades ratio for speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..extras import install_hint

__all__ = [
    "ARRAY_SELECTIONS", "CODECS", "FILTERS", "IMAGE_ROW_BYTES", "JSON_ZST_SUFFIX", "Compression", "compressor",
    "decompress_frames", "decompress_into", "json_compressor", "parse_compression", "xor_decode", "xor_encode",
]

CODECS = ("zstd", "lz4")
FILTERS = ("xor",)
ARRAY_SELECTIONS = ("all", "image-like")
IMAGE_ROW_BYTES = 1024  # "image-like": integer rows of at least this many bytes in at least two dimensions
JSON_LEVEL = 3  # zstd level of compressed batch JSON
JSON_ZST_SUFFIX = ".zst"  # a compressed batch JSON is PREFIX.epNNNNNNNNN.json.zst
XOR_LOOP_ROW_BYTES = 2048  # wider rows decode row by row (numpy's accumulate is slow along axis 0 of wide rows)
DEFAULT_LEVELS = {"zstd": 3, "lz4": 0}
LEVEL_RANGES = {"zstd": (-7, 22), "lz4": (0, 16)}  # lz4: 0 is the fast mode, 3-16 its high-compression levels
DEFAULT_CHUNK_BYTES = 4 << 20
MAX_CHUNK_ROWS = 1024  # small rows (rewards, flags): a chunk per 1,024 rows at most


@dataclass(frozen=True)
class Compression:
    """How a trace's arrays are compressed: ``codec`` at ``level``, in chunks of about ``chunk_bytes``.

    Recorders also take the short forms ``compression="auto"`` (their default:
    ``Compression(arrays="image-like")``), ``"zstd"`` or ``"zstd:LEVEL"``.

    Args:
        codec: ``"zstd"`` (the default; the ``zstandard`` package) or ``"lz4"``
            (faster, a lower ratio; ``pip install envrec[lz4]``).
        level: the codec's level, an integer: zstd -7 to 22, lz4 0 (its fast
            mode) or 3 to 16. Default None: zstd 3, lz4 0.
        chunk_bytes: about how many bytes of whole rows go into one
            independently compressed chunk, a positive integer. Default 4 MiB
            (at most 1,024 rows a chunk).
        delta: whether integer and bool arrays may be XOR-filtered row by row
            within each chunk before compression (chosen per array, when it
            makes the array's first chunk smaller). Default True.
        arrays: which arrays are compressed: ``"all"`` (the default) or
            ``"image-like"`` (integer arrays of at least two dimensions whose
            rows are at least 1 KiB; the others stay raw).

    Raises:
        ConfigError: an unknown codec, a level out of its range, a chunk size
            that is not a positive integer, a ``delta`` that is not a bool, an
            unknown ``arrays``, or the codec's package not installed.
    """

    codec: str = "zstd"
    level: int | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    delta: bool = True
    arrays: str = "all"

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ConfigError(f"compression codec {self.codec!r} is not known: use one of {', '.join(CODECS)} or None")
        if self.level is not None:
            lo, hi = LEVEL_RANGES[self.codec]
            if not isinstance(self.level, int) or not lo <= self.level <= hi:
                raise ConfigError(f"{self.codec} compression level must be an integer in [{lo}, {hi}], not {self.level!r}")
        if not isinstance(self.chunk_bytes, int) or self.chunk_bytes <= 0:
            raise ConfigError(f"compression chunk_bytes must be a positive integer, not {self.chunk_bytes!r}")
        if not isinstance(self.delta, bool):
            raise ConfigError(f"compression delta must be True or False, not {self.delta!r}")
        if self.arrays not in ARRAY_SELECTIONS:
            raise ConfigError(f"compression arrays must be one of {', '.join(map(repr, ARRAY_SELECTIONS))}, not {self.arrays!r}")
        _module(self.codec)  # a missing package is a configuration error, raised where the recorder is built

    @property
    def effective_level(self) -> int:
        return DEFAULT_LEVELS[self.codec] if self.level is None else self.level

    def chunk_rows(self, row_bytes: int) -> int:
        """Rows per chunk for rows of ``row_bytes``."""
        return max(1, min(MAX_CHUNK_ROWS, self.chunk_bytes // max(1, row_bytes)))

    def compresses(self, dtype: str, shape: tuple[int, ...]) -> bool:
        """Whether an array of rows of ``shape`` and ``dtype`` is compressed (``arrays``)."""
        if self.arrays == "all":
            return True
        dt = np.dtype(dtype)
        return dt.kind in "iu" and len(shape) >= 2 and dt.itemsize * int(np.prod(shape)) >= IMAGE_ROW_BYTES

    def filters(self, dtype: str) -> bool:
        """Whether the delta filter may be tried on an array of ``dtype`` (integer or bool, with ``delta``)."""
        return self.delta and np.dtype(dtype).kind in "biu"

    def describe(self) -> dict:
        """What the manifest's ``settings.compression`` says."""
        return {"codec": self.codec, "level": self.effective_level, "chunk_bytes": self.chunk_bytes, "delta": self.delta,
                "arrays": self.arrays}


def parse_compression(value: str | Compression | None) -> Compression | None:
    """``None``, ``"auto"`` (image-like arrays only), a codec name (``"zstd"``, ``"zstd:9"``: codec and level) or a
    ``Compression``."""
    if value is None or isinstance(value, Compression):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"compression must be None, 'auto', a codec name such as 'zstd' or a Compression, not {value!r}")
    if value == "auto":
        return Compression(arrays="image-like")
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
        extra = "" if codec == "zstd" else f" ({install_hint('lz4')})"
        raise ConfigError(f"{codec} compression needs the {exc.name} package{extra}") from exc


def compressor(c: Compression) -> Callable[[memoryview], bytes]:
    """A function compressing one chunk (one per array field: zstd contexts are reused, not shared)."""
    mod = _module(c.codec)
    if c.codec == "zstd":
        return mod.ZstdCompressor(level=c.effective_level, write_content_size=True).compress
    level = c.effective_level
    return lambda data: mod.compress(data, compression_level=level, store_size=True)


_decompressors = threading.local()  # per thread: a zstd context used by two threads at once corrupts what it returns


def _decompressor(codec: str) -> Callable[[Any, int], bytes]:
    """The thread's decompressing function for ``codec`` (its zstd context reused, never shared between threads:
    the viewer's server and a user's reader threads decompress at the same time)."""
    mine: dict[str, Callable[[Any, int], bytes]] = _decompressors.__dict__
    if codec not in mine:
        if codec not in CODECS:
            raise ValueError(f"unknown compression codec {codec!r}")
        mod = _module(codec)
        if codec == "zstd":
            d = mod.ZstdDecompressor()
            mine[codec] = lambda data, size: _zstd_chunk(mod, d, data, size)
        else:
            mine[codec] = lambda data, size: _lz4_chunk(mod, data, size)
    return mine[codec]


def _zstd_chunk(mod: Any, d: Any, data: Any, size: int) -> bytes:
    """One zstd chunk that must make ``size`` bytes, refused before anything is allocated when its frame says
    otherwise: zstd allocates what a frame's header declares (80 KB of zeros declare 2 GiB)."""
    declared = mod.frame_content_size(data)
    if declared not in (size, -1):  # -1: not declared; then max_output_size bounds the buffer
        raise ValueError(f"its frame says it decompresses to {declared} bytes, its rows need {size}")
    return d.decompress(data, max_output_size=size)


def _lz4_chunk(mod: Any, data: Any, size: int) -> bytes:
    """One lz4 frame that must make ``size`` bytes: decompressed to at most ``size + 1`` of them."""
    declared = mod.get_frame_info(data).get("content_size") or 0  # 0: not declared
    if declared not in (size, 0):
        raise ValueError(f"its frame says it decompresses to {declared} bytes, its rows need {size}")
    out = mod.LZ4FrameDecompressor().decompress(bytes(data), max_length=size + 1)
    if len(out) > size:
        raise ValueError(f"it decompresses to more than the {size} bytes its rows need")
    return out


def _words(rows: np.ndarray) -> np.ndarray:
    """A (n, row_bytes) uint8 array seen as rows of the widest unsigned integers its rows divide into."""
    for dt in (np.uint64, np.uint32, np.uint16):
        if rows.shape[1] % np.dtype(dt).itemsize == 0:
            return rows.view(dt)
    return rows


def xor_encode(rows: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The delta filter of one chunk: ``out[0] = rows[0]``, ``out[i] = rows[i] ^ rows[i - 1]``; ``out``.

    Args:
        rows: the chunk, a C-contiguous (n, row_bytes) uint8 array.
        out: where the filtered rows go, an array like ``rows`` (not overlapping it).
    """
    a, o = _words(rows), _words(out)
    if len(a):
        o[0] = a[0]
        np.bitwise_xor(a[1:], a[:-1], out=o[1:])
    return out


def xor_decode(rows: np.ndarray) -> None:
    """Undo ``xor_encode`` in place: each row XORed with the decoded row before it.

    Args:
        rows: a filtered chunk, a C-contiguous writable (n, row_bytes) uint8 array.
    """
    w = _words(rows)
    if rows.shape[1] >= XOR_LOOP_ROW_BYTES:
        for i in range(1, len(w)):
            np.bitwise_xor(w[i], w[i - 1], out=w[i])
    elif len(w) > 1:
        np.bitwise_xor.accumulate(w, axis=0, out=w)


def decompress_into(out: memoryview, stored: memoryview, codec: str, chunks: list, row_bytes: int,
                    row_filter: str | None = None) -> None:
    """Decompress an array's chunks (``[rows, stored_bytes]`` pairs) from ``stored`` into ``out`` (raw bytes).

    Args:
        out: where the array's raw bytes go (as many as the chunks' rows make).
        stored: the array's stored bytes.
        codec: one of ``CODECS``.
        chunks: ``[rows, stored_bytes]`` of each chunk, in order.
        row_bytes: the bytes of one row.
        row_filter: the descriptor's ``"filter"`` (``"xor"``) or None.

    Raises:
        ValueError: a chunk does not decompress to its rows' size, or an unknown filter.
    """
    if row_filter is not None and row_filter not in FILTERS:
        raise ValueError(f"unknown filter {row_filter!r}")
    decompress = _decompressor(codec)
    src = dst = 0
    for rows, nbytes in chunks:
        want = rows * row_bytes
        raw = decompress(stored[src : src + nbytes], want)
        if len(raw) != want:
            raise ValueError(f"a {codec} chunk decompressed to {len(raw)} bytes, its {rows} rows need {want}")
        out[dst : dst + want] = raw
        if row_filter is not None and rows > 1:
            xor_decode(np.frombuffer(out[dst : dst + want], np.uint8).reshape(rows, row_bytes))
        src += nbytes
        dst += want
    if dst != len(out) or src != len(stored):
        raise ValueError(f"the chunks cover {dst} of {len(out)} bytes ({src} of {len(stored)} stored)")


def json_compressor() -> Any:
    """The zstd compressor of a batch's JSON (a ``zstandard.ZstdCompressor``; its ``compressobj()`` makes one frame)."""
    return _module("zstd").ZstdCompressor(level=JSON_LEVEL)


def decompress_frames(data: bytes, limit: int, check: Callable[[bytes], None] | None = None) -> bytes:
    """Concatenated zstd frames (a ``.json.zst``) decompressed, at most ``limit`` bytes of them.

    Args:
        data: the stored bytes.
        limit: the most bytes they may decompress to (a bound against a decompression bomb).
        check: called with each decompressed piece (1 MiB) as it comes, to refuse the rest early by raising
            (``envrec.formats.json_docs.JsonBudget``: what parsing them would cost).

    Raises:
        ValueError: not zstd frames, more than ``limit`` bytes, or more than the memory left. (Frames cut
            short give what they hold: the text then does not parse, which the caller's JSON parser says.)
    """
    zstd = _module("zstd")
    out, size = [], 0
    try:
        with zstd.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            while piece := reader.read(1 << 20):
                size += len(piece)
                if size > limit:
                    raise ValueError(f"it decompresses to more than {limit} bytes")
                if check is not None:
                    check(piece)
                out.append(piece)
        return b"".join(out)
    except zstd.ZstdError as exc:
        raise ValueError(f"not zstd frames ({exc})") from None
    except MemoryError:
        raise ValueError(f"it decompresses to more than the memory left (over {size} bytes)") from None
