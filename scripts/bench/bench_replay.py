"""Record traces while training, render later: what each costs. Side by side, in one run.

Two measurements, each of interleaved rounds with medians reported:

1. Training-time steps/s (``envrec.bench.run_bench``): ``envrec-trace``
   (``RecordTrace`` alone) against ``envrec-both`` (``RecordTrace`` over a
   ``RecordVideo`` filming every episode, ``episode_trigger=lambda e: True``),
   for CartPole-v1, ALE/Pong-v5 and MuJoCo HalfCheetah-v5 (``MUJOCO_GL=egl``
   unless set). The env is made with ``render_mode="rgb_array"`` in both; only
   the filming variant calls ``render()``.
2. Render-later throughput in frames/s: a trace of ``--episodes`` episodes is
   recorded once, then each round renders all of them with
   ``envrec.replay.render(..., jobs=1)`` and ``jobs=2`` (one frame per
   observation, the wall time from the call to the last clip's metadata,
   recreating the env and starting the encoders included), against a live
   ``RecordVideo`` filming the same number of episodes, seeded alike (its
   frames per second of the loop, the encoder's wait at ``close()`` included).

An env whose package is not installed (ale-py, mujoco) or that cannot render
here (no EGL) is skipped with the reason printed. Usage:
``python scripts/bench/bench_replay.py [--rounds 5] [--seconds 1] [--episodes 6] [--env ID ...]``;
a quick check that it runs: ``--rounds 1 --seconds 0.2 --episodes 2 --max-steps 50``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # before anything imports mujoco
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import gymnasium as gym  # the rendering backends are chosen above

import envrec
from envrec.bench import format_table, run_bench
from envrec.env_ids import load_env_namespace, make_env
from envrec.replay import render

ENVS = ("CartPole-v1", "ALE/Pong-v5", "HalfCheetah-v5")


def why_not(env_id: str) -> str | None:
    """Why ``env_id`` cannot be measured here, or None when it can (made and rendered once)."""
    if env_id.startswith("ALE/") and load_env_namespace(env_id):
        return "ale-py is not installed (pip install 'envrec[atari]')"
    try:
        env = make_env(env_id, render_mode="rgb_array")
    except Exception as exc:  # noqa: BLE001  (gymnasium raises several types for missing packages)
        return f"cannot make it: {exc}"
    try:
        env.reset(seed=0)
        env.render()
    except Exception as exc:  # noqa: BLE001  (no EGL, no display: whatever the renderer raises)
        return f"cannot render it here: {exc}"
    finally:
        env.close()
    return None


def capped(env_id: str, max_steps: int | None, **kwargs) -> gym.Env:
    """The env, its episodes cut at ``max_steps`` by Gymnasium's own TimeLimit (recorded in its spec, so replay
    recreates the same cap), so that a render-later round of HalfCheetah's 1000-step episodes stays short."""
    return make_env(env_id, **kwargs) if max_steps is None else make_env(env_id, max_episode_steps=max_steps, **kwargs)


def training_rates(env_id: str, rounds: int, seconds: float) -> None:
    rows = run_bench(lambda: make_env(env_id, render_mode="rgb_array"), ("envrec-trace", "envrec-both"), rounds, seconds)
    by = {r.variant: r for r in rows}
    print(f"\n{env_id}, training: {rounds} interleaved rounds of {seconds:g} s per variant, medians")
    print(format_table(rows))
    trace, both = by["envrec-trace"].steps_per_s, by["envrec-both"].steps_per_s
    print(f"  traces only {trace:,.0f} steps/s; filming every episode live {both:,.0f} steps/s: {trace / both:,.1f}x slower")


def record_trace(folder: str, env_id: str, episodes: int, max_steps: int | None) -> int:
    """Record ``episodes`` seeded episodes of random actions with traces only; the frames rendering them makes."""
    env = envrec.RecordTrace(capped(env_id, max_steps), folder, name_prefix="bench")
    env.action_space.seed(0)
    steps = 0
    for e in range(episodes):
        env.reset(seed=e)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            steps += 1
            done = term or trunc
    env.close()
    return steps + episodes


def live_round(folder: str, env_id: str, episodes: int, max_steps: int | None) -> tuple[int, float]:
    """Film ``episodes`` episodes live with RecordVideo (as in training); (frames, seconds)."""
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    env = envrec.RecordVideo(capped(env_id, max_steps, render_mode="rgb_array"), folder, episode_trigger=lambda e: True)
    env.action_space.seed(0)
    frames = 0
    for e in range(episodes):
        env.reset(seed=e)
        frames += 1
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            frames += 1
            done = term or trunc
    env.close()  # waits for the encoder: its last clip counts
    return frames, time.perf_counter() - t0


def render_round(trace: str, out: str, jobs: int) -> tuple[int, float]:
    """Render every episode of ``trace`` later (the env recreated from its recorded spec); (frames, seconds)."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    clips = render(trace, "all", out=out, jobs=jobs)
    secs = time.perf_counter() - t0
    odd = [f"{c.episode_id}: {c.verdict}" for c in clips if c.verdict != "reproduced"]
    if odd:
        print(f"  (render --jobs {jobs}: not reproduced: {', '.join(odd)})")
    frames = 0
    for clip in clips:
        with open(clip.meta_path) as f:
            frames += json.load(f).get("frames_written") or 0
    return frames, secs


def render_rates(env_id: str, rounds: int, episodes: int, max_steps: int | None) -> None:
    with tempfile.TemporaryDirectory(prefix="envrec-bench-replay-") as tmp:
        trace = os.path.join(tmp, "trace")
        frames = record_trace(trace, env_id, episodes, max_steps)
        rates: dict[str, list[float]] = {"live RecordVideo": [], "render --jobs 1": [], "render --jobs 2": []}
        for _ in range(rounds):
            for name, values in rates.items():
                out = os.path.join(tmp, name.replace(" ", "_"))
                if name.startswith("live"):
                    n, secs = live_round(out, env_id, episodes, max_steps)
                else:
                    n, secs = render_round(trace, out, int(name[-1]))
                values.append(n / secs)
        live = statistics.median(rates["live RecordVideo"])
        print(f"\n{env_id}, render later: {episodes} episodes ({frames} frames), {rounds} interleaved rounds, medians")
        for name, values in rates.items():
            med = statistics.median(values)
            print(f"  {name:<17} {med:10,.1f} frames/s  {med / live:5.2f}x live  (min {min(values):,.1f}, max {max(values):,.1f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="seconds per training variant per round")
    p.add_argument("--episodes", type=int, default=6, help="episodes rendered per render-later round")
    p.add_argument("--max-steps", type=int, default=200,
                   help="cap on an episode's steps in the render-later part (default 200; 0: the env's own length)")
    p.add_argument("--env", action="append", help=f"env id (repeatable; default {', '.join(ENVS)})")
    args = p.parse_args()
    cap = args.max_steps or None
    for env_id in args.env or ENVS:
        reason = why_not(env_id)
        if reason:
            print(f"\n{env_id}: skipped: {reason}")
            continue
        training_rates(env_id, args.rounds, args.seconds)
        render_rates(env_id, args.rounds, args.episodes, cap)


if __name__ == "__main__":
    main()
