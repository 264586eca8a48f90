"""The env check's own interpreter: ``python -m envrec.doctor.env_probe ENV_ID`` makes the env, reads its render
modes and fps, renders one frame after a reset, and reports each stage as a JSON line on its stdout.

Run apart from the doctor (``env_check`` starts it under a time limit) because an env may hang in its
constructor, or crash its process at the first render (MuJoCo with a GL platform that does not work here). A
line per stage, flushed as it is reached, says how far it got when it dies. Anything the env prints goes to
stderr: stdout carries the report alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

__all__ = ["main"]

MODES = ("rgb_array", "ansi")  # what envrec records, in the order it prefers them


def _say(out: TextIO, stage: str, **facts: Any) -> None:
    out.write(json.dumps({"stage": stage, **facts}, default=str) + "\n")
    out.flush()


def _entry_point(env_id: str) -> str:
    import gymnasium as gym

    from ..env_ids import callable_name

    try:
        entry = gym.spec(env_id.split(":", 1)[-1]).entry_point
    except gym.error.Error:
        return ""
    return entry if isinstance(entry, str) else callable_name(entry) or repr(entry)


def _frame_facts(frame: Any, mode: str) -> dict[str, Any]:
    import numpy as np

    from ..record.frame_checks import check_image_frame, check_text_frame

    problem = check_text_frame(frame) if mode == "ansi" else check_image_frame(frame)
    facts: dict[str, Any] = {"type": type(frame).__name__, "problem": problem}
    if isinstance(frame, np.ndarray):
        facts.update(dtype=str(frame.dtype), shape=list(frame.shape))
    elif isinstance(frame, str):
        facts.update(chars=len(frame))
    return facts


def probe(env_id: str, out: TextIO) -> None:
    """Make ``env_id``, report its render modes and fps, render a frame after a seeded reset.

    Args:
        env_id: a Gymnasium id (``ALE/...``, ``module:Env-v0`` included), made through ``envrec.env_ids.make_env``.
        out: where the JSON lines go.
    """
    from ..env_ids import load_env_namespace, make_env

    started = time.perf_counter()
    missing = load_env_namespace(env_id)
    try:
        env = make_env(env_id)
    except Exception as exc:  # noqa: BLE001  (Gymnasium and env packages raise many types; each is reported)
        _say(out, "make-failed", error=f"{type(exc).__name__}: {exc}", kind=type(exc).__name__, install=missing)
        return
    metadata = dict(env.metadata or {})
    env.close()
    modes = [str(m) for m in metadata.get("render_modes") or []]
    _say(out, "made", entry_point=_entry_point(env_id), render_modes=modes, render_fps=metadata.get("render_fps"),
         make_ms=round((time.perf_counter() - started) * 1000, 1), mujoco="mujoco" in sys.modules)
    mode = next((m for m in MODES if m in modes), None)
    if mode is None:
        return
    env = make_env(env_id, render_mode=mode)
    try:
        env.reset(seed=0)
        _say(out, "reset", mujoco="mujoco" in sys.modules)
        started = time.perf_counter()
        frame = env.render()
        _say(out, "rendered", mode=mode, render_ms=round((time.perf_counter() - started) * 1000, 1),
             frame=_frame_facts(frame, mode))
    except Exception as exc:  # noqa: BLE001  (what the env raised is the finding)
        _say(out, "render-failed", mode=mode, error=f"{type(exc).__name__}: {exc}")
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    """Probe the env named by the one argument; the report on stdout, everything else on stderr."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m envrec.doctor.env_probe ENV_ID", file=sys.stderr)
        return 2
    from ..record.headless import headless_display

    headless_display()  # as every envrec command and wrapper does
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the env's prints go to stderr
    with out:
        probe(args[0], out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
