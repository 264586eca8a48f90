"""What does recording every frame cost? Side by side, in one run, interleaved round by round.

Variants (every frame of every episode recorded, default settings):

* ``render``      the env stepped and ``render()`` called each step, frames discarded:
                  the baseline (producing frames is the env's cost, not the recorder's)
* ``bare``        the env stepped without rendering (for reference)
* ``envrec``      ``envrec.RecordVideo`` (frames copied into shared memory, encoded by a worker)
* ``gymnasium``   ``gymnasium.wrappers.RecordVideo`` (frames held in memory, encoded in ``reset()``)
* ``sync-pipe``   old gym's way: frames piped to an ffmpeg child from inside ``step()``

Prints steps/s as a ratio to ``render``, the longest single step()/reset()
call (episode ends included), and the peak RSS of the env process and of
its child processes (worker and ffmpeg) seen while each variant ran.
Environments: CartPole-v1 (rgb_array, 600x400) and, when ale-py is
installed (``pip install 'envrec[atari]'``), ALE/Pong-v5 (210x160).
Usage: ``python scripts/bench_video.py [--rounds 5] [--seconds 1.5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time

import gymnasium as gym
import imageio_ffmpeg
import psutil

import envrec


class RenderEveryStep(gym.Wrapper):
    """The baseline: produce each frame and throw it away."""

    def reset(self, **kwargs):
        out = self.env.reset(**kwargs)
        self.env.render()
        return out

    def step(self, action):
        out = self.env.step(action)
        self.env.render()
        return out


class SyncPipe(gym.Wrapper):
    """Old gym's VideoRecorder: an ffmpeg per episode, fed from inside step()."""

    def __init__(self, env, folder: str) -> None:
        super().__init__(env)
        self.folder, self.n, self.proc = folder, 0, None
        self.exe = imageio_ffmpeg.get_ffmpeg_exe()

    def _frame(self):
        frame = self.env.render()
        if self.proc is None:
            h, w, _ = frame.shape
            path = os.path.join(self.folder, f"sync-{self.n}.mp4")
            self.proc = subprocess.Popen(
                [self.exe, "-nostdin", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
                 "-s", f"{w}x{h}", "-framerate", "30", "-i", "pipe:0", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2",
                 "-c:v", "libx264", "-pix_fmt", "yuv420p", path],
                stdin=subprocess.PIPE,
            )
        self.proc.stdin.write(frame.tobytes())

    def _close_clip(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc, self.n = None, self.n + 1

    def reset(self, **kwargs):
        self._close_clip()
        out = self.env.reset(**kwargs)
        self._frame()
        return out

    def step(self, action):
        out = self.env.step(action)
        self._frame()
        return out

    def close(self):
        self._close_clip()
        super().close()


class PeakRss:
    """Samples RSS every 20 ms: the env process's growth during each variant, and envrec's worker and ffmpeg.

    All variants share the env process, so its figure per variant is the growth
    above its RSS when the variant's round began (Gymnasium's frames held in
    memory show there); envrec's worker and its ffmpeg are sampled by pid.
    """

    def __init__(self) -> None:
        self.current: str | None = None
        self.start_rss = 0
        self.growth: dict[str, float] = {}
        self.worker_pids: set[int] = set()
        self.worker_peak: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def begin(self, label: str) -> None:
        self.start_rss = psutil.Process().memory_info().rss
        self.current = label

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.02):
            label = self.current
            try:
                if label is not None:
                    grown = (me.memory_info().rss - self.start_rss) / 2**20
                    self.growth[label] = max(self.growth.get(label, 0.0), grown)
                for pid in list(self.worker_pids):
                    worker = psutil.Process(pid)
                    for p, name in [(worker, "worker"), *((c, "ffmpeg") for c in worker.children())]:
                        self.worker_peak[name] = max(self.worker_peak.get(name, 0.0), p.memory_info().rss / 2**20)
            except psutil.Error:
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_for(env, seconds: float, state: dict) -> tuple[int, float, float]:
    """Step for about ``seconds``; return (steps, elapsed seconds, longest call)."""
    pc = time.perf_counter
    steps, longest = 0, 0.0
    start = pc()
    while pc() - start < seconds:
        t0 = pc()
        if state["done"]:
            env.reset()
            state["done"] = False
        else:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            state["done"] = term or trunc
        dt = pc() - t0
        longest = max(longest, dt)
        steps += 1
    return steps, pc() - start, longest


