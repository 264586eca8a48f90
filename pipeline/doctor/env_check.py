"""The env's checks: it makes, it renders ``rgb_array`` (or ``ansi``), it says its ``render_fps``, and one
``reset`` + ``render`` gives a frame envrec records (uint8, HxWx3; a text frame for ``ansi``).

The env is made in an interpreter of its own (``envrec.doctor.env_probe``), under a time limit: an env may
hang in its constructor or crash its process at the first render, and the doctor must report that, not
suffer it. ``EnvFindings`` is what the probe's JSON lines said, stage by stage.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from .gl import APT_PACKAGES
from .result import CheckStatus, Result, run_process, tail

__all__ = ["ENV_TIMEOUT_S", "EnvFindings", "env_results", "probe_env"]

ENV_TIMEOUT_S = 90.0  # making and rendering ALE or MuJoCo envs takes 1-3 s alone; far more on a loaded machine
REGISTRY_HINT = "python -c 'import gymnasium as gym; gym.pprint_registry()'"


@dataclass
class EnvFindings:
    """What the env probe reported: each stage's facts merged, how its process ended and its stderr."""

    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    returncode: int | None = 0
    stderr: str = ""
    timeout_s: float = ENV_TIMEOUT_S

    def fact(self, name: str, default: Any = None) -> Any:
        for facts in reversed(self.stages.values()):
            if name in facts:
                return facts[name]
        return default

    @property
    def uses_mujoco(self) -> bool:
        return any(f.get("mujoco") for f in self.stages.values())

    def died(self) -> str:
        """How the probe's process ended, when it did not finish: '' when it did."""
        if self.returncode is None:
            return f"it did not finish within {self.timeout_s:g} s"
        if self.returncode < 0:
            import signal

            return f"its process was killed by {signal.Signals(-self.returncode).name} ({tail(self.stderr)})"
        if self.returncode:
            return f"its process exited with status {self.returncode}: {tail(self.stderr)}"
        return ""


def _probe_environ() -> dict[str, str]:
    path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def probe_env(env_id: str, timeout_s: float = ENV_TIMEOUT_S) -> EnvFindings:
    """Run the env probe on ``env_id`` and collect what it said.

    Args:
        env_id: the env to make (any id ``envrec.env_ids.make_env`` takes).
        timeout_s: how long its interpreter may take.
    """
    done = run_process([sys.executable, "-m", "envrec.doctor.env_probe", env_id], timeout_s, _probe_environ())
    findings = EnvFindings(returncode=done.returncode, stderr=done.stderr, timeout_s=timeout_s)
    for line in done.stdout.splitlines():
        try:
            facts = json.loads(line)
        except ValueError:
            continue
        if isinstance(facts, dict) and isinstance(facts.get("stage"), str):
            findings.stages[facts.pop("stage")] = facts
    return findings


def _made(env_id: str, f: EnvFindings) -> Result:
    """The "env" result: a failure when the env was never made (then it is the only result)."""
    if "make-failed" in f.stages:
        failed = f.stages["make-failed"]
        fix = failed["install"] if failed.get("install") else (
            f"check the id (the registered ones: {REGISTRY_HINT}), or install the package that registers it")
        module = re.search(r"No module named '([^']+)'", failed["error"]) if failed.get("kind") == "ModuleNotFoundError" else None
        if module:
            fix = f"install the package that provides {module[1]!r}, or fix the module named in the id"
        return Result("env", CheckStatus.FAIL, f"cannot make {env_id!r}: {failed['error']}", fix, facts={"env": env_id})
    if "made" not in f.stages:
        return Result("env", CheckStatus.FAIL, f"cannot make {env_id!r}: {f.died() or 'the probe said nothing'}",
                      f"try it alone: python -c \"import gymnasium as gym; gym.make({env_id!r})\"", facts={"env": env_id})
    made = f.stages["made"]
    where = f" ({made['entry_point']})" if made.get("entry_point") else ""
    return Result("env", CheckStatus.PASS, f"{env_id} makes{where} in {made.get('make_ms', 0):g} ms",
                  facts={"env": env_id, "entry_point": made.get("entry_point")})


