"""What the episode page shows of one step: its values under the cursor, its infos (bounded), its observation as a PNG.

A step here is the episode's observation index, as on the plots' x axis:
``x`` is observation ``x`` (the reset's when ``x`` is 0), the info that came
with it, and the reward, action and flags of the step that led to it (none
at the episode's first observation read). An image observation (``Box`` of
``uint8``, ``HxW`` or ``HxWxC`` with ``C`` in 1, 3, 4: what Atari and pixel
envs give) is sent as a PNG, written here with ``zlib`` and ``struct``: no
imaging library. Infos are sent as short texts (``reprlib``), at most
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

__all__ = ["MAX_INFO_CHARS", "MAX_INFO_KEYS", "action_space_json", "encode_png", "image_layout", "info_texts", "number",
           "parse_step_query"]

MAX_INFO_KEYS = 64  # keys of one step's info sent to the page; the rest are counted, not sent
MAX_INFO_CHARS = 240  # characters of one info value's text (and of its key's)
PNG_LEVEL = 1  # zlib level: a 210x160 frame in about a millisecond; the page asks for one per cursor move
IMAGE_CHANNELS = {1: 0, 3: 2, 4: 6}  # channels -> PNG colour type (grey, RGB, RGBA)

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 3, 8, 8, 8, 8
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = MAX_INFO_CHARS, MAX_INFO_CHARS, 60


def image_layout(space: Mapping[str, Any] | None) -> dict[str, int] | None:
    """``{"height", "width", "channels"}`` when a space spec (the manifest's) is an image, else None.

    Args:
        space: the manifest's ``observation_space`` spec.
    """
    if not isinstance(space, Mapping) or space.get("type") != "Box" or space.get("dtype") != "|u1":
        return None
    shape = space.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    if len(shape) == 2:
        return {"height": shape[0], "width": shape[1], "channels": 1}
    if len(shape) == 3 and shape[2] in IMAGE_CHANNELS and min(shape[:2]) > 4:  # not a 3x3x3 grid of values
        return {"height": shape[0], "width": shape[1], "channels": shape[2]}
    return None


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
