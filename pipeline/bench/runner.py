"""``envrec bench``: what does recording cost this environment? Measured side by side.

Every variant steps its own copy of the environment; rounds of a fixed
duration are interleaved (variant A, B, C, A, B, C, ...) so that drift of a
noisy machine hits all alike, and medians are reported with ratios to the
variant that records nothing. A round of an envrec variant ends only when
its workers have caught up (taken every record sent), and that wait counts
in its time: steps/s is the throughput it sustains, not what the ring's slack
absorbs for a while, and its backlog never runs in another variant's round.
Variants:

``none``             the environment alone
``render``           + ``render()`` every step, frames thrown away (the cost of producing frames)
``envrec-trace``     ``envrec.RecordTrace``
``envrec-video``     ``envrec.RecordVideo``, every episode
``envrec-both``      both
``gymnasium-video``  ``gymnasium.wrappers.RecordVideo``, every episode (needs moviepy)
``sync-pipe``        old gym's way: an ffmpeg child fed from inside ``step()``
``inprocess-trace``  gym-recording's way: lists in the env process, batches written at episode ends

Not run unless asked for: ``envrec-trace-untimed``, ``envrec.RecordTrace`` with
its built-in call timing off (beside ``envrec-trace`` it shows what the stats cost),
and ``envrec-video-fragmented``, ``envrec.RecordVideo`` keeping fragmented MP4s
(``VideoSettings(faststart=False)``: no second ffmpeg run per clip).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym

from ..formats.ffmpeg import VideoSettings
from .monitor import CpuMeter, PeakRss
from .variants import InProcessTrace, RenderEveryStep, SyncPipe

__all__ = ["EXTRA_VARIANTS", "VARIANTS", "BenchRow", "envrec_parts", "make_variant", "run_bench", "run_for"]

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
EXTRA_VARIANTS = ("envrec-trace-untimed", "envrec-video-fragmented")


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
    # CPU per step over the measured rounds: the env process's, envrec's workers', ffmpeg's (None: none ran)
    env_cpu_us: float = 0.0
    worker_cpu_us: float | None = None
    ffmpeg_cpu_us: float | None = None


def make_variant(name: str, make_env: Callable[[], gym.Env], folder: str) -> gym.Env | None:
    """The environment of one variant, or None when what it needs is not installed."""
    from ..record.record_trace import RecordTrace, RecordVideo

    every = lambda e: True
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
    if name == "envrec-video-fragmented":
        return RecordVideo(make_env(), sub, episode_trigger=every, settings=VideoSettings(faststart=False))
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


DRAIN_TIMEOUT_S = 60.0  # how long a variant's workers may take to catch up after its round


def wait_for_workers(env: gym.Env) -> float:
    """Wait until envrec's workers have taken every record sent (their backlog would otherwise be worked
    off during the next variant's round, taking its CPU); the seconds waited, which count for this variant."""
    recs = envrec_parts(env)
    start = time.perf_counter()
    while any(r.backlog_bytes for r in recs) and time.perf_counter() - start < DRAIN_TIMEOUT_S:
        time.sleep(0.005)
    return time.perf_counter() - start


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
        longest = max(longest, dt)
        calls += 1
    return calls, pc() - start, longest


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
        cpu = CpuMeter()
        closed: set[str] = set()
        try:
            pid_lists = {name: _pids_of(env) for name, env in envs.items()}
            for name in envs:
                rss.own(name, pid_lists[name])
            states = {k: {"done": True} for k in envs}
            rates: dict[str, list[float]] = {k: [] for k in envs}
            steps = {k: 0 for k in envs}
            longest = {k: 0.0 for k in envs}
            for name, env in envs.items():  # warm up: first episode, workers started
                run_for(env, min(seconds, 0.5), states[name])
                wait_for_workers(env)
            for name in envs:
                cpu.baseline(name, pid_lists[name]())
            for r in range(rounds):
                for name, env in envs.items():
                    if progress:
                        progress(f"round {r + 1}/{rounds}: {name}")
                    rss.begin(name)
                    with cpu.window(name):
                        calls, secs, worst = run_for(env, seconds, states[name])
                        secs += wait_for_workers(env)
                    rss.end()
                    rates[name].append(calls / secs)
                    steps[name] += calls
                    longest[name] = max(longest[name], worst)
            envrec_stats = {}
            for name, env in envs.items():
                recs = envrec_parts(env)
                closed.add(name)
                with cpu.window(name, count_env=False):
                    env.close()
                if recs:
                    envrec_stats[name] = {type(r).__name__: r.stats() for r in recs}
        finally:
            rss.stop()
            for name, env in envs.items():
                if name not in closed:
                    env.close()
        return _rows(envs, rates, steps, longest, rss, cpu, envrec_stats, folder)


def _rows(envs, rates, steps, longest, rss: PeakRss, cpu: CpuMeter, envrec_stats: dict, folder: str) -> list[BenchRow]:
    """One row per variant, its ratios against the no-recording variant's median."""
    base = statistics.median(rates["none"])
    rows = []
    for name in envs:
        med = statistics.median(rates[name])
        split = cpu.split(name, envrec_stats.get(name, {}))
        per_step = {k: None if v is None else 1e6 * v / max(steps[name], 1) for k, v in split.items()}
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
                env_cpu_us=per_step["env"] or 0.0,
                worker_cpu_us=per_step["worker"],
                ffmpeg_cpu_us=per_step["ffmpeg"],
            )
        )
    return rows
