"""ffmpeg: the one envrec would use (``envrec.formats.ffmpeg.find_ffmpeg``), its version, and a test clip
encoded with envrec's own command lines and default ``VideoSettings`` (the fragmented MP4, then the remux
into a standard one), decoded back and its frames counted. Everything goes into a temporary folder removed
after; every ffmpeg runs under a time limit.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from ..errors import ConfigError
from ..formats.ffmpeg import FFMPEG_ENV_VAR, VideoSettings, encode_command, encoded_size, find_ffmpeg, remux_command
from .result import CheckStatus, Result, run_process, tail

__all__ = ["CLIP_FRAMES", "FFMPEG_TIMEOUT_S", "ffmpeg_results"]

FFMPEG_TIMEOUT_S = 30.0  # each ffmpeg run: a 1-second clip of small frames takes ~0.1 s
CLIP_FRAMES, CLIP_FPS = 30, 30.0
CLIP_HEIGHT, CLIP_WIDTH = 47, 63  # odd on purpose: envrec pads odd sizes for yuv420p, and that is tested too
INSTALL = (f"pip install imageio-ffmpeg (a dependency of envrec), or apt-get install ffmpeg, or set {FFMPEG_ENV_VAR} "
           "to an ffmpeg binary")


def _clip() -> bytes:
    """Frames of a gradient moving one pixel a frame: something a codec must really encode."""
    y, x = np.mgrid[0:CLIP_HEIGHT, 0:CLIP_WIDTH]
    frames = [np.stack([(x * 4 + t) % 256, (y * 5) % 256, np.full_like(x, t * 8 % 256)], axis=-1) for t in range(CLIP_FRAMES)]
    return np.asarray(frames, dtype=np.uint8).tobytes()


def _find() -> tuple[Result, str | None]:
    try:
        exe, backend = find_ffmpeg()
    except ConfigError as exc:
        return Result("ffmpeg", CheckStatus.FAIL, str(exc), INSTALL), None
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        named = [f"{v}={os.environ[v]}" for v in (FFMPEG_ENV_VAR, "IMAGEIO_FFMPEG_EXE") if os.environ.get(v)]
        given = f" (named by {', '.join(named)})" if named else ""
        return Result("ffmpeg", CheckStatus.FAIL, f"{exe}{given} is not an executable file",
                      f"unset IMAGEIO_FFMPEG_EXE or point it at ffmpeg; or {INSTALL}", facts={"path": exe}), None
    done = run_process([exe, "-hide_banner", "-version"], FFMPEG_TIMEOUT_S)
    first = done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
    if not first:
        return Result("ffmpeg", CheckStatus.FAIL, f"{exe} -version failed: {tail(done.stderr) or done.returncode}", INSTALL,
                      facts={"path": exe}), None
    version = first.split()[2] if first.startswith(("ffmpeg version", "avconv version")) and len(first.split()) > 2 else first
    return Result("ffmpeg", CheckStatus.PASS, f"{exe} ({backend} {version})", facts={"path": exe, "version": version}), exe


def _encode(exe: str, folder: str) -> Result:
    settings = VideoSettings()
    fragmented, final = os.path.join(folder, "clip.fragmented.mp4"), os.path.join(folder, "clip.mp4")
    steps = [
        ("encode", encode_command(exe, CLIP_WIDTH, CLIP_HEIGHT, 3, CLIP_FPS, fragmented, settings), _clip()),
        ("remux", remux_command(exe, fragmented, final), None),
    ]
    for step, cmd, data in steps:
        done = run_process(cmd, FFMPEG_TIMEOUT_S, stdin=data)
        if done.returncode != 0:
            why = f"no end within {FFMPEG_TIMEOUT_S:g} s" if done.returncode is None else tail(done.stderr, 2)
            return Result("ffmpeg encodes", CheckStatus.FAIL, f"the {step} of a test clip failed: {why}",
                          f"this ffmpeg cannot do what envrec asks ({settings.codec}, {settings.pix_fmt}, fragmented MP4): "
                          f"{INSTALL}", facts={"command": cmd})
    w, h = encoded_size(CLIP_WIDTH, CLIP_HEIGHT, settings.pix_fmt)
    done = run_process([exe, "-nostdin", "-v", "error", "-i", final, "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"], FFMPEG_TIMEOUT_S)
    decoded = len(done.raw) // (w * h * 3) if done.returncode == 0 else 0
    size = os.path.getsize(final)
    if decoded != CLIP_FRAMES:
        return Result("ffmpeg encodes", CheckStatus.FAIL, f"the test clip decodes to {decoded} frames, not {CLIP_FRAMES}: "
                      f"{tail(done.stderr) or 'no error said'}", INSTALL, facts={"decoded": decoded})
    return Result("ffmpeg encodes", CheckStatus.PASS, f"a {CLIP_FRAMES}-frame {CLIP_WIDTH}x{CLIP_HEIGHT} test clip with envrec's "
                  f"settings ({settings.codec} {settings.preset}, padded to {w}x{h}, remuxed): {size} bytes, "
                  f"{decoded} frames decoded back", facts={"bytes": size, "decoded": decoded})


def ffmpeg_results() -> list[Result]:
    """ffmpeg found (and its version), then a test clip encoded, remuxed and decoded back."""
    found, exe = _find()
    if exe is None:
        return [found]
    folder = tempfile.mkdtemp(prefix="envrec-doctor-")
    try:
        return [found, _encode(exe, folder)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