def _modes(f: EnvFindings) -> Result:
    modes = f.fact("render_modes") or []
    listed = ", ".join(modes) or "none"
    if "rgb_array" in modes:
        return Result("env render modes", CheckStatus.PASS, f"rgb_array for video (its modes: {listed})", facts={"render_modes": modes})
    if "ansi" in modes:
        return Result("env render modes", CheckStatus.PASS, f"ansi: text frames, recorded as asciicast clips (its modes: {listed})",
                      facts={"render_modes": modes})
    return Result("env render modes", CheckStatus.FAIL, f"no rgb_array or ansi render mode (its modes: {listed}): "
                  "envrec cannot film it",
                  "give the env metadata['render_modes'] with 'rgb_array' and a render() returning an HxWx3 uint8 "
                  "array; or record its trace alone (RecordTrace; envrec record --video-every 0)", facts={"render_modes": modes})


def _fps(f: EnvFindings) -> Result:
    fps = f.fact("render_fps")
    if isinstance(fps, int | float) and not isinstance(fps, bool) and fps > 0:
        return Result("env render_fps", CheckStatus.PASS, f"{fps:g} frames per second", facts={"render_fps": fps})
    said = "no render_fps in its metadata" if fps is None else f"metadata['render_fps'] is {fps!r}"
    return Result("env render_fps", CheckStatus.FAIL, f"{said}: clips would play at envrec's "
                  "fallback of 30 frames per second, not the env's speed",
                  "pass fps= to RecordVideo (envrec record --fps N, envrec render --fps N), or set "
                  "metadata['render_fps'] in the env", facts={"render_fps": fps})


def _gl_fix(f: EnvFindings, gl_backend: str | None) -> str:
    if not f.uses_mujoco:
        return ""
    if gl_backend:
        return f"export MUJOCO_GL={gl_backend} (it renders here; see the MuJoCo GL check), then run again"
    return f"install a headless OpenGL (apt-get install {APT_PACKAGES}), then export MUJOCO_GL=egl"


def _frame(f: EnvFindings, gl_backend: str | None) -> Result:
    mode = f.fact("mode") or "rgb_array"
    gl = f" (MUJOCO_GL={os.environ.get('MUJOCO_GL', 'unset')})" if f.uses_mujoco else ""
    if "rendered" not in f.stages:
        why = f.stages.get("render-failed", {}).get("error") or f.died() or "the probe said nothing"
        fix = _gl_fix(f, gl_backend) or f"render(render_mode={mode!r}) must return a frame after reset(); try it alone"
        return Result("env frame", CheckStatus.FAIL, f"reset + render failed{gl}: {why}", fix)
    frame = f.stages["rendered"]["frame"]
    took = f.stages["rendered"].get("render_ms", 0)
    if frame.get("problem"):
        return Result("env frame", CheckStatus.FAIL, f"render() gave what envrec cannot record: {frame['problem']}",
                      "render() must return a uint8 HxWx3 numpy array (rgb_array) or a str ending in a newline (ansi)",
                      facts={"frame": frame})
    if mode == "ansi":
        return Result("env frame", CheckStatus.PASS, f"a text frame of {frame.get('chars')} characters in {took:g} ms",
                      facts={"frame": frame})
    shape = "x".join(str(n) for n in frame["shape"])
    return Result("env frame", CheckStatus.PASS, f"{frame['dtype']} {shape} after reset(seed=0), rendered in {took:g} ms{gl}",
                  facts={"frame": frame})


def env_results(env_id: str, findings: EnvFindings, gl_backend: str | None = None) -> list[Result]:
    """The env's results from what its probe found.

    Args:
        env_id: the env's id, for the messages.
        findings: what ``probe_env`` collected.
        gl_backend: a ``MUJOCO_GL`` that renders here, for the fix of a MuJoCo env that does not render.
    """
    made = _made(env_id, findings)
    if made.status is CheckStatus.FAIL:
        return [made]
    results = [made, _modes(findings), _fps(findings)]
    if results[1].status is CheckStatus.PASS:
        results.append(_frame(findings, gl_backend))
    return results
