"""Finding ffmpeg and building its command lines (pure functions, unit-tested).

Discovery order (``find_ffmpeg``): an explicit path, the ``ENVREC_FFMPEG``
environment variable, ``ffmpeg`` on PATH, ``avconv`` on PATH, then the binary
that ``imageio-ffmpeg`` ships, so a plain ``pip install`` records video.

Encoding: raw frames arrive on stdin (``rgb24`` for 3 channels, ``rgba`` for
4 — byte order R, G, B, A in memory, so colours stay exact; ``gray`` for 2-D
frames). libx264 with ``yuv420p`` needs even sizes: odd sizes are padded by
one row/column, never refused. While a clip records it is a *fragmented*
MP4 (a fragment per keyframe, one keyframe a second by default, each written
through to the file at once), so a clip cut short by a kill decodes up to its
last complete fragment; a clip closed
cleanly is then remuxed (no re-encode) into a standard MP4 with its index at
the front, which every browser plays.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..option_checks import (
    BOOL,
    NON_NEGATIVE_INT,
    POSITIVE_NUMBER,
    STR,
    Accepts,
    accepts,
    check_fields,
    int_in,
    number_in,
    optional,
)

__all__ = ["FFMPEG_ENV_VAR", "VideoSettings", "encode_command", "encoded_size", "find_ffmpeg", "remux_command"]

FFMPEG_ENV_VAR = "ENVREC_FFMPEG"
PIX_FMT_IN = {1: "gray", 3: "rgb24", 4: "rgba"}


_STRINGS = Accepts("a tuple of strings", lambda v: isinstance(v, tuple | list) and all(isinstance(a, str) for a in v))


@dataclass(frozen=True)
class VideoSettings:
    """How clips are encoded. Defaults measured on RL-sized frames (see docs/reference.md, "Encoder settings").

    Args:
        codec: ffmpeg's video codec. Default ``"libx264"``.
        preset: the codec's preset; default ``"ultrafast"``, the lowest CPU
            per frame (larger files). None: the codec's default.
        crf: constant rate factor, 0-63 (lower: better and larger). Default 23;
            None: the codec's default.
        pix_fmt: the encoded pixel format. Default ``"yuv420p"``, what browsers play.
        threads: ffmpeg's encoder threads; default 1, as fast as more on small
            frames and kinder to the env's core. 0: ffmpeg's automatic threading.
        filter_threads: threads of the RGB -> YUV conversion; default 1, less CPU
            in all (measured). 0: ffmpeg's default.
        scaler: swscale's conversion; default ``"fast_bilinear"``, the cheapest
            (about 19 % less CPU a frame). ``""``: ffmpeg's default.
        keyframe_interval_s: seconds between keyframes, so the length of a
            fragment: what a kill can cost a clip at most. Default 1.0.
        nice: ffmpeg's niceness while the encoder keeps up with the env, -20 to 19;
            default 10, so on a busy machine the env's process gets the CPU first
            (and the frame ring holds what ffmpeg has not encoded yet).
        behind_nice: the niceness of the ffmpeg of a clip that starts while the
            encoder is behind (the frame ring half full or more, until it is back
            under a quarter), -20 to 19, never above ``nice``. Default 0: the
            worker's own, so that the env does not wait in lumps for a niced
            ffmpeg once the ring is full (docs/performance.md, "Long calls").
            ``behind_nice=nice``: one niceness whatever the ring holds.
        stall_timeout_s: ffmpeg taking no input this many seconds is hung: killed,
            its clip broken. Default 10.0; ``hang_timeout_s`` must exceed it.
        faststart: remux a clip closed cleanly into a standard MP4 with its index
            first (about 40 ms of CPU per clip, mostly ffmpeg starting). Default
            True; False keeps the fragmented MP4, which browsers and players play.
        zero_copy: hand frames to ffmpeg as references to the ring's pages
            (vmsplice), not copies. Default True; False writes them (one copy).
        extra_args: more ffmpeg output arguments, a tuple of strings, placed
            before the output file. Default none.

    Raises:
        ConfigError: a field of the wrong type or out of range, naming it.
    """

    codec: str = field(default="libx264", metadata=accepts(STR))
    preset: str | None = field(default="ultrafast", metadata=accepts(optional(STR)))
    crf: float | None = field(default=23, metadata=accepts(optional(number_in(0, 63))))
    pix_fmt: str = field(default="yuv420p", metadata=accepts(STR))
    threads: int = field(default=1, metadata=accepts(NON_NEGATIVE_INT))
    filter_threads: int = field(default=1, metadata=accepts(NON_NEGATIVE_INT))
    scaler: str = field(default="fast_bilinear", metadata=accepts(STR))
    keyframe_interval_s: float = field(default=1.0, metadata=accepts(POSITIVE_NUMBER))
    nice: int = field(default=10, metadata=accepts(int_in(-20, 19)))
    behind_nice: int = field(default=0, metadata=accepts(int_in(-20, 19)))
    stall_timeout_s: float = field(default=10.0, metadata=accepts(POSITIVE_NUMBER))
    faststart: bool = field(default=True, metadata=accepts(BOOL))
    zero_copy: bool = field(default=True, metadata=accepts(BOOL))
    extra_args: tuple[str, ...] = field(default_factory=tuple, metadata=accepts(_STRINGS))

    def __post_init__(self) -> None:
        check_fields(self)


def find_ffmpeg(explicit: str | None = None) -> tuple[str, str]:
    """``(path, backend)`` of the encoder to use; ConfigError naming how to fix it when none is found."""
    if explicit:
        path = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        if path is None:
            raise ConfigError(f"ffmpeg={explicit!r} is not an executable file")
        return path, _backend(path)
    from_env = os.environ.get(FFMPEG_ENV_VAR)
    if from_env:
        path = shutil.which(from_env) or (from_env if os.access(from_env, os.X_OK) else None)
        if path is None:
            raise ConfigError(f"{FFMPEG_ENV_VAR}={from_env!r} is not an executable file")
        return path, _backend(path)
    for name in ("ffmpeg", "avconv"):
        path = shutil.which(name)
        if path:
            return path, name
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe(), "ffmpeg"
    except (ImportError, RuntimeError) as exc:
        raise ConfigError(
            "found no ffmpeg to encode video: install the imageio-ffmpeg package (pip install imageio-ffmpeg, "
            f"a dependency of envrec), put ffmpeg on PATH, or set {FFMPEG_ENV_VAR} to its path ({exc})"
        ) from exc


def _backend(path: str) -> str:
    return "avconv" if os.path.basename(path).startswith("avconv") else "ffmpeg"


def encoded_size(width: int, height: int, pix_fmt: str) -> tuple[int, int]:
    """The size ffmpeg will encode: even in both directions for chroma-subsampled formats."""
    if pix_fmt in ("yuv420p", "yuvj420p", "nv12", "yuv422p"):
        return width + width % 2, height + height % 2
    return width, height


def encode_command(
    exe: str, width: int, height: int, channels: int, fps: float, out_path: str, settings: VideoSettings
) -> list[str]:
    """The command that encodes raw frames from stdin into a fragmented MP4 at ``out_path``."""
    if channels not in PIX_FMT_IN:
        raise ConfigError(f"frames must have 1, 3 or 4 channels, not {channels}")
    cmd = [exe, "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    if settings.filter_threads:
        cmd += ["-filter_threads", str(settings.filter_threads)]
    cmd += ["-f", "rawvideo", "-pix_fmt", PIX_FMT_IN[channels], "-s", f"{width}x{height}", "-framerate", f"{fps:g}"]
    cmd += ["-i", "pipe:0"]
    if encoded_size(width, height, settings.pix_fmt) != (width, height):
        cmd += ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
    cmd += ["-c:v", settings.codec]
    if settings.preset:
        cmd += ["-preset", settings.preset]
    if settings.crf is not None:
        cmd += ["-crf", str(settings.crf)]
    if settings.scaler:
        cmd += ["-sws_flags", settings.scaler]
    cmd += ["-pix_fmt", settings.pix_fmt, "-threads", str(settings.threads)]
    cmd += ["-g", str(max(1, round(fps * settings.keyframe_interval_s)))]
    cmd += ["-movflags", "+frag_keyframe+empty_moov+default_base_moof", "-flush_packets", "1"]
    cmd += [*settings.extra_args, "-f", "mp4", out_path]
    return cmd


def remux_command(exe: str, src: str, dst: str) -> list[str]:
    """The command that turns a finished fragmented MP4 into a standard one (no re-encode)."""
    return [exe, "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", src, "-c", "copy",
            "-movflags", "+faststart", "-f", "mp4", dst]
