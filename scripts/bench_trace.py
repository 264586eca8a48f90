"""What does trace recording cost the loop that steps the env? Side by side, in one run.

Variants, interleaved round by round so machine drift hits all alike:

* ``none``           the bare environment
* ``envrec``         ``envrec.RecordTrace`` (one copy per array into shared memory; a worker writes)
* ``inprocess``      a recorder in gym-recording's style: lists of arrays in the env process,
                     each batch encoded and written synchronously at an episode end

Environments: a synthetic env with 210x160x3 uint8 observations whose step
costs almost nothing but a fresh frame (as an Atari env returns), and
CartPole-v1. Prints median µs per step, the overhead over ``none``, the
steps/s ratio and the longest single step()/reset() call (episode ends
included). Usage: ``python scripts/bench_trace.py [--rounds 7] [--steps 3000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import envrec


class Frames(gym.Env):
    """Atari-sized frames; each step busy-works ``step_us`` (an emulator's CPU) and returns a fresh frame."""

    observation_space = spaces.Box(0, 255, (210, 160, 3), np.uint8)
    action_space = spaces.Discrete(6)

    def __init__(self, length: int = 1000, step_us: float = 0.0) -> None:
        self.length = length
        self.step_s = step_us / 1e6
        self.frame = np.random.default_rng(0).integers(0, 256, (210, 160, 3), dtype=np.uint8)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.frame.copy(), {}

    def step(self, action):
        self.t += 1
        if self.step_s:
            end = time.perf_counter() + self.step_s
            while time.perf_counter() < end:
                pass
        self.frame[0, 0, 0] = self.t % 256
        return self.frame.copy(), 1.0, self.t >= self.length, False, {}


class InProcessTrace(gym.Wrapper):
    """gym-recording's way: buffer each episode in lists, write batches synchronously (~5 MB target)."""

    def __init__(self, env, directory: str) -> None:
        super().__init__(env)
        self.directory = directory
        self.obs, self.acts, self.rews = [], [], []
        self.episodes = []
        self.buffered = 0
        self.batch_steps = 100
        self.first = 0
        self.n = 0

    def reset(self, **kwargs):
        self._end_episode()
        obs, info = self.env.reset(**kwargs)
        self.obs.append(obs)
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.acts.append(action)
        self.obs.append(obs)
        self.rews.append(r)
        self.buffered += 1
        return obs, r, term, trunc, info

    def _end_episode(self):
        if not self.obs:
            return
        self.episodes.append((np.array(self.obs), np.array(self.acts), np.array(self.rews)))
        self.obs, self.acts, self.rews = [], [], []
        if self.buffered >= self.batch_steps:
            self._save()

    def _save(self):
        stem = os.path.join(self.directory, f"inproc.ep{self.first:09d}")
        with open(stem + ".bin", "wb") as bin_f:
            eps = []
            for arrays in self.episodes:
                d = {}
                for name, a in zip(("observations", "actions", "rewards"), arrays):
                    off = bin_f.tell()
                    bin_f.write(b"\0" * (-off % 8))
                    off = bin_f.tell()
                    a.tofile(bin_f)
                    d[name] = {"__type": "ndarray", "shape": a.shape, "dtype": str(a.dtype), "npyoff": off}
                eps.append(d)
            size = bin_f.tell()
        with open(stem + ".json", "w") as f:
            json.dump({"episodes": eps}, f)
        self.batch_steps = max(1, min(50000, int(5_000_000 / (size / self.buffered) + 1)))
        self.first += len(self.episodes)
        self.episodes, self.buffered = [], 0

    def close(self):
        self._end_episode()
        if self.episodes:
            self._save()
        super().close()


def run_steps(env, steps: int, state: dict) -> tuple[float, float]:
    """Step ``steps`` times (resetting at episode ends); return (seconds, longest call)."""
    longest = 0.0
    pc = time.perf_counter
    start = pc()
    for _ in range(steps):
        t0 = pc()
        if state["done"]:
            env.reset()
            state["done"] = False
        else:
            _, _, term, trunc, _ = env.step(0)
            state["done"] = term or trunc
        dt = pc() - t0
        if dt > longest:
            longest = dt
    return pc() - start, longest


def bench(make_env, label: str, rounds: int, steps: int, folder: str) -> list[dict]:
    variants = {
        "none": make_env(),
        "envrec": envrec.RecordTrace(make_env(), os.path.join(folder, label, "envrec")),
        "inprocess": InProcessTrace(make_env(), _mkdir(os.path.join(folder, label, "inprocess"))),
    }
    inside: list[float] = []  # seconds spent inside envrec's add_step/add_reset, per call
    _time_calls(variants["envrec"].recorder, inside)
    states = {k: {"done": True} for k in variants}
    per_step = {k: [] for k in variants}
    longest = {k: 0.0 for k in variants}
    for k, env in variants.items():  # warm up: first episode, worker start
        run_steps(env, min(steps, 500), states[k])
    inside.clear()
    for r in range(rounds):
        for k, env in variants.items():
            secs, worst = run_steps(env, steps, states[k])
            per_step[k].append(secs / steps * 1e6)
            longest[k] = max(longest[k], worst)
        print(f"  {label}: round {r + 1}/{rounds}", end="\r", flush=True)
    stats = variants["envrec"].stats()
    for env in variants.values():
        env.close()
    base = statistics.median(per_step["none"])
    rows = []
    for k in variants:
        med = statistics.median(per_step[k])
        rows.append(
            {
                "env": label,
                "variant": k,
                "us_per_step": med,
                "overhead_us": med - base,
                "speed_ratio": base / med,
                "longest_call_ms": longest[k] * 1e3,
            }
        )
    inside_us = np.array(inside) * 1e6
    rows.append(
        {
            "env": label,
            "variant": "envrec inside",
            "p50_us": float(np.percentile(inside_us, 50)),
            "p99_us": float(np.percentile(inside_us, 99)),
            "max_us": float(inside_us.max()),
        }
    )
    rows.append({"env": label, "variant": "envrec stats", **{k: stats[k] for k in ("records_dropped", "blocked_s", "ring_high_water_bytes")}})
    return rows


def _time_calls(recorder, out: list) -> None:
    """Record how long each add_step/add_reset call takes (one perf_counter pair per call)."""
    pc = time.perf_counter
    for name in ("add_step", "add_reset"):
        inner = getattr(recorder, name)

        def timed(*args, _inner=inner, **kwargs):
            t0 = pc()
            _inner(*args, **kwargs)
            out.append(pc() - t0)

        setattr(recorder, name, timed)


def _mkdir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=3000, help="steps per variant per round")
    p.add_argument(
        "--frame-step-us",
        type=float,
        default=600.0,
        help="CPU each synthetic frame step burns (default 600: ~1600 steps/s, 165 MB/s of frames, "
        "well within what this disk absorbs; near 0 every recorder is bound by the disk, not by the env side)",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="envrec-bench-") as folder:
        rows = bench(lambda: Frames(step_us=args.frame_step_us), "frames 210x160x3", args.rounds, args.steps, folder)
        rows += bench(lambda: gym.make("CartPole-v1"), "CartPole-v1", args.rounds, args.steps, folder)
    print(" " * 60, end="\r")
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'env':<18} {'variant':<10} {'µs/step':>9} {'+µs/step':>9} {'speed':>7} {'longest call':>13}")
    for r in rows:
        if "p50_us" in r:
            print(f"{r['env']:<18} {'':<10} time inside envrec per call: p50 {r['p50_us']:.1f} µs, "
                  f"p99 {r['p99_us']:.1f} µs, max {r['max_us'] / 1e3:.2f} ms")
            continue
        if "us_per_step" not in r:
            print(f"{r['env']:<18} {'':<10} dropped={r['records_dropped']} blocked={r['blocked_s']:.3f}s "
                  f"ring high water={r['ring_high_water_bytes'] / 2**20:.1f} MiB")
            continue
        print(
            f"{r['env']:<18} {r['variant']:<10} {r['us_per_step']:>9.1f} {r['overhead_us']:>+9.1f} "
            f"{r['speed_ratio']:>6.2f}x {r['longest_call_ms']:>10.2f} ms"
        )


if __name__ == "__main__":
    main()
