"""``envrec doctor [--env ID] [--folder DIR] [--only GROUP,...] [--json]``: registered on the CLI's subparsers by ``envrec.cli``.

Exit status: 0 when every check passed (a warning passes), 1 when one failed, 2 for bad arguments (an env id
Gymnasium cannot parse included), 130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .checks import DEFAULT_ENV, DEFAULT_FOLDER, GROUPS, run_checks
from .report import exit_status, print_json, print_line, print_summary

__all__ = ["add_parser", "run"]

DESCRIPTION = """\
Check that envrec can record here, and say what to fix for each failure: the env (it makes, renders rgb_array
or ansi, has render_fps, and one reset + render gives a frame envrec records), headless rendering (the display,
SDL's video driver, which MUJOCO_GL renders MuJoCo), ffmpeg (found, and it encodes a test clip with envrec's
settings), the output folder (writable as envrec writes, free space, filesystem), memfd and eventfd, the
open-files limit, and a short trace and clip recorded by envrec's own worker processes. Each check has a time limit; everything the doctor makes is removed after.
Exit status: 0 when all passed (warnings pass), 1 when one failed, 2 for bad arguments."""

EPILOG = """\
examples:
  envrec doctor                                   CartPole-v1, into ./recordings
  envrec doctor --env ALE/Pong-v5 --folder /data/runs
  envrec doctor --only ffmpeg,folder              just those checks
  MUJOCO_GL=egl envrec doctor --env HalfCheetah-v5
  envrec doctor --env my_package.envs:MyEnv-v0 --json > doctor.json"""


def add_parser(sub: Any) -> None:
    """Register ``envrec doctor`` on the CLI's subparsers."""
    d = sub.add_parser("doctor", help="check that envrec can record here, and say what to fix",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION, epilog=EPILOG)
    d.add_argument("--env", default=DEFAULT_ENV, metavar="ID",
                   help=f"the env to check: a Gymnasium id, ALE/... or module:Env-v0 (default {DEFAULT_ENV})")
    d.add_argument("--folder", default=DEFAULT_FOLDER, metavar="DIR",
                   help=f"the output folder to check (default ./{DEFAULT_FOLDER}; made and removed if missing)")
    d.add_argument("--only", type=_groups, default=None, metavar="GROUP[,GROUP]",
                   help=f"run only these groups of checks: {', '.join(GROUPS)} (default: all)")
    d.add_argument("--json", action="store_true", help="print the results as a JSON list")
    d.set_defaults(func=run)


def _groups(text: str) -> list[str]:
    groups = [g.strip() for g in text.split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        raise argparse.ArgumentTypeError(f"{text!r}: the groups are {', '.join(GROUPS)}")
    return groups


def _bad_id(env_id: str) -> str:
    """Why Gymnasium cannot parse ``env_id`` ('' when it can)."""
    import gymnasium as gym
    from gymnasium.envs.registration import parse_env_id

    if not env_id.strip():
        return "an empty env id"
    try:
        parse_env_id(env_id.split(":", 1)[1] if ":" in env_id else env_id)
    except gym.error.Error as exc:
        return str(exc)
    return ""


def run(args: argparse.Namespace) -> int:
    """``envrec doctor``: run the checks, print them (or their JSON), 1 if one failed."""
    bad = _bad_id(args.env) if args.only is None or "env" in args.only else ""
    if bad:
        print(f"envrec doctor: --env {args.env!r}: {bad}", file=sys.stderr)
        return 2
    try:
        if args.json:
            results = run_checks(args.env, args.folder, only=args.only)
            print_json(results, sys.stdout)
        else:
            results = run_checks(args.env, args.folder, on_result=lambda r: print_line(r, sys.stdout), only=args.only)
            print_summary(results, sys.stdout)
    except (KeyboardInterrupt, RuntimeError) as exc:
        if not _interrupted(exc):
            raise
        print("envrec doctor: interrupted (what the checks made is removed)", file=sys.stderr)
        return 130
    return exit_status(results)


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or the RuntimeError ("release unlocked lock") that CPython raises instead
    when the interrupt comes while ``Thread.start`` waits for the new thread (python/cpython#78667), the
    KeyboardInterrupt then in its context."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False
