"""What the episode page shows of one step: its values under the cursor, its infos (bounded), its observation as a PNG.

A step here is the episode's observation index, as on the plots' x axis:
``x`` is observation ``x`` (the reset's when ``x`` is 0), the info that came
with it, and the reward, action and flags of the step that led to it (none
at the episode's first observation read). An image (``image_layout``: a
``uint8`` ``Box`` ``HxW`` or ``HxWxC`` with ``C`` in 1, 3, 4, what Atari and
pixel envs give, or a stack of them, ``KxHxW`` or ``KxHxWxC``, what
``FrameStackObservation`` gives), the whole observation or a leaf of a
``Dict``/``Tuple`` one (``image_leaves``), is sent as a PNG (a stack as a
strip of its frames, oldest left), written here with ``zlib`` and
``struct``: no imaging library. Infos are sent as short texts (``reprlib``), at most
``MAX_INFO_KEYS`` keys of at most ``MAX_INFO_CHARS`` characters, so a step
whose info holds a frame or a long log costs the page a few kilobytes.
"""

from __future__ import annotations

import reprlib
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from .series import MAX_SERIES

__all__ = ["MAX_INFO_CHARS", "MAX_INFO_KEYS", "action_space_json", "encode_png", "frame_strip", "image_layout", "image_leaves",
           "info_texts", "number",
           "parse_step_query"]

MAX_INFO_KEYS = 64  # keys of one step's info sent to the page; the rest are counted, not sent
MAX_INFO_CHARS = 240  # characters of one info value's text (and of its key's)
PNG_LEVEL = 1  # zlib level: a 210x160 frame in about a millisecond; the page asks for one per cursor move
IMAGE_CHANNELS = {1: 0, 3: 2, 4: 6}  # channels -> PNG colour type (grey, RGB, RGBA)
MIN_IMAGE_SIDE = 4  # an array's height and width must pass this to be an image: a 3x3x3 grid of values is plotted
MAX_FRAMES = 16  # stacked frames drawn side by side: a KxHxW array with more is a volume, plotted
STRIP_GAP_PX = 2  # grey columns between the frames of a stack in its PNG
STRIP_GAP_GREY = 128

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 3, 8, 8, 8, 8
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = MAX_INFO_CHARS, MAX_INFO_CHARS, 60


def image_layout(space: Mapping[str, Any] | None) -> dict[str, int] | None:
    """``{"height", "width", "channels", "frames"}`` when a space spec (one leaf of the manifest's) is an image,
    else None.

    An image is a ``uint8`` ``Box`` of shape ``HxW``, ``HxWxC`` (``C`` in 1, 3, 4), or a stack of ``K`` such frames,
    ``KxHxW`` or ``KxHxWxC`` (``FrameStackObservation``; ``frames`` is ``K``, 1 when not stacked), with ``H`` and
    ``W`` over ``MIN_IMAGE_SIDE`` and ``K`` at most ``MAX_FRAMES``: a 3x3x3 grid of values stays a plot. A
    ``3xHxW`` array is read as three grey frames (channels first and stacked frames look the same).

    Args:
        space: a ``Box`` spec of the manifest (its ``observation_space``, or a leaf of it).
    """
    if not isinstance(space, Mapping) or space.get("type") != "Box" or space.get("dtype") != "|u1":
        return None
    shape = space.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    if len(shape) == 3 and shape[2] in IMAGE_CHANNELS and min(shape[:2]) > MIN_IMAGE_SIDE:
        frames, (h, w, c) = 1, shape  # HxWxC before KxHxW: an RGB frame is not three stacked 3-pixel-wide ones
    elif len(shape) == 2:
        frames, (h, w), c = 1, shape, 1
    elif len(shape) == 3:
        frames, (h, w), c = shape[0], shape[1:], 1
    elif len(shape) == 4 and shape[3] in IMAGE_CHANNELS:
        frames, (h, w, c) = shape[0], shape[1:]
    else:
        return None
    if min(h, w) <= MIN_IMAGE_SIDE or frames > MAX_FRAMES:
        return None
    return {"height": h, "width": w, "channels": c, "frames": frames}


