"""A clip's MP4 turned into an animated GIF by ffmpeg, for TensorBoard (pure command line + one run).

TensorBoard shows a video as an image summary whose encoded image is an
animated GIF (what ``torch.utils.tensorboard``'s ``add_video`` writes through
moviepy). envrec already runs ffmpeg (``envrec.formats.ffmpeg.find_ffmpeg``:
``imageio-ffmpeg``'s binary at least, a base dependency), and ffmpeg decodes
the MP4 and encodes the GIF in one process, with a palette made for the clip
(``palettegen``/``paletteuse``, ordered dithering): no moviepy, no Pillow, no frame held in
Python. A clip padded to even sizes by the encoder is cropped back to its
frames' size (the metadata's ``frame_size``).

GIF delays are in hundredths of a second and browsers show any delay under
two hundredths as ten, so a GIF plays at most ``MAX_GIF_FPS`` frames a second;
a faster clip, or one of more than ``max_frames`` frames, is subsampled in
time (``fps=``), playing as long as the clip does, with fewer frames.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
from dataclasses import dataclass

from ..errors import FfmpegError

__all__ = ["MAX_GIF_FPS", "Gif", "clip_gif", "gif_command", "gif_fps", "gif_size"]

logger = logging.getLogger(__name__)

MAX_GIF_FPS = 50  # a 2/100 s delay: browsers play shorter GIF delays as 10/100 s, five times too slow
_STDERR_TAIL_CHARS = 500  # how much of ffmpeg's complaint a warning quotes
# Ordered dithering, and only the rectangle that changed redone per frame: on 300 CartPole frames (600x400) 0.9 s
# of ffmpeg's CPU (user + system) against 2.6 s with paletteuse's defaults (error diffusion over whole frames), GIFs the same size.
_PALETTEUSE = "dither=bayer:diff_mode=rectangle"


@dataclass(frozen=True)
class Gif:
    """An animated GIF's bytes and its size in pixels (read from its header)."""

    data: bytes
    width: int
    height: int


def gif_fps(clip_fps: float | None, frames: int | None, fps: float | None, max_frames: int) -> float | None:
    """The GIF's frames per second, or None to keep every frame of the clip at its own rate.

    Args:
        clip_fps: the clip's frames per second (its metadata's ``fps``); None when unknown.
        frames: the clip's frame count (``frames_written``); None when unknown.
        fps: the rate asked for; None: the clip's own.
        max_frames: the most frames the GIF may have.
    """
    rate = fps if fps is not None else clip_fps
    if rate is None:
        return None  # neither is known: the clip's own rate, whatever it is
    rate = min(float(rate), MAX_GIF_FPS)
    if frames and clip_fps and frames * rate / clip_fps > max_frames:
        rate = max_frames * clip_fps / frames  # the whole clip in max_frames frames
        rate = math.floor(rate * 1000) / 1000  # rounded down: never one frame over
    if fps is None and clip_fps is not None and rate >= clip_fps:
        return None  # every frame, as encoded: no resampling at all
    return rate


def gif_command(exe: str, src: str, *, fps: float | None, max_frames: int, crop: tuple[int, int] | None) -> list[str]:
    """ffmpeg's command line writing ``src``'s video as an animated GIF to its stdout.

    Args:
        exe: the ffmpeg executable.
        src: the clip's MP4.
        fps: the GIF's frame rate (``gif_fps``); None: the clip's own, every frame kept.
        max_frames: at most this many frames are written.
        crop: ``(width, height)`` to crop the top-left of each frame to (a clip padded to even sizes); None: as it is.
    """
    filters = []
    if crop is not None:
        filters.append(f"format=rgb24,crop={crop[0]}:{crop[1]}:0:0")  # in RGB: a YUV 4:2:0 crop rounds to even sizes
    if fps is not None:
        filters.append(f"fps={fps:g}")
    filters.append(f"split[a][b];[a]palettegen=stats_mode=diff[p];[b][p]paletteuse={_PALETTEUSE}")
    return [exe, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", src, "-an", "-vf", ",".join(filters),
            "-frames:v", str(max_frames), "-loop", "0", "-f", "gif", "pipe:1"]


def gif_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` from a GIF's logical screen descriptor; ``FfmpegError`` when ``data`` is no GIF."""
    if len(data) < 10 or data[:6] not in (b"GIF87a", b"GIF89a"):
        raise FfmpegError(f"ffmpeg's output is not a GIF ({len(data)} bytes, starting {data[:6]!r})")
    return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")


def clip_gif(exe: str, src: str, *, fps: float | None, max_frames: int, crop: tuple[int, int] | None,
             timeout_s: float, nice: int = 0) -> Gif:
    """``src`` as an animated GIF (see ``gif_command``), made by ffmpeg within ``timeout_s`` seconds.

    ``nice``: ffmpeg's niceness (0: this process's), so a GIF made in the background yields the CPU to the env.

    Raises:
        FfmpegError: ffmpeg failed, timed out (it is killed) or wrote no GIF.
        OSError: ffmpeg could not be started.
    """
    command = gif_command(exe, src, fps=fps, max_frames=max_frames, crop=crop)
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        if nice:
            try:
                os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
            except OSError:
                pass  # it exited already, or this system refuses: it runs at our priority, no harm done
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            raise FfmpegError(f"ffmpeg took more than {timeout_s:g} s to make a GIF of {src} (killed)") from exc
    if proc.returncode != 0:
        tail = stderr.decode("utf-8", "replace").strip()[-_STDERR_TAIL_CHARS:]
        raise FfmpegError(f"ffmpeg exited with status {proc.returncode} making a GIF of {src}: {tail}")
    width, height = gif_size(stdout)
    logger.debug("envrec.log: %s as a %dx%d GIF of %d bytes", src, width, height, len(stdout))
    return Gif(stdout, width, height)
