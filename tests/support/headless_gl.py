"""MuJoCo's headless OpenGL for the replay tests that render: EGL, else OSMesa, probed in a subprocess.

MuJoCo picks its GL platform from ``MUJOCO_GL`` (and PyOpenGL from ``PYOPENGL_PLATFORM``) once per
process, at the first render; a platform that fails can crash or poison the process that tried it,
so each candidate renders a tiny model in a fresh interpreter first. ``need_headless_gl`` then sets
both variables in ``os.environ`` for the rest of the session (worker and job processes inherit them).
``.ci/run`` installs Mesa's EGL and OSMesa (libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6): under
``CI=true`` a machine where neither renders fails the test, elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

CANDIDATES = ("egl", "osmesa")
PROBE = """
import mujoco
model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size=".1"/></worldbody></mujoco>')
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
renderer = mujoco.Renderer(model, 8, 8)
renderer.update_scene(data)
assert renderer.render().shape == (8, 8, 3)
"""


def _probe(backend: str) -> str | None:
    """Why MuJoCo cannot render with ``backend`` here, or None when it can."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    try:
        out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{backend}: {exc}"
    lines = out.stderr.strip().splitlines()
    return None if out.returncode == 0 else f"{backend}: {lines[-1] if lines else f'exit status {out.returncode}'}"


@functools.cache
def _find() -> tuple[str | None, str]:
    """The first backend that renders (the user's ``MUJOCO_GL`` first, if set), or None and why none does."""
    given = os.environ.get("MUJOCO_GL")
    reasons = []
    for backend in dict.fromkeys([*([given] if given else []), *CANDIDATES]):
        reason = _probe(backend)
        if reason is None:
            return backend, ""
        reasons.append(reason)
    return None, "; ".join(reasons)


def need_mujoco() -> None:
    """Skip (fail under CI=true) when the mujoco package is missing."""
    try:
        import mujoco  # noqa: F401
    except ImportError as exc:
        _missing(f"the MuJoCo replay tests need the mujoco package (pip install '.[test]'): {exc}")


def need_headless_gl() -> str:
    """The ``MUJOCO_GL`` that renders here, set in ``os.environ`` (with ``PYOPENGL_PLATFORM``); skips, or
    fails under CI=true, when neither EGL nor OSMesa does."""
    need_mujoco()
    backend, why = _find()
    if backend is None:
        _missing(f"MuJoCo cannot render headless here (apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6): {why}")
    assert backend is not None
    os.environ["MUJOCO_GL"] = backend
    os.environ["PYOPENGL_PLATFORM"] = backend
    return backend


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason + ": .ci/run installs it, so under CI=true this is a failure")
    print(f"skipped: {reason}")
    pytest.skip(reason)
