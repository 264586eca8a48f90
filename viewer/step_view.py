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

from .series import MAX_SERIES, Columns

__all__ = ["MAX_INFO_CHARS", "MAX_INFO_KEYS", "action_space_json", "image_layout", "observation_png", "parse_step_query",
           "step_json"]

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


def _row(ep: Any, step: int) -> int:
    """Row ``step`` of the episode's observations; LookupError when it was not read."""
    row = step - ep.first_step
    if not 0 <= row <= ep.length:
        raise LookupError(f"no step {step}: this episode's observations are {ep.first_step}..{ep.first_step + ep.length}")
    return row


def _number(v: Any) -> float | int | bool | None:
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


def step_json(ep: Any, step: int, dims: list[int]) -> dict[str, Any]:
    """One step's values: reward, return so far (of the steps read), action (each action dimension), flags, the chosen
    observation dimensions, the info.

    Args:
        ep: the episode (``envrec.read.batch_files.Episode``).
        step: the observation index (``ep.first_step`` .. ``ep.first_step + ep.length``).
        dims: observation dimensions to send (``Columns`` numbering, as the plots').
    """
    row = _row(ep, step)
    observations = Columns(ep.observations, ep.length + 1)
    bad = [d for d in dims if not 0 <= d < observations.count]
    if bad:
        raise LookupError(f"observation dimensions {bad}: there are 0..{observations.count - 1}")
    out: dict[str, Any] = {"step": step, "reward": None, "return": 0.0, "actions": [], "terminated": None, "truncated": None}
    if row > 0:  # the step that led to this observation
        actions = Columns(ep.actions, ep.length)
        rewards = np.asarray(ep.rewards[:row], np.float64)
        out.update(reward=_number(rewards[-1]), terminated=bool(ep.terminations[row - 1]),
                   **{"return": _number(rewards.sum())},
                   truncated=bool(ep.truncations[row - 1]),
                   actions=[{"label": actions.label(i), "value": _number(actions.column(i)[row - 1])}
                            for i in range(min(actions.count, MAX_SERIES))])
    out["observations"] = [{"dim": d, "label": observations.label(d), "value": _number(observations.column(d)[row])}
                           for d in dims]
    out["info"] = info_texts(ep.infos[row]) if row < len(ep.infos) else info_texts({})
    return out


def observation_png(ep: Any, step: int, layout: Mapping[str, int]) -> bytes:
    """Observation ``step`` of an image episode as a PNG (8 bits per channel, no filter, zlib level ``PNG_LEVEL``).

    Args:
        ep: the episode; its observations an array of ``uint8`` frames.
        step: the observation index.
        layout: ``image_layout`` of its observation space.
    """
    frame = np.asarray(ep.observations[_row(ep, step)])
    h, w, c = layout["height"], layout["width"], layout["channels"]
    if frame.dtype != np.uint8 or frame.size != h * w * c:
        raise LookupError(f"observation {step} is not a {h}x{w}x{c} uint8 image")
    return encode_png(frame.reshape(h, w, c))


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