def bench(env_id: str, rounds: int, seconds: float, folder: str, rss: PeakRss) -> list[dict]:
    make = lambda: gym.make(env_id, render_mode="rgb_array")  # noqa: E731
    sub = lambda name: os.path.join(folder, env_id.replace("/", "_"), name)  # noqa: E731
    all_episodes = lambda e: True  # noqa: E731
    variants = {
        "render": RenderEveryStep(make()),
        "bare": make(),
        "envrec": envrec.RecordVideo(make(), sub("envrec"), episode_trigger=all_episodes),
        "gymnasium": gym.wrappers.RecordVideo(make(), sub("gymnasium"), episode_trigger=all_episodes),
        "sync-pipe": SyncPipe(make(), _mkdir(sub("sync"))),
    }
    for env in variants.values():
        env.action_space.seed(0)
    rss.worker_pids.add(variants["envrec"].stats()["worker_pid"])
    states = {k: {"done": True} for k in variants}
    rates = {k: [] for k in variants}
    longest = {k: 0.0 for k in variants}
    for k, env in variants.items():  # warm up: first episode, worker start
        run_for(env, min(seconds, 0.5), states[k])
    for r in range(rounds):
        for k, env in variants.items():
            rss.begin(f"{env_id}/{k}")
            steps, secs, worst = run_for(env, seconds, states[k])
            rss.current = None
            rates[k].append(steps / secs)
            longest[k] = max(longest[k], worst)
        print(f"  {env_id}: round {r + 1}/{rounds}", end="\r", flush=True)
    t0 = time.perf_counter()
    variants["gymnasium"].close()  # its last clip is encoded here
    close_s = {"gymnasium": time.perf_counter() - t0}
    for k in ("envrec", "sync-pipe", "render", "bare"):
        t0 = time.perf_counter()
        variants[k].close()
        close_s[k] = time.perf_counter() - t0
    stats = variants["envrec"].stats()
    rss.worker_pids.clear()
    base = statistics.median(rates["render"])
    rows = []
    for k in variants:
        med = statistics.median(rates[k])
        rows.append(
            {
                "env": env_id,
                "variant": k,
                "steps_per_s": med,
                "ratio": med / base,
                "longest_call_ms": longest[k] * 1e3,
                "close_s": close_s[k],
                "env_rss_growth_mib": rss.growth.get(f"{env_id}/{k}", 0.0),
            }
        )
    rows.append(
        {
            "env": env_id,
            "variant": "envrec stats",
            **{k: stats[k] for k in ("frames_sent", "frames_written", "frames_dropped", "blocked_s", "clips_broken")},
            **{f"peak_rss_mib_{k}": v for k, v in rss.worker_peak.items()},
        }
    )
    rss.worker_peak = {}
    return rows


def _mkdir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.5, help="seconds per variant per round")
    p.add_argument("--env", action="append", help="env id to measure (repeatable; default CartPole-v1 and ALE/Pong-v5)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    envs = args.env or ["CartPole-v1", "ALE/Pong-v5"]
    if any(e.startswith("ALE/") for e in envs):
        try:
            import ale_py

            gym.register_envs(ale_py)
        except ImportError:
            print("ale-py is not installed: skipping ALE environments (pip install 'envrec[atari]')")
            envs = [e for e in envs if not e.startswith("ALE/")]
    rss = PeakRss()
    rows = []
    with tempfile.TemporaryDirectory(prefix="envrec-bench-video-") as folder:
        for env_id in envs:
            rows += bench(env_id, args.rounds, args.seconds, folder, rss)
    rss.stop()
    print(" " * 60, end="\r")
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'env':<13} {'variant':<10} {'steps/s':>9} {'vs render':>9} {'longest':>10} {'close':>7}  env RSS growth")
    for r in rows:
        if "steps_per_s" not in r:
            print(f"{r['env']:<13} {'':<10} envrec: " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items() if k not in ("env", "variant")))
            continue
        print(
            f"{r['env']:<13} {r['variant']:<10} {r['steps_per_s']:>9.0f} {r['ratio']:>8.2f}x "
            f"{r['longest_call_ms']:>7.1f} ms {r['close_s']:>6.2f}s  {r['env_rss_growth_mib']:+.0f} MiB"
        )


if __name__ == "__main__":
    main()
