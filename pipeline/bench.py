"""``envrec bench``: what does recording cost this environment? Measured side by side.

Every variant steps its own copy of the environment; rounds of a fixed
duration are interleaved (variant A, B, C, A, B, C, ...) so that drift of a
noisy machine hits all alike, and medians are reported with ratios to the
variant that records nothing. Variants:

``none``             the environment alone
``render``           + ``render()`` every step, frames thrown away (the cost of producing frames)
``envrec-trace``     ``envrec.RecordTrace``
``envrec-video``     ``envrec.RecordVideo``, every episode
``envrec-both``      both
``gymnasium-video``  ``gymnasium.wrappers.RecordVideo``, every episode (needs moviepy)
``sync-pipe``        old gym's way: an ffmpeg child fed from inside ``step()``
``inprocess-trace``  gym-recording's way: lists in the env process, batches written at episode ends

Not run unless asked for: ``envrec-trace-untimed``, ``envrec.RecordTrace`` with
its built-in call timing off (beside ``envrec-trace`` it shows what the stats cost).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import psutil

from .bench_variants import FrameEnv, InProcessTrace, RenderEveryStep, SyncPipe

__all__ = ["VARIANTS", "BenchRow", "run_bench", "format_table", "plot_rows", "PeakRss", "run_for"]

VARIANTS = (
    "none",
    "render",
    "envrec-trace",
    "envrec-video",
    "envrec-both",
    "gymnasium-video",
    "sync-pipe",
    "inprocess-trace",
)
EXTRA_VARIANTS = ("envrec-trace-untimed",)
MIB = 2**20


@dataclass
class BenchRow:
    variant: str
    steps_per_s: float
    ratio: float  # to "none"
    overhead_us: float  # env-side µs per step above "none"
    longest_call_ms: float
    env_rss_growth_mib: float
    child_rss_mib: dict = field(default_factory=dict)  # peak RSS of this variant's worker / ffmpeg
    video_bytes: int = 0
    envrec: dict = field(default_factory=dict)  # envrec's own stats, for envrec variants


def make_variant(name: str, make_env: Callable[[], gym.Env], folder: str) -> gym.Env | None:
    """The environment of one variant, or None when what it needs is not installed."""
    from .wrappers import RecordTrace, RecordVideo

    every = lambda e: True  # noqa: E731
    sub = os.path.join(folder, name)
    if name == "none":
        return make_env()
    if name == "render":
        return RenderEveryStep(make_env())
    if name == "envrec-trace":
        return RecordTrace(make_env(), sub)
    if name == "envrec-trace-untimed":
        return RecordTrace(make_env(), sub, timing=False)
    if name == "envrec-video":
        return RecordVideo(make_env(), sub, episode_trigger=every)
    if name == "envrec-both":
        return RecordTrace(RecordVideo(make_env(), sub, episode_trigger=every), sub)
    if name == "gymnasium-video":
        try:
            import moviepy  # noqa: F401
        except ImportError:
            return None
        return gym.wrappers.RecordVideo(make_env(), sub, episode_trigger=every, disable_logger=True)
    if name == "sync-pipe":
        return SyncPipe(make_env(), sub)
    if name == "inprocess-trace":
        return InProcessTrace(make_env(), sub)
    raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS + EXTRA_VARIANTS)}")


def envrec_parts(env: gym.Env) -> list:
    """envrec's recorders inside a wrapped env (outermost first)."""
    out = []
    while isinstance(env, gym.Wrapper):
        rec = getattr(env, "recorder", None)
        if rec is not None and hasattr(rec, "stats"):
            out.append(rec)
        env = env.env
    return out


def run_for(env: gym.Env, seconds: float, state: dict) -> tuple[int, float, float]:
    """Step (resetting at episode ends) for about ``seconds``; return (calls, elapsed s, longest call s)."""
    pc = time.perf_counter
    calls, longest = 0, 0.0
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
        if dt > longest:
            longest = dt
        calls += 1
    return calls, pc() - start, longest


class PeakRss:
    """Samples RSS every 20 ms while a variant runs: the env process's growth and the variant's children.

    All variants share the env process, so its figure is the growth above its
    RSS when the variant's round began (frames held in memory show there).
    A child process counts for the running variant unless another variant
    claims it (``own`` registers a function listing a variant's pids: envrec's
    workers, a synchronous pipe's ffmpeg); what it starts counts with it.
    """

    def __init__(self) -> None:
        self.current: str | None = None
        self.start_rss = 0
        self.growth: dict[str, float] = {}
        self.children: dict[str, dict[str, float]] = {}
        self.owned: dict[str, Callable[[], set[int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def own(self, variant: str, pids: Callable[[], set[int]]) -> None:
        self.owned[variant] = pids

    def begin(self, variant: str) -> None:
        self.start_rss = psutil.Process().memory_info().rss
        self.current = variant

    def end(self) -> None:
        self.current = None

    def _sample(self, variant: str, me: psutil.Process) -> None:
        grown = (me.memory_info().rss - self.start_rss) / MIB
        self.growth[variant] = max(self.growth.get(variant, 0.0), grown)
        others: set[int] = set()
        for v, pids in self.owned.items():
            if v != variant:
                others |= pids()
        peaks = self.children.setdefault(variant, {})
        for child in me.children():
            try:
                if child.pid in others or "resource_tracker" in " ".join(child.cmdline()):
                    continue
                for p in [child, *child.children(recursive=True)]:
                    name = "ffmpeg" if "ffmpeg" in p.name() else "worker"
                    peaks[name] = max(peaks.get(name, 0.0), p.memory_info().rss / MIB)
            except psutil.Error:
                continue

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.02):
            variant = self.current
            if variant is None:
                continue
            try:
                self._sample(variant, me)
            except psutil.Error:
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _pids_of(env: gym.Env) -> Callable[[], set[int]]:
    """A function listing the child processes a variant's env started itself."""
    workers = {r.stats()["worker_pid"] for r in envrec_parts(env)}

    def pids() -> set[int]:
        out = set(workers)
        e = env
        while isinstance(e, gym.Wrapper):
            proc = getattr(e, "proc", None)
            if proc is not None:
                out.add(proc.pid)
            e = e.env
        return out

    return pids


def _folder_bytes(folder: str, suffixes: tuple[str, ...]) -> int:
    total = 0
    for root, _, names in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(root, n)) for n in names if n.endswith(suffixes))
    return total


