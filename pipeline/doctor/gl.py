"""Which OpenGL platform MuJoCo renders with here (``MUJOCO_GL``): each tried in a fresh interpreter.

MuJoCo picks its GL platform from ``MUJOCO_GL`` (and PyOpenGL from ``PYOPENGL_PLATFORM``) once per process, at
the first render, and a platform that fails can crash or poison the process that tried it: so each candidate
renders a tiny model in an interpreter of its own, under a time limit (``probe``). ``egl`` (a GPU's, or Mesa's:
Debian's ``libegl1 libegl-mesa0 libgl1-mesa-dri``) and ``osmesa`` (software, ``libosmesa6``) need no display;
``glfw``, MuJoCo's default, needs one. ``envrec doctor`` tries them all; the tests that render MuJoCo take the
first that works (``first_rendering``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping

from .result import run_process, tail

__all__ = ["APT_PACKAGES", "BACKENDS", "PROBE_TIMEOUT_S", "first_rendering", "mujoco_installed", "probe"]

BACKENDS = ("egl", "osmesa", "glfw")  # the platforms MuJoCo knows, the headless ones first
APT_PACKAGES = "libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6"  # Mesa's EGL and OSMesa on Debian/Ubuntu
PROBE_TIMEOUT_S = 60.0  # importing mujoco and a first software render: ~1 s alone, far more on a loaded CI machine

PROBE = """
import mujoco
model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size=".1"/></worldbody></mujoco>')
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
renderer = mujoco.Renderer(model, 8, 8)
renderer.update_scene(data)
assert renderer.render().shape == (8, 8, 3)
renderer.close()
"""


def mujoco_installed() -> bool:
    """Whether the ``mujoco`` package can be imported (found, not imported here)."""
    return importlib.util.find_spec("mujoco") is not None


def probe(backend: str, timeout_s: float = PROBE_TIMEOUT_S, base: Mapping[str, str] | None = None) -> str | None:
    """Why MuJoCo cannot render with ``backend`` here, or None when it can.

    Args:
        backend: a ``MUJOCO_GL`` value (``"egl"``, ``"osmesa"``, ``"glfw"``).
        timeout_s: how long the probe's interpreter may take; it is killed past it.
        base: the environment the probe starts from (default: this process's).
    """
    env = {**(os.environ if base is None else base), "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend,
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        out = run_process([sys.executable, "-c", PROBE], timeout_s, env)
    except OSError as exc:
        return f"cannot start {sys.executable}: {exc}"
    if out.returncode is None:
        return f"no render within {timeout_s:g} s"
    if out.returncode == 0:
        return None
    return tail(out.stderr, width=160) or f"exit status {out.returncode}"


def first_rendering(candidates: Iterable[str] = BACKENDS, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str | None, str]:
    """The first backend that renders (the user's ``MUJOCO_GL`` first, if set), or None and why none does.

    Args:
        candidates: the backends to try, in order.
        timeout_s: each probe's time limit.
    """
    given = os.environ.get("MUJOCO_GL")
    reasons = []
    for backend in dict.fromkeys([*([given] if given else []), *candidates]):
        reason = probe(backend, timeout_s)
        if reason is None:
            return backend, ""
        reasons.append(f"{backend}: {reason}")
    return None, "; ".join(reasons)
