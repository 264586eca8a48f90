"""What a frame must be for envrec to record it: old gym's rules for text, numpy arrays for images."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_image_frame", "check_text_frame"]


def check_text_frame(frame: Any) -> str:
    """Old gym's rules for text frames; the reason it is refused, or '' when it is fine."""
    if not isinstance(frame, str):
        return f"a text frame must be a str, not {type(frame).__name__}"
    if not frame.endswith("\n"):
        return f"a text frame must end with a newline: {frame[-40:]!r}"
    if "\r" in frame:
        return "a text frame must not contain carriage returns (only newlines)"
    return ""


def check_image_frame(frame: Any) -> str:
    """Why an image frame cannot be encoded, or '' when it can."""
    if not isinstance(frame, np.ndarray):
        return f"a frame must be a numpy array, not {type(frame).__name__}"
    if frame.dtype != np.uint8:
        return f"a frame must have dtype uint8 (RGB values 0-255), not {frame.dtype}"
    if (frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] in (1, 3, 4))) and frame.shape[0] and frame.shape[1]:
        return ""
    return f"a frame must have shape (height, width), (height, width, 3) or (height, width, 4), not {frame.shape}"
