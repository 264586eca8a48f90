"""``envrec verify DIR`` and ``envrec render DIR``: the replay commands, registered by ``envrec.cli``.

``add_parser(sub)`` registers every command of ``SUBCOMMANDS`` on the CLI's subparsers; each entry
adds its own subparser and sets its ``func``. Exit status of ``envrec verify``: 0 when every selected
episode reproduced, 1 when one diverged or cannot be replayed, 2 for bad arguments or an unreadable folder;
the same for ``envrec render`` (a clip that diverged is written all the same).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigError, TraceError
from ..record.headless import headless_display

__all__ = ["SUBCOMMANDS", "add_parser", "add_trust", "parse_env_kwargs", "run_render", "run_verify"]


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: a tolerance is a finite number of at least 0")
    return value


def add_common(p: argparse.ArgumentParser, default_episodes: str) -> None:
    """The arguments ``verify`` and ``render`` share: the folder, which recording and episodes, how to
    make the env, how many jobs."""
    p.add_argument("directory", metavar="DIR", help="the recording folder")
    p.add_argument("--prefix", default=None, help="only the recording with this file prefix (default: every one in DIR)")
    p.add_argument("--episodes", default=default_episodes, metavar="SEL",
                   help=f"which episodes: ids (3), ranges (7-9), worst:K, best:K, failed, last:K, every:N, replayable, all, "
                        f"comma-separated (default {default_episodes})")
    p.add_argument("--jobs", type=_count, default=1, metavar="N", help="replay in N job processes (default 1)")
    p.add_argument("--ray", action="store_true", help="replay as Ray tasks (the folder on storage they share)")
    p.add_argument("--make", default=None, metavar="MODULE:FUNCTION",
                   help="build the env with this function instead of the recorded spec (for envs made by code)")
    p.add_argument("--snapshot", default=None, metavar="MODULE:OBJECT",
                   help="the snapshot hook that restores the recorded states, imported (default: the built-in one the "
                        "recording names, ale or mujoco; a hook a folder names is never imported)")
    add_trust(p)


def add_trust(p: argparse.ArgumentParser) -> None:
    """``--import MODULE`` (repeatable) and ``--trust-kwargs``: what the user trusts beyond what a folder may name
    (``envrec.replay.trust``)."""
    p.add_argument("--import", dest="import_modules", action="append", default=[], metavar="MODULE",
                   help="import this module first (repeat for more): the envs it registers, its wrappers and env ids "
                        "module:Id naming it are made from the recorded spec; a folder never names modules to import")
    p.add_argument("--trust-kwargs", action="store_true",
                   help="use the recorded kwargs and reset options as they are, also those naming paths or sizes far "
                        "beyond the registered defaults (refused by default: a folder may come from anyone)")


def _add_verify(sub: Any) -> None:
    v = sub.add_parser(
        "verify", help="replay recorded episodes and check that they reproduce",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Make each recording's env again from its recorded spec, replay the selected episodes from their\n"
                    "recorded start with their recorded actions, and compare every observation, reward and flag.\n"
                    "The verdicts go into PREFIX.verify.json beside the recording. Exit status 0 when every episode\n"
                    "reproduced, 1 when one diverged or cannot be replayed, 2 for bad arguments.",
        epilog="examples:\n"
               "  envrec verify recordings\n"
               "  envrec verify recordings --episodes worst:5,failed --jobs 2\n"
               "  envrec verify recordings --episodes 3,7-9 --atol 1e-6 --infos --json",
    )
    add_common(v, "all")
    v.add_argument("--atol", type=_tolerance, default=0.0, metavar="X",
                   help="absolute tolerance for observations, rewards and infos (default 0: exact)")
    v.add_argument("--infos", action="store_true", help="compare the infos too")
    v.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    v.set_defaults(func=run_verify)


def _add_render(sub: Any) -> None:
    r = sub.add_parser(
        "render", help="replay recorded episodes with rendering on and write their clips, as RecordVideo's",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Film recorded episodes afterwards: replay them as verify does, in an env made with\n"
                    "render_mode='rgb_array', and write their clips, named and described as RecordVideo's (a clip\n"
                    "that diverged is written all the same, its verdict in the clip's metadata). Exit status as verify's.",
        epilog="examples:\n"
               "  envrec render recordings                        the last episode, into recordings/videos\n"
               "  envrec render recordings --episodes worst:3,failed --jobs 2\n"
               "  envrec render recordings --episodes 12 --env-kwargs width=640 height=480 camera_id=1",
    )
    add_common(r, "last:1")
    r.add_argument("--out", default=None, metavar="DIR", help="where the clips go (default DIR/videos)")
    r.add_argument("--env-kwargs", nargs="+", default=[], metavar="KEY=VALUE",
                   help="keyword arguments for the env, winning over the recorded ones; values read as JSON, else "
                        "as strings: width=640 height=480 camera_id=1")
    r.add_argument("--fps", type=float, default=None, help="frames per second of the clips (default: the env's render_fps)")
    r.add_argument("--name-prefix", default="rl-video", help="the clips' file prefix (default rl-video, as RecordVideo's)")
    r.add_argument("--json", action="store_true", help="print the clips as JSON")
    r.set_defaults(func=run_render)


# Each adds one replay command to the CLI's subparsers.
SUBCOMMANDS: list[Callable[[Any], None]] = [_add_verify, _add_render]


def add_parser(sub: Any) -> None:
    """Register the replay commands (``envrec verify``, ``envrec render``) on the CLI's subparsers."""
    for add in SUBCOMMANDS:
        add(sub)


