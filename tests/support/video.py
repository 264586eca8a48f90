"""Decoding videos with ffmpeg itself, and the metadata beside a clip."""

from __future__ import annotations

import json
import os
import subprocess

import imageio_ffmpeg
import numpy as np

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def decode(path, width: int, height: int) -> np.ndarray:
    """Every frame ffmpeg can decode from ``path`` (a cut-short file: up to its last complete fragment)."""
    out = subprocess.run(
        [FFMPEG, "-v", "quiet", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        capture_output=True,
        timeout=60,
    )
    n = len(out.stdout) // (width * height * 3)
    return np.frombuffer(out.stdout[: n * width * height * 3], np.uint8).reshape(n, height, width, 3)


def probe_size(path) -> tuple[int, int]:
    out = subprocess.run([FFMPEG, "-hide_banner", "-i", str(path)], capture_output=True, text=True, timeout=30)
    for token in out.stderr.replace(",", " ").split():
        if "x" in token and token.split("x")[0].isdigit() and token.split("x")[1].isdigit():
            return tuple(int(v) for v in token.split("x"))
    raise AssertionError(f"no size in ffmpeg's description of {path}: {out.stderr}")


def meta(folder, name) -> dict:
    with open(os.path.join(folder, name + ".meta.json")) as f:
        return json.load(f)
