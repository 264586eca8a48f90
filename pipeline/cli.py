"""The ``envrec`` command: ``envrec record`` (the main job), ``inspect``, ``export``, ``view``, ``verify``, ``render``, ``doctor`` and ``bench``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from .record.headless import headless_display
from .version import __version__

__all__ = ["headless_display", "main"]

DEFAULT_ENV = "CartPole-v1"
DEFAULT_EPISODES = 5
DEFAULT_OUT = "recordings"


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _interval(text: str) -> float | None:
    """Seconds (a positive number), or ``none``: no commit interval."""
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (or none)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a commit interval must be positive (or none)")
    return value


def _fps(text: str) -> float:
    """Frames per second: a positive number of at most 1000."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of frames per second") from None
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: frames per second are above 0 and at most 1000")
    return value


def _size(text: str) -> int:
    """A byte count such as 1048576, 500M or 20G (powers of 1024)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in units else ""
    try:
        value = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: use bytes or a number with K, M, G or T") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be positive")
    return int(value)


ATARI_FPS = 60  # the Atari 2600's frames per second, which ALE's frameskip divides


def clip_fps(env) -> int | None:
    """Frames per second that play an ALE env's clip in real time: 60 / its frameskip (ALE's v5 envs say
    ``render_fps`` 30 with a frameskip of 4: 15 is real time); None for other envs (their ``render_fps``)."""
    skip = getattr(env.unwrapped, "_frameskip", None)
    if type(env.unwrapped).__module__.startswith("ale_py") and isinstance(skip, int) and skip >= 1:
        return max(1, round(ATARI_FPS / skip))
    return None


def default_snapshot(env) -> str | None:
    """``"ale"`` for an ALE env, ``"mujoco"`` for a MuJoCo one (their state is not all in ``np_random``: without a
    snapshot, ``envrec verify`` cannot reproduce them), else None."""
    module = type(env.unwrapped).__module__
    if module.startswith("ale_py"):
        return "ale"
    base = env.unwrapped
    if type(getattr(base, "model", None)).__module__.startswith("mujoco") and hasattr(base, "data"):
        return "mujoco"
    return None


def _env_to_record(args: argparse.Namespace):
    """The env ``envrec record`` records, made to render as its videos need; None once it said on stderr why it
    cannot be (an id it cannot make, an env that cannot render here as asked, with the doctor's fix): exit 2,
    nothing written."""
    from .doctor.render_check import render_mode_for, render_problem
    from .env_ids import make_env

    render_mode, problem = render_mode_for(args.env, args.render_mode) if args.video_every else (None, None)
    if problem is None:
        try:
            env = make_env(args.env, render_mode=render_mode)
        except Exception as exc:  # noqa: BLE001  (gymnasium raises several types for unknown ids and missing extras)
            problem = f"cannot make environment {args.env!r}: {str(exc) or type(exc).__name__}"
        else:
            problem = render_problem(env, args.env, args.seed) if args.video_every else None
            if problem is None:
                return env
            env.close()
    print(f"envrec record: {problem}", file=sys.stderr)
    return None


def _record(args: argparse.Namespace) -> int:
    headless_display()
    from tqdm import tqdm

    from .errors import ConfigError
    from .record.record_trace import RecordTrace, RecordVideo

    env = _env_to_record(args)
    if env is None:
        return 2
    video = None
    try:
        if args.video_every:
            every = args.video_every
            prefix = time.strftime("rl-video-%Y%m%d-%H%M%S")  # a second run must not overwrite the first's clips
            video = env = RecordVideo(
                env, args.out, episode_trigger=lambda e: e % every == 0, name_prefix=prefix, fps=args.fps or clip_fps(env),
                max_bytes=args.video_max_bytes, keep_last_clips=args.keep_last_clips, ship_to=args.ship_to,
            )
        env = RecordTrace(
            env, args.out, name_prefix=args.name_prefix, batch_bytes=args.batch_bytes,
            snapshot=None if args.snapshot == "none" else (args.snapshot or default_snapshot(env)),
            compression=None if args.compress == "none" else args.compress, max_bytes=args.max_bytes,
            commit_interval=args.commit_interval, ship_to=args.ship_to,
        )
    except (ConfigError, ValueError) as exc:
        if video is not None:
            video.close()
        print(f"envrec record: {exc}", file=sys.stderr)
        return 2
    episodes = steps = 0
    total = args.steps if args.steps else args.episodes
    bar = tqdm(total=total, unit="step" if args.steps else "episode", desc=f"recording {args.env}",
                # None: no bar when stdout is not a terminal (a log file, CI), so logs are not flooded
                disable=True if args.quiet else None)
    try:
        env.action_space.seed(args.seed)
        seed = args.seed
        while (steps < args.steps) if args.steps else (episodes < args.episodes):
            env.reset(seed=seed)
            seed = None  # seed the first episode only, as Gymnasium recommends
            done = False
            while not done and not (args.steps and steps >= args.steps):
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                done = terminated or truncated
                steps += 1
                if args.steps:
                    bar.update(1)
            episodes += 1
            if not args.steps:
                bar.update(1)
    except KeyboardInterrupt:
        print("\ninterrupted: finalizing what was recorded", file=sys.stderr)
    finally:
        bar.close()
        env.close()
        stats = env.stats()
    return _report(args, env, video, episodes, steps, stats)


def _report(args: argparse.Namespace, env, video, episodes: int, steps: int, stats: dict) -> int:
    """Print what ``envrec record`` wrote; 1 when something was lost or broken."""
    manifest = env.recorder.manifest_path
    files = [n for n in os.listdir(env.directory) if n.startswith(env.recorder.prefix)]
    print(f"recorded {episodes} episode(s), {steps} step(s) of {args.env}")
    print(f"  trace: {stats['batches']} batch(es), {len(files)} file(s), {_human(stats['bytes_committed'])}")
    print(f"  manifest: {manifest}")
    problems = []
    if stats["broken"] or stats["records_dropped"]:
        problems.append(f"trace broken={stats['broken']}, records dropped={stats['records_dropped']}")
    if video is not None:
        v = video.stats()
        clips = sorted(n for n in os.listdir(env.directory) if n.endswith((".mp4", ".cast")))
        size = sum(os.path.getsize(os.path.join(env.directory, n)) for n in clips)
        print(f"  video: {v['clips_finished']} clip(s), {v['frames_written']} frame(s), {_human(size)}: {', '.join(clips[:4])}{' ...' if len(clips) > 4 else ''}")
        if v["broken"] or v["clips_broken"] or v["frames_dropped"]:
            problems.append(f"video broken={v['broken']}, clips broken={v['clips_broken']}, frames dropped={v['frames_dropped']}")
    if args.ship_to is not None:
        from .formats.store import redact

        v = video.stats() if video is not None else {}
        pending = stats.get("ship_pending", 0) + v.get("ship_pending", 0)
        print(f"  shipped: {stats.get('ship_batches', 0)} batch(es), {v.get('ship_clips', 0)} clip(s) to {redact(args.ship_to)}")
        if pending:
            problems.append(f"{pending} batch(es) or clip(s) not shipped (envrec ship {env.directory} URL ships them)")
    if problems:
        print("  problems: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"  read it back: envrec inspect {env.directory}")
    print(f"  watch it: envrec view {env.directory}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from .read.reader import TraceError
    from .read.summary import summarize
    from .replay.verdict_text import inspect_line

    try:
        s = summarize(args.directory)
    except TraceError as exc:
        print(f"envrec inspect: {exc}", file=sys.stderr)
        return 2
    print(f"{s.directory}: {len(s.recordings)} recording(s), {s.batches} batch(es), {_human(s.bytes)}")
    for r in s.recordings:
        state = "complete" if r["complete"] else "in progress or interrupted"
        if r["complete"] and not r["closed_cleanly"]:
            state = "finalized after its env process died"
        parts = f" ({r['parts']} records: long ones in parts)" if r["parts"] != r["episodes"] else ""
        print(f"  {r['prefix']}: env {r['env_id']}, {r['episodes']} episode(s){parts} in {r['batches']} batch(es), {state}")
        if isinstance(r["prefix"], str):
            print(f"    {inspect_line(args.directory, r['prefix'], args.directory, len(s.recordings) > 1, r['episodes'])}")
        if r["compression"] and r["arrays"] and set(r["arrays"].values()) == {"raw"}:
            print("    compression: no image-like array to compress, every array raw")
        elif r["compression"]:
            c = r["compression"]
            print(f"    {c['codec']} level {c['level']}{', image-like arrays only' if c.get('arrays') == 'image-like' else ''}"
                  f"{', delta filter off' if c.get('delta') is False else ''}: {r['raw_bytes'] / max(1, r['bytes']):.1f}x "
                  f"smaller than raw ({_human(r['raw_bytes'])} -> {_human(r['bytes'])})")
        if r["arrays"]:
            print("    arrays: " + ", ".join(f"{k} {v}" for k, v in r["arrays"].items()))
        if r["evicted"] and r["evicted"].get("batches"):
            e = r["evicted"]
            print(f"    disk budget: {e['batches']} older batch(es), {e['episodes']} episode(s), {_human(e['bytes'])} evicted")
    if s.lengths:
        import numpy as np

        lengths, returns = np.array(s.lengths), np.array(s.returns)
        print(f"episodes: {s.episodes}, steps: {s.steps}")
        print(f"  length  min {lengths.min()}  mean {lengths.mean():.1f}  max {lengths.max()}")
        print(f"  return  min {returns.min():.3g}  mean {returns.mean():.3g}  max {returns.max():.3g}")
        if any(n > 1 for n in s.parts):
            print(f"  {sum(n > 1 for n in s.parts)} long episode(s) read from parts, {sum(s.parts)} part(s) in all")
        for i in range(min(args.list, len(s.lengths))):
            print(f"  episode {i}: {_episode_line(s, i)}")
    if s.clips:
        broken = [c for c in s.clips if c.get("broken")]
        frames = sum(c.get("frames_written") or 0 for c in s.clips)
        print(f"clips: {len(s.clips)}, frames: {frames}, broken: {len(broken)}")
        for c in broken:
            print(f"  broken clip {c['name']}: {c.get('error') or c.get('reason')}")
    if s.problems:
        print("problems:", file=sys.stderr)
        for p in s.problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print("every file the manifests name is present and complete")
    return 0


def _episode_line(s, i: int) -> str:
    """How ``envrec inspect`` lists episode ``i`` of a summary: steps, return, and its parts when it has several."""
    n, first = s.lengths[i], s.first_steps[i]
    line = f"{n} steps, return {s.returns[i]:.6g}"
    if first:
        line += f", steps {first}..{first + n - 1} (the {first} before not kept: evicted, or in a damaged part)"
    if s.parts[i] > 1:
        line += f", in {s.parts[i]} parts"
    if s.continuing[i]:
        line += ", continues (still recording)"
    return line


def _add_record(sub) -> None:
    """``envrec record``'s subparser."""
    r = sub.add_parser(
        "record", help="record an environment stepped by a random policy (the default job)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Record a Gymnasium env stepped by a random policy: its trace (every reset and step) and a video of\n"
                    "every Nth episode, written by worker processes into one folder. The first reset is seeded.",
        epilog="examples:\n"
               "  envrec record                                   CartPole-v1, 5 episodes, into ./recordings\n"
               "  envrec record --env ALE/Pong-v5 --steps 10000 --video-every 5 --max-bytes 2G\n"
               "  envrec record --env FrozenLake-v1 --render-mode ansi   text frames, as asciicast clips\n"
               "  envrec record --env HalfCheetah-v5 --fps 20 --commit-interval 2\n"
               "  envrec record --ship-to s3://my-bucket/run-7            ship batches and clips as they commit",
    )
    r.add_argument("--env", default=DEFAULT_ENV, help=f"Gymnasium env id (default {DEFAULT_ENV})")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help=f"episodes to record (default {DEFAULT_EPISODES})")
    g.add_argument("--steps", type=int, default=0, help="steps to record instead of whole episodes")
    r.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT})")
    r.add_argument("--seed", type=int, default=0, help="seed of the first reset and of the random policy (default 0)")
    r.add_argument("--name-prefix", default=None, help="trace file name prefix (default gym-recording's openaigym.trace.N.PID)")
    r.add_argument(
        "--video-every", type=int, default=1, metavar="N", help="record a video of every Nth episode (default 1; 0: no video)"
    )
    r.add_argument("--compress", default="auto", metavar="auto|none|CODEC[:LEVEL]",
                   help="compress trace arrays: auto (image-like arrays only, the default), zstd, zstd:9, lz4, or none")
    r.add_argument("--max-bytes", type=_size, default=None, metavar="SIZE",
                   help="disk budget of the trace, e.g. 500M or 20G (K, M, G, T: powers of 1024); the oldest batches are evicted beyond it")
    r.add_argument("--batch-bytes", type=_size, default=5_000_000, metavar="SIZE", help="trace batch size (default 5000000)")
    r.add_argument("--commit-interval", type=_interval, default=5.0, metavar="SECONDS",
                   help="commit what the trace holds at least this often, a long episode in parts (default 5; none: by size only)")
    r.add_argument("--render-mode", choices=("rgb_array", "ansi"), default=None,
                   help="how the env renders the videos' frames: rgb_array or ansi (text, .cast clips); default "
                        "rgb_array, or ansi for an env that declares only ansi")
    r.add_argument("--fps", type=_fps, default=None, help="frames per second of the clips (default: the env's render_fps)")
    r.add_argument("--video-max-bytes", type=_size, default=None, metavar="SIZE", help="disk budget of the clips; the oldest are evicted beyond it")
    r.add_argument("--keep-last-clips", type=int, default=None, metavar="N", help="keep only the newest N clips")
    r.add_argument("--snapshot", choices=("ale", "mujoco", "none"), default=None,
                   help="simulator state recorded for replay (envrec verify, render): default ale for ALE envs, mujoco "
                        "for MuJoCo ones, none otherwise")
    r.add_argument("--ship-to", default=None, metavar="URL",
                   help="ship what is committed to URL as it goes (s3://bucket/run, gs://, az://, file://, a folder); "
                        "credentials from the store's environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=_record)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="envrec", description="Record what Gymnasium environments do.")
    p.add_argument("-v", "--verbose", action="store_true", help="log what envrec does")
    p.add_argument("--version", action="version", version=f"envrec {__version__}")
    sub = p.add_subparsers(dest="command")
    _add_record(sub)
    i = sub.add_parser(
        "inspect", help="summarize a folder of traces and check its files",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Summarize every recording in a folder (episodes, lengths, returns, compression, clips, verify's\n"
                    "verdicts) and check that each file its manifest names is present and complete. Exit status 1\n"
                    "when one is missing or damaged, 2 when the folder cannot be read.",
        epilog="examples:\n"
               "  envrec inspect recordings\n"
               "  envrec inspect recordings --list 50              list the first 50 episodes",
    )
    i.add_argument("directory")
    i.add_argument("--list", type=int, default=10, metavar="N", help="list the first N episodes (default 10)")
    i.set_defaults(func=_inspect)
    from envrec.export.command import add_parser as add_export
    from envrec.viewer.command import add_parser as add_view

    from .doctor.command import add_parser as add_doctor
    from .replay.command import add_parser as add_replay
    from .ship.command import add_parser as add_ship

    add_ship(sub)
    add_export(sub)
    add_view(sub)
    add_replay(sub)
    add_doctor(sub)
    b = sub.add_parser(
        "bench", help="measure what recording costs an environment, side by side",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Step an env with each way of recording it (none, envrec's traces and videos, Gymnasium's RecordVideo,\n"
                    "in-process and synchronous writers) in interleaved rounds, and print steps/s, the ratio to no\n"
                    "recording, CPU and memory of every process.",
        epilog="examples:\n"
               "  envrec bench                                    CartPole-v1, every variant\n"
               "  envrec bench --frames 210x160 --variants none,envrec-trace,envrec-video\n"
               "  envrec bench --env ALE/Pong-v5 --rounds 3 --json > pong.json",
    )
    b.add_argument("--env", default=None, help="Gymnasium env id (default CartPole-v1)")
    b.add_argument("--frames", default=None, metavar="HxW", help="a synthetic env of HxWx3 frames instead, e.g. 210x160 or 720x1280")
    b.add_argument("--step-us", type=float, default=0.0, help="CPU a synthetic step burns (default 0)")
    b.add_argument("--variants", default=None, help="comma-separated subset (default: all; see envrec.bench)")
    b.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    b.add_argument("--seconds", type=float, default=1.0, help="seconds per variant per round (default 1)")
    b.add_argument("--json", action="store_true", help="print the results as JSON")
    b.add_argument("--plot", default=None, metavar="FILE.png", help="draw the comparison (needs matplotlib)")
    b.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=_bench)
    return p


def _bench(args: argparse.Namespace) -> int:
    headless_display()
    from .bench import main as bench_main

    if args.rounds < 1 or args.seconds <= 0:
        print("envrec bench: --rounds must be at least 1 and --seconds positive", file=sys.stderr)
        return 2
    return bench_main(args)


FETCHING_COMMANDS = ("inspect", "verify", "render", "view", "export")  # they read a shipped URL through its cache


def _fetch_shipped(args: argparse.Namespace) -> None:
    """A shipped URL given to a reading command becomes the local cache folder of what was committed there."""
    from .read.shipped_cache import is_shipped, local_folder

    for attr in ("directory", "paths"):
        value = getattr(args, attr, None)
        if isinstance(value, list):
            setattr(args, attr, [local_folder(v) if is_shipped(v) else v for v in value])
        elif isinstance(value, str) and is_shipped(value):
            print(f"envrec {args.command}: fetching what was shipped to {_redacted(value)} into a local cache",
                  file=sys.stderr)
            setattr(args, attr, local_folder(value))


def _redacted(url: str) -> str:
    from .formats.store import redact

    return redact(url)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["record", *(argv or [])])
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.func is _record and (args.episodes < 1 or getattr(args, "steps", 0) < 0 or getattr(args, "video_every", 0) < 0):
        parser.error("--episodes must be at least 1, --steps and --video-every at least 0")
    if args.command in FETCHING_COMMANDS:
        try:
            _fetch_shipped(args)
        except (ValueError, OSError) as exc:
            print(f"envrec {args.command}: {exc}", file=sys.stderr)
            return 2
    try:
        return args.func(args)
    except BrokenPipeError:  # the output went to `head` or a closed pager: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
