"""Headless rendering: the display, SDL's video driver (pygame's envs) and MuJoCo's OpenGL platform.

SDL is checked as envrec runs it: a fresh interpreter calls ``envrec.record.headless.headless_display`` (SDL's
dummy driver when there is no display, unless the user chose one) and opens pygame's display. MuJoCo's
platforms are each tried in a fresh interpreter too (``envrec.doctor.gl``).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

from .gl import APT_PACKAGES, BACKENDS, mujoco_installed, probe
from .result import CheckStatus, Result, run_process, tail

__all__ = ["SDL_TIMEOUT_S", "gl_result", "sdl_result"]

SDL_TIMEOUT_S = 30.0  # importing pygame and opening a display: ~0.3 s
SDL_PROBE = """
import os
from envrec.record.headless import headless_display
headless_display()
import pygame
pygame.display.init()
print(os.environ.get("SDL_VIDEODRIVER", ""), pygame.display.get_driver())
pygame.quit()
"""


def _display() -> str:
    shown = [f"{k}={os.environ[k]}" for k in ("DISPLAY", "WAYLAND_DISPLAY") if os.environ.get(k)]
    return ", ".join(shown)


def sdl_result() -> Result:
    """SDL's driver as envrec would set it, and whether pygame opens its display with it."""
    display, given = _display(), os.environ.get("SDL_VIDEODRIVER")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = run_process([sys.executable, "-c", SDL_PROBE], SDL_TIMEOUT_S, env)
    where = f"display {display}" if display else "no display (DISPLAY and WAYLAND_DISPLAY unset)"
    chosen = f"SDL_VIDEODRIVER={given} (yours)" if given else (
        "SDL_VIDEODRIVER=dummy (envrec sets it)" if not display else "SDL picks the display's driver")
    facts = {"display": display or None, "sdl_videodriver": given}
    if done.returncode == 0 and done.stdout.split():
        driver = done.stdout.split()[-1]
        facts["pygame_driver"] = driver
        return Result("SDL video driver", CheckStatus.PASS, f"{where}: {chosen}; pygame opens its display with {driver!r}",
                      facts=facts)
    why = f"no answer within {SDL_TIMEOUT_S:g} s" if done.returncode is None else tail(done.stderr) or f"exit status {done.returncode}"
    if given:
        fix = "unset SDL_VIDEODRIVER (envrec sets dummy when there is no display), or set it to dummy"
    elif display:
        fix = f"the display {display} does not answer: unset DISPLAY/WAYLAND_DISPLAY (envrec then draws with SDL's dummy driver)"
    else:
        fix = "pip install pygame (a dependency of envrec), or export SDL_VIDEODRIVER=dummy"
    return Result("SDL video driver", CheckStatus.WARN, f"{where}: {chosen}, but pygame cannot open its display: {why}",
                  f"{fix}; pygame's envs may fail to render", facts=facts)


def gl_probes(timeout_s: float) -> dict[str, str | None] | None:
    """Each ``MUJOCO_GL`` (the user's first, if set) tried in a fresh interpreter: why it does not render, or
    None when it does; None for all when the mujoco package is not installed.

    Args:
        timeout_s: each probe's time limit.
    """
    if not mujoco_installed():
        return None
    given = os.environ.get("MUJOCO_GL")
    backends = list(dict.fromkeys([*([given] if given else []), *BACKENDS]))
    with ThreadPoolExecutor(max_workers=len(backends), thread_name_prefix="envrec-doctor-gl") as pool:
        found = list(pool.map(lambda b: probe(b, timeout_s), backends))  # side by side: each waits on its interpreter
    return dict(zip(backends, found, strict=True))


def gl_result(tried: dict[str, str | None] | None, mujoco_env: bool) -> tuple[Result, str | None]:
    """Which ``MUJOCO_GL`` renders here, and the one to use (None: none).

    Args:
        tried: what ``gl_probes`` found.
        mujoco_env: the env checked is a MuJoCo env: then a platform that does not render is a failure,
            otherwise a warning (or a skip without the mujoco package).
    """
    if tried is None:
        status = CheckStatus.FAIL if mujoco_env else CheckStatus.SKIP
        return Result("MuJoCo GL", status, "the mujoco package is not installed: nothing to render with",
                      "pip install 'gymnasium[mujoco]' for MuJoCo envs" if mujoco_env else ""), None
    given = os.environ.get("MUJOCO_GL") or None
    works = [b for b, why in tried.items() if why is None]
    facts = {"mujoco_gl": given, "renders": works, "failed": {b: why for b, why in tried.items() if why}}
    summary = "; ".join(f"{b} renders" if why is None else f"{b}: {why}" for b, why in tried.items())
    bad = CheckStatus.FAIL if mujoco_env else CheckStatus.WARN
    headless = [b for b in works if b != "glfw"]
    use = given if given in works else next(iter([*headless, *works]), None)
    if not works:
        return Result("MuJoCo GL", bad, f"no OpenGL platform renders MuJoCo here ({summary})",
                      f"apt-get install {APT_PACKAGES}, then export MUJOCO_GL=egl (or osmesa)", facts=facts), None
    if given and given not in works:
        return Result("MuJoCo GL", bad, f"MUJOCO_GL={given} does not render ({summary})",
                      f"export MUJOCO_GL={use}", facts=facts), use
    if given:
        return Result("MuJoCo GL", CheckStatus.PASS, f"MUJOCO_GL={given} renders ({summary})", facts=facts), use
    if "glfw" in works:
        return Result("MuJoCo GL", CheckStatus.PASS, f"MUJOCO_GL unset: MuJoCo's default, glfw, renders ({summary})",
                      facts=facts), use
    where = "there is no display" if not _display() else f"the display {_display()} does not serve it"
    return Result("MuJoCo GL", bad, f"MUJOCO_GL is unset and MuJoCo's default, glfw, does not render: {where} "
                  f"({summary})", f"export MUJOCO_GL={use} before recording or rendering MuJoCo envs", facts=facts), use