def image_leaves(space: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The image leaves of an observation space spec (the manifest's), in the order ``series.Layout`` numbers them:
    each ``image_layout``'s fields and ``"leaf"`` (its index among the numeric leaves), ``"label"`` (its name in the
    plots: ``""`` for a ``Box``, ``"key.0"`` inside a ``Dict``/``Tuple``), ``"dims"`` (the first observation
    dimension of the leaf and the one after its last, as the plots number them) and ``"png_width"``,
    ``"png_height"`` (of its PNG: ``frame_strip``'s picture).

    Args:
        space: the manifest's ``observation_space`` spec.
    """
    out: list[dict[str, Any]] = []
    at = 0
    for k, (label, leaf) in enumerate(_numeric_leaves(space, "")):
        shape = leaf.get("shape")
        width = int(np.prod(shape, dtype=np.int64)) if isinstance(shape, list) and all(isinstance(d, int) for d in shape) else 0
        layout = image_layout(leaf)
        if layout is not None:
            strip = layout["frames"] * (layout["width"] + STRIP_GAP_PX) - STRIP_GAP_PX
            out.append({"leaf": k, "label": label, "dims": [at, at + width], **layout, "png_width": strip,
                        "png_height": layout["height"]})
        at += width
    return out


def _numeric_leaves(space: Any, prefix: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, spec) of a spec's leaves but text, depth first (``series.Layout``'s order and names)."""
    if not isinstance(space, Mapping):
        return []
    t = space.get("type")
    if t in ("Dict", "Tuple"):
        subs = space.get("spaces") or []
        named = [(str(s[0]), s[1]) for s in subs if isinstance(s, list) and len(s) == 2] if t == "Dict" else list(enumerate(subs))
        return [leaf for key, sub in named for leaf in _numeric_leaves(sub, f"{prefix}{key}.")]
    if t == "Text":
        return []
    return [(prefix.rstrip("."), space)]


def action_space_json(space: Mapping[str, Any] | None, env: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A ``Discrete`` action space as the page draws it, ``{"n", "start", "names"}`` (names from the manifest's
    ``env.action_meanings`` when there is one per action, else ``"start".."start+n-1"``); None for other spaces.

    Args:
        space: the manifest's ``action_space`` spec.
        env: the manifest's ``env`` (absent in older recordings).
    """
    if not isinstance(space, Mapping) or space.get("type") != "Discrete":
        return None
    n, start = space.get("n"), space.get("start", 0)
    if not isinstance(n, int) or not isinstance(start, int) or not 0 < n <= 1024:
        return None
    names = env.get("action_meanings") if isinstance(env, Mapping) else None
    named = isinstance(names, list) and len(names) == n and all(isinstance(s, str) for s in names)
    return {"n": n, "start": start, "names": list(names) if named else [str(start + i) for i in range(n)],  # type: ignore[arg-type]
            "named": named}


def parse_step_query(q: Mapping[str, list[str]]) -> tuple[str, int, int, int | None, list[int] | None]:
    """(recording, episode, step, first_step, observation dimensions) of a step request; ValueError saying what it expects.

    Args:
        q: the parsed query string (``urllib.parse.parse_qs``).
    """
    try:
        recording, episode, step = q["recording"][0], int(q["episode"][0]), int(q["step"][0])
        first_step = int(q["first_step"][0]) if "first_step" in q else None
        dims = [int(d) for d in q["obs"][0].split(",") if d.strip()] if "obs" in q else None
    except (KeyError, ValueError):
        raise ValueError("expected recording=NAME&episode=N&step=K[&first_step=F][&obs=I,J,...] (integers)") from None
    if dims is not None and len(dims) > MAX_SERIES:
        raise ValueError(f"at most {MAX_SERIES} observation dimensions, not {len(dims)}")
    return recording, episode, step, first_step, dims


def number(v: Any) -> float | int | bool | None:
    """A one-value array (or scalar) as a JSON number; None when it is not one, or not finite."""
    v = np.asarray(v).reshape(-1)
    if v.size != 1:
        return None
    x = v[0].item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x if isinstance(x, bool | int | float) else None


def info_texts(info: Any) -> dict[str, Any]:
    """``{"items": [[key, text], ...], "keys": how many, "truncated": bool}``: an info as short texts."""
    items = list(info.items()) if isinstance(info, dict) else [("info", info)]
    out = []
    for k, v in items[:MAX_INFO_KEYS]:
        key = k if isinstance(k, str) else _REPR.repr(k)
        out.append([key[:MAX_INFO_CHARS], _REPR.repr(v)[:MAX_INFO_CHARS]])
    return {"items": out, "keys": len(items), "truncated": len(items) > MAX_INFO_KEYS}


def frame_strip(row: np.ndarray, layout: Mapping[str, int]) -> np.ndarray:
    """One observation leaf's row (flattened) as the ``HxWxC`` picture the page shows: the frame, or a stack's
    ``K`` frames side by side, oldest (index 0, as ``FrameStackObservation`` orders them) left, newest right, with
    ``STRIP_GAP_PX`` grey columns between them. ValueError when the row is not the layout's ``uint8`` pixels.

    Args:
        row: the leaf's values at one step.
        layout: ``image_layout``'s fields.
    """
    k, h, w, c = layout["frames"], layout["height"], layout["width"], layout["channels"]
    if row.dtype != np.uint8 or row.size != k * h * w * c:
        raise ValueError(f"not {f'{k}x' if k > 1 else ''}{h}x{w}x{c} uint8 pixels")
    frames = row.reshape(k, h, w, c)
    if k == 1:
        return frames[0]
    gap = np.full((h, STRIP_GAP_PX, c), STRIP_GAP_GREY, np.uint8)
    if c == 4:
        gap[..., 3] = 255
    pieces = [p for f in frames for p in (gap, f)][1:]
    return np.concatenate(pieces, axis=1)


def encode_png(frame: np.ndarray) -> bytes:
    """A PNG of an ``HxWxC`` ``uint8`` array, ``C`` in 1 (grey), 3 (RGB), 4 (RGBA)."""
    h, w, c = frame.shape
    rows = np.zeros((h, 1 + w * c), np.uint8)  # each row: filter type 0, then its bytes
    rows[:, 1:] = frame.reshape(h, w * c)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = struct.pack(">IIBBBBB", w, h, 8, IMAGE_CHANNELS[c], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows.tobytes(), PNG_LEVEL))
            + chunk(b"IEND", b""))
