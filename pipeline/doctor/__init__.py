"""``envrec doctor``: whether envrec can record here, and what to fix when it cannot.

Each check is a small module: the env (``env_check``, made in its own interpreter by ``env_probe``),
headless rendering (``display``: the display and SDL's driver; ``gl``: MuJoCo's OpenGL platforms), ffmpeg
(``ffmpeg_check``), the output folder (``folder``), the kernel (``kernel``: memfd, eventfd, the open-files
limit), a recording made by real workers (``recording``). ``checks.run_checks`` runs them under time
limits, ``report`` prints them, ``command`` is the command line. Every check reports a ``Result`` (``result``): PASS, WARN, FAIL, SKIP or INFO, and what to fix.
This room may import anything of envrec but the worker side.
"""

from __future__ import annotations

from .checks import run_checks
from .result import CheckStatus, Result, Status

__all__ = ["CheckStatus", "Result", "Status", "run_checks"]  # Status: the old name of CheckStatus, for one release