def run_bench(
    make_env: Callable[[], gym.Env],
    variants: tuple[str, ...] = VARIANTS,
    rounds: int = 5,
    seconds: float = 1.0,
    folder: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[BenchRow]:
    """Run the variants interleaved; one row each (variants whose needs are missing are left out)."""
    if "none" not in variants:
        variants = ("none", *variants)
    with tempfile.TemporaryDirectory(prefix="envrec-bench-") as tmp:
        folder = folder or tmp
        envs = {}
        for name in variants:
            env = make_variant(name, make_env, folder)
            if env is not None:
                env.action_space.seed(0)
                envs[name] = env
        rss = PeakRss()
        closed: set[str] = set()
        try:
            for name, env in envs.items():
                rss.own(name, _pids_of(env))
            states = {k: {"done": True} for k in envs}
            rates = {k: [] for k in envs}
            longest = {k: 0.0 for k in envs}
            for name, env in envs.items():  # warm up: first episode, workers started
                run_for(env, min(seconds, 0.5), states[name])
            for r in range(rounds):
                for name, env in envs.items():
                    if progress:
                        progress(f"round {r + 1}/{rounds}: {name}")
                    rss.begin(name)
                    calls, secs, worst = run_for(env, seconds, states[name])
                    rss.end()
                    rates[name].append(calls / secs)
                    longest[name] = max(longest[name], worst)
            envrec_stats = {}
            for name, env in envs.items():
                recs = envrec_parts(env)
                closed.add(name)
                env.close()
                if recs:
                    envrec_stats[name] = {type(r).__name__: r.stats() for r in recs}
        finally:
            rss.stop()
            for name, env in envs.items():
                if name not in closed:
                    env.close()
        base = statistics.median(rates["none"])
        rows = []
        for name in envs:
            med = statistics.median(rates[name])
            rows.append(
                BenchRow(
                    variant=name,
                    steps_per_s=med,
                    ratio=med / base,
                    overhead_us=1e6 / med - 1e6 / base,
                    longest_call_ms=longest[name] * 1e3,
                    env_rss_growth_mib=rss.growth.get(name, 0.0),
                    child_rss_mib=rss.children.get(name, {}),
                    video_bytes=_folder_bytes(os.path.join(folder, name), (".mp4", ".cast")),
                    envrec=envrec_stats.get(name, {}),
                )
            )
        return rows


def format_table(rows: list[BenchRow]) -> str:
    lines = [
        f"{'variant':<20} {'steps/s':>9} {'ratio':>7} {'+µs/step':>10} {'longest':>9} "
        f"{'env RSS':>8} {'worker':>7} {'ffmpeg':>7} {'video':>9}"
    ]
    for r in rows:
        worker = r.child_rss_mib.get("worker")
        ffmpeg = r.child_rss_mib.get("ffmpeg")
        lines.append(
            f"{r.variant:<20} {r.steps_per_s:>9.0f} {r.ratio:>6.2f}x {r.overhead_us:>+10.1f} {r.longest_call_ms:>7.1f}ms "
            f"{r.env_rss_growth_mib:>+6.0f}Mi {'-' if worker is None else f'{worker:.0f}Mi':>7} "
            f"{'-' if ffmpeg is None else f'{ffmpeg:.0f}Mi':>7} {r.video_bytes / 1024:>7.0f}Ki"
        )
    lines.append("ratio: steps/s over 'none'; +µs/step: env-side time per step above 'none'; longest: single step()/reset();")
    lines.append("env RSS: growth of the env process while the variant ran; worker/ffmpeg: peak RSS of the variant's processes")
    for r in rows:
        for recorder, s in r.envrec.items():
            if "call_p50_us" in s:
                lines.append(
                    f"{r.variant} {recorder}: inside envrec per call p50 {s['call_p50_us']:.1f} µs, "
                    f"p99 {s['call_p99_us']:.1f} µs, max {s['call_max_us'] / 1e3:.2f} ms; blocked {s['blocked_s']:.3f} s"
                )
    return "\n".join(lines)


def plot_rows(rows: list[BenchRow], path: str, title: str) -> None:
    """Bar charts of the ratio to 'none' and the longest call, into a PNG (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'envrec[plot]'") from exc
    names = [r.variant for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = ["#2b8cbe" if n.startswith("envrec") else "#999999" for n in names]
    a.barh(names, [r.ratio for r in rows], color=colours)
    a.axvline(1.0, color="black", lw=0.8)
    a.set_xlabel("steps/s relative to no recording (higher is better)")
    a.invert_yaxis()
    b.barh(names, [r.longest_call_ms for r in rows], color=colours)
    b.set_xscale("log")
    b.set_xlabel("longest single step()/reset() call, ms (log)")
    b.invert_yaxis()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rows_json(rows: list[BenchRow]) -> str:
    return json.dumps([r.__dict__ for r in rows], indent=1, default=str)


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
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    gym.make(env_id, render_mode="rgb_array").close()  # fail early, clearly, on an unknown id
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
    except Exception as exc:  # gymnasium raises several types for unknown ids and missing extras
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
