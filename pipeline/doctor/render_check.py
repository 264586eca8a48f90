"""Before ``envrec record`` films an env: one frame rendered, and when it cannot be, the doctor's diagnosis.

``envrec record`` used to crash with a raw traceback on headless MuJoCo (``MUJOCO_GL`` unset) and leave a
0-frame clip's metadata behind. Now it renders one frame after a reset first; when that fails it says why
and how to fix it — for MuJoCo, the ``MUJOCO_GL`` that renders here (``envrec.doctor.gl``'s probes) — exits 2
and writes nothing.
"""

from __future__ import annotations

from typing import Any

from ..env_ids import declared_render_modes
from .gl import first_rendering, mujoco_installed

__all__ = ["FRAME_MODES", "render_mode_for", "render_problem"]

FRAME_MODES = ("rgb_array", "ansi")  # the render modes whose frames envrec records (an image; text, as asciicast)
NO_VIDEO = "record without video: --video-every 0"


def render_mode_for(env_id: str, asked: str | None) -> tuple[str | None, str | None]:
    """The render mode to film ``env_id`` in, and None; or None and why it cannot be filmed, with the fix.

    ``asked`` (``--render-mode``) when the env declares it (or declares nothing); without one, ``rgb_array``, or
    ``ansi`` for an env that declares ``ansi`` and no ``rgb_array`` (recorded as asciicast clips).

    Args:
        env_id: the env's id, as ``envrec record --env`` takes it.
        asked: the render mode asked for, or None.
    """
    declared = declared_render_modes(env_id)
    if declared is None:
        return asked or "rgb_array", None
    if asked is None:
        asked = next((m for m in FRAME_MODES if m in declared), None)
        if asked is None:
            return None, (f"{env_id} declares the render modes {declared}: none gives frames envrec records "
                          f"({' or '.join(FRAME_MODES)})\n  fix: {NO_VIDEO}")
    if asked not in declared:
        other = [m for m in FRAME_MODES if m in declared]
        fix = f"--render-mode {other[0]}" + (" (text, recorded as asciicast .cast clips)" if other[0] == "ansi" else "") \
            if other else NO_VIDEO
        return None, f"{env_id} cannot render as {asked!r}: it declares the render modes {declared}\n  fix: {fix}"
    return asked, None


def _uses_mujoco(env: Any, exc: BaseException) -> bool:
    base = env.unwrapped
    return type(exc).__module__.startswith("mujoco") or type(getattr(base, "model", None)).__module__.startswith("mujoco")


def render_problem(env: Any, env_id: str, seed: int | None) -> str | None:
    """Why ``env`` cannot give a frame after ``reset(seed=seed)``, with the fix; None when it renders.

    Args:
        env: the env made with the render mode to record.
        env_id: its id, for the messages.
        seed: the first reset's seed.
    """
    try:
        env.reset(seed=seed)
        frame = env.render()
    except Exception as exc:  # noqa: BLE001  (envs and their renderers raise anything; each is reported)
        why = f"{type(exc).__name__}: {exc}".strip()
        if _uses_mujoco(env, exc) and mujoco_installed():
            backend, tried = first_rendering()
            fix = (f"export MUJOCO_GL={backend} (it renders here), then run again" if backend else
                   f"no OpenGL platform renders MuJoCo here ({tried}): install Mesa's EGL or OSMesa "
                   "(apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6), then export MUJOCO_GL=egl")
        else:
            fix = f"envrec doctor --env {env_id} checks the env, its render modes and its frames"
        return f"{env_id} cannot render a frame here: {why}\n  fix: {fix}\n  (or record without video: --video-every 0)"
    if frame is None:
        return (f"{env_id} rendered nothing (render() returned None) with render_mode={env.render_mode!r}\n"
                f"  fix: envrec doctor --env {env_id} lists its render modes; or record without video: --video-every 0")
    return None
