"""Drawing off screen when there is no display: SDL's dummy video driver (pygame, Gymnasium's classic envs).

Set at ``import envrec`` (a vector env's sub-processes, started before any wrapper, inherit it) and before
pygame opens its display, by every envrec wrapper and command that may render: no window is
needed for ``rgb_array`` frames, and SDL's complaints about a missing display or ``XDG_RUNTIME_DIR`` stay
out of the output. A user's own ``SDL_VIDEODRIVER`` wins, and so does a display.
"""

from __future__ import annotations

import os

__all__ = ["headless_display"]


def headless_display() -> None:
    """Make SDL draw off screen when there is no display (neither ``DISPLAY`` nor ``WAYLAND_DISPLAY``), and
    hide pygame's greeting; both only when the user has not set them."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
