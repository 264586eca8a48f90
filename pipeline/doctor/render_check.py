"""Before ``envrec record`` films an env: one frame rendered, and when it cannot be, the doctor's diagnosis.

``envrec record`` used to crash with a raw traceback on headless MuJoCo (``MUJOCO_GL`` unset) and leave a
0-frame clip's metadata behind. Now it renders one frame after a reset first; when that fails it says why
and how to fix it — for MuJoCo, the ``MUJOCO_GL`` that renders here (``envrec.doctor.gl``'s probes) — exits 2
and writes nothing.
"""

from __future__ import annotations

from typing import Any

from .gl import first_rendering, mujoco_installed

__all__ = ["render_problem"]


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
