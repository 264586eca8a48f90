"""The ``envrec bench`` command: which environment, which variants, and what to print."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from ..env_ids import make_env
from .report import format_table, plot_rows, rows_json
from .runner import EXTRA_VARIANTS, VARIANTS, run_bench
from .variants import FrameEnv

__all__ = ["env_factory", "main", "parse_frames"]


def parse_frames(text: str) -> tuple[int, int]:
    """'210x160' -> (210, 160): height x width, as numpy shapes are."""
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--frames takes HEIGHTxWIDTH, e.g. 210x160, not {text!r}") from None
    if h < 1 or w < 1:
        raise ValueError(f"--frames needs a positive size, not {text!r}")
    return h, w


def env_factory(env_id: str | None, frames: str | None, step_us: float) -> tuple[Callable[[], gym.Env], str]:
    if frames:
        h, w = parse_frames(frames)
        return (lambda: FrameEnv(h, w, step_us=step_us)), f"synthetic {h}x{w}x3 frames, {step_us:g} µs/step"
    env_id = env_id or "CartPole-v1"
    make_env(env_id, render_mode="rgb_array").close()  # fail early, clearly, on an unknown id (its namespace loaded)
    return (lambda: gym.make(env_id, render_mode="rgb_array")), env_id


def main(args: Any) -> int:
    """The ``envrec bench`` command (arguments parsed by ``envrec.cli``)."""
    import sys

    from tqdm import tqdm

    try:
        make_env, label = env_factory(args.env, args.frames, args.step_us)
    except ValueError as exc:
        print(f"envrec bench: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001  (gymnasium raises several types for unknown ids and missing extras)
        print(f"envrec bench: cannot make environment {args.env!r}: {exc}", file=sys.stderr)
        return 2
    variants = tuple(args.variants.split(",")) if args.variants else VARIANTS
    unknown = [v for v in variants if v not in VARIANTS + EXTRA_VARIANTS]
    if unknown:
        print(f"envrec bench: unknown variant(s) {unknown}; known: {', '.join(VARIANTS + EXTRA_VARIANTS)}", file=sys.stderr)
        return 2
    total = args.rounds * (len(variants) + ("none" not in variants))
    with tqdm(total=total, desc=f"bench {label}", disable=True if args.json or args.quiet else None, unit="run") as bar:

        def progress(what: str) -> None:
            bar.set_postfix_str(what)
            bar.update(1)

        rows = run_bench(make_env, variants, args.rounds, args.seconds, progress=progress)
    if args.json:
        print(rows_json(rows))
    else:
        print(f"{label}: {args.rounds} interleaved rounds of {args.seconds:g} s per variant, medians")
        print(format_table(rows))
    if args.plot:
        try:
            plot_rows(rows, args.plot, f"envrec bench: {label}")
        except RuntimeError as exc:
            print(f"envrec bench: {exc}", file=sys.stderr)
            return 2
        if not args.json:
            print(f"plot: {args.plot}")
    return 0
