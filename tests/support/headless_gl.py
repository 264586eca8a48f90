"""MuJoCo's headless OpenGL for the replay tests that render: EGL, else OSMesa, probed in a subprocess.

MuJoCo picks its GL platform from ``MUJOCO_GL`` (and PyOpenGL from ``PYOPENGL_PLATFORM``) once per
process, at the first render; a platform that fails can crash or poison the process that tried it,
so each candidate renders a tiny model in a fresh interpreter first (``envrec.doctor.gl``, the probe
``envrec doctor`` runs). ``need_headless_gl`` then sets
both variables in ``os.environ`` for the rest of the session (worker and job processes inherit them).
``.ci/run`` installs Mesa's EGL and OSMesa (libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6): under
``CI=true`` a machine where neither renders fails the test, elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import functools
import os

import pytest

from envrec.doctor.gl import APT_PACKAGES, first_rendering

CANDIDATES = ("egl", "osmesa")  # the headless ones: glfw needs a display


@functools.cache
def _find() -> tuple[str | None, str]:
    """The first backend that renders (the user's ``MUJOCO_GL`` first, if set), or None and why none does."""
    return first_rendering(CANDIDATES)


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
        _missing(f"MuJoCo cannot render headless here (apt-get install {APT_PACKAGES}): {why}")
    assert backend is not None
    os.environ["MUJOCO_GL"] = backend
    os.environ["PYOPENGL_PLATFORM"] = backend
    return backend


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason + ": .ci/run installs it, so under CI=true this is a failure")
    print(f"skipped: {reason}")
    pytest.skip(reason)