def describe(v: Any) -> str:
    """One line for a verdict: what ``envrec verify`` prints per episode.

    Args:
        v: a ``Verdict``.
    """
    head = f"{v.recording} episode {v.episode_id}"
    if v.status == "reproduced":
        begun = f" from step {v.from_step}" if v.from_step else ""
        return f"{head}: reproduced ({v.steps} steps{begun}, started from its {v.start})"
    if v.status == "diverged":
        from .verdict_text import largest

        by = f" ({largest(v)})" if v.difference is not None else ""
        line = (f"{head}: diverged at step {v.step}: {v.field}{v.where or ''} recorded {v.recorded!r}, "
                f"replayed {v.replayed!r}{by}")
        return line + (f"; {v.hint}" if v.hint else "")
    return f"{head}: cannot replay: {v.reason}" + (f"; {v.hint}" if v.hint else "")


def run_verify(args: argparse.Namespace) -> int:
    """``envrec verify``: print the verdicts, 0 only if every selected episode reproduced."""
    headless_display()
    from .verdicts import verdict_path
    from .verify import verify

    verdicts = _bad_arguments_exit_2("verify", args, lambda: verify(
        args.directory, args.episodes, prefix=args.prefix, jobs=args.jobs, ray=args.ray, atol=args.atol, infos=args.infos,
        make=args.make, snapshot=args.snapshot, import_modules=args.import_modules, trust_kwargs=args.trust_kwargs))
    if isinstance(verdicts, int):
        return verdicts
    counts = Counter(v.status for v in verdicts)
    if args.json:
        print(json.dumps({"reproduced": counts["reproduced"], "diverged": counts["diverged"],
                          "cannot_replay": counts["cannot_replay"], "verdicts": [v.to_json() for v in verdicts]}, indent=1))
    else:
        for v in verdicts:
            print(describe(v))
        files = sorted({verdict_path(args.directory, v.recording) for v in verdicts})
        print(f"verify: {counts['reproduced']} reproduced, {counts['diverged']} diverged, "
              f"{counts['cannot_replay']} cannot replay" + (f"; verdicts in {', '.join(files)}" if files else ""))
    if not verdicts:
        print("envrec verify: no episode selected", file=sys.stderr)
    return 0 if counts["reproduced"] == len(verdicts) else 1


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as keyword arguments: each value parsed as JSON (``640``, ``true``, ``[1, 2]``),
    else kept as a string (``camera_name=track``).

    Args:
        items: e.g. ``["width=640", "height=480"]``.

    Raises:
        ConfigError: an item without ``=``, or whose key is not a Python identifier.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"env kwarg {item!r} is not KEY=VALUE with KEY a Python name (e.g. width=640 camera_id=1)")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out


def _bad_arguments_exit_2(command: str, args: argparse.Namespace, call: Callable[[], Any]) -> Any:
    """What ``call`` returns, or 2 (printed why) for a bad argument: a ``ConfigError`` or ``TraceError``, or
    ``--ray`` without Ray."""
    try:
        return call()
    except (ConfigError, TraceError) as exc:
        print(f"envrec {command}: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        if args.ray and exc.name == "ray":
            print(f"envrec {command}: --ray needs Ray: pip install 'envrec[ray]'", file=sys.stderr)
            return 2
        raise


def _clip_line(clip: Any) -> str:
    """One line for a ``RenderedClip``: what ``envrec render`` prints per episode."""
    head = f"{clip.recording} episode {clip.episode_id}"
    video = clip.path or "no video" + (f" ({clip.reason})" if clip.reason else "")
    if clip.verdict == "reproduced":
        return f"{head}: reproduced, {clip.frames} frames: {video}"
    if clip.verdict == "diverged":
        return f"{head}: diverged at step {clip.diverged_at} ({clip.field}), filmed all the same ({clip.frames} frames): {video}"
    return f"{head}: cannot replay: {clip.reason}" + (f"; {clip.frames} frames: {video}" if clip.frames else "")


def run_render(args: argparse.Namespace) -> int:
    """``envrec render``: print the clips written, 0 only if every selected episode reproduced and has its video."""
    headless_display()
    from dataclasses import asdict

    from .render import render

    clips = _bad_arguments_exit_2("render", args, lambda: render(
        args.directory, args.episodes, prefix=args.prefix, out=args.out, env_kwargs=parse_env_kwargs(args.env_kwargs),
        fps=args.fps, name_prefix=args.name_prefix, jobs=args.jobs, ray=args.ray, make=args.make, snapshot=args.snapshot,
        import_modules=args.import_modules, trust_kwargs=args.trust_kwargs))
    if isinstance(clips, int):
        return clips
    counts = Counter(clip.verdict for clip in clips)
    if args.json:
        print(json.dumps({"reproduced": counts["reproduced"], "diverged": counts["diverged"],
                          "cannot_replay": counts["cannot_replay"], "clips": [asdict(c) for c in clips]}, indent=1))
    else:
        for clip in clips:
            print(_clip_line(clip))
        out = args.out or os.path.join(args.directory, "videos")
        unwritten = sum(clip.path is None and clip.verdict != "cannot_replay" for clip in clips)
        print(f"render: {len(clips)} episode(s) into {out}: {counts['reproduced']} reproduced, "
              f"{counts['diverged']} diverged, {counts['cannot_replay']} cannot replay"
              + (f"; {unwritten} replayed but without a video (see above)" if unwritten else ""))
    if not clips:
        print("envrec render: no episode selected", file=sys.stderr)
    return 0 if counts["reproduced"] == len(clips) and all(clip.path is not None for clip in clips) else 1
