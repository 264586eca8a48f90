"""What a variant costs besides time: peak memory of every process, CPU of the env process and its children."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable
from typing import Self

import psutil

__all__ = ["MIB", "CpuMeter", "PeakRss"]

MIB = 2**20


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


def _cpu(t) -> float:
    return t.user + t.system


def _rusage_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """CPU seconds each variant costs, split into the env process, envrec's workers and ffmpeg.

    * env process: the CPU of the thread that steps the variant, during its
      own windows (``window``; all variants share the process, and the
      sampling thread of ``PeakRss`` must not count).
    * children: a child's CPU reaches this process when the child is reaped:
      a synchronous pipe's ffmpeg at each episode end (inside the variant's
      window), envrec's workers at the variant's ``close`` (their own CPU and
      that of the ffmpegs they reaped). What the variant's workers had spent
      before the measured rounds (their start, the warm-up) is read live at
      ``baseline`` and subtracted; envrec's own stats split the rest into
      worker and ffmpeg.
    """

    def __init__(self) -> None:
        self.env_s: dict[str, float] = {}
        self.children_s: dict[str, float] = {}
        self.base_worker_s: dict[str, float] = {}
        self.base_ffmpeg_s: dict[str, float] = {}

    def baseline(self, variant: str, pids: set[int]) -> None:
        """What the variant's child processes have spent so far (start, warm-up): not counted."""
        worker = ffmpeg = 0.0
        for pid in pids:
            try:
                p = psutil.Process(pid)
                t = p.cpu_times()
                is_ffmpeg = "ffmpeg" in p.name()
                reaped = t.children_user + t.children_system
                live = sum(_cpu(c.cpu_times()) for c in p.children(recursive=True))
            except psutil.Error:
                continue
            if is_ffmpeg:
                ffmpeg += _cpu(t)
            else:
                worker += _cpu(t)
                ffmpeg += reaped + live
        self.base_worker_s[variant] = worker
        self.base_ffmpeg_s[variant] = ffmpeg

    def window(self, variant: str, count_env: bool = True) -> _Window:
        """Context manager around a variant's stepping, or its close (``count_env=False``: that work is
        not a step's, only the children it reaps count)."""
        return _Window(self, variant, count_env)

    def split(self, variant: str, envrec_stats: dict) -> dict[str, float | None]:
        """CPU seconds of the variant's env-process windows, workers and ffmpeg, since the baseline."""
        children = self.children_s.get(variant, 0.0)
        if envrec_stats:
            worker = sum(s.get("worker_cpu_s", 0.0) for s in envrec_stats.values()) - self.base_worker_s.get(variant, 0.0)
            ffmpeg = sum(s.get("ffmpeg_cpu_s", 0.0) for s in envrec_stats.values()) - self.base_ffmpeg_s.get(variant, 0.0)
        else:
            worker, ffmpeg = None, children - self.base_ffmpeg_s.get(variant, 0.0)
        return {"env": self.env_s.get(variant, 0.0), "worker": worker, "ffmpeg": ffmpeg if ffmpeg > 1e-9 else None}


class _Window:
    def __init__(self, meter: CpuMeter, variant: str, count_env: bool) -> None:
        self.meter, self.variant, self.count_env = meter, variant, count_env

    def __enter__(self) -> Self:
        self.self0 = time.thread_time()
        self.kids0 = _rusage_s(resource.RUSAGE_CHILDREN)
        return self

    def __exit__(self, *exc) -> None:
        m, v = self.meter, self.variant
        if self.count_env:
            m.env_s[v] = m.env_s.get(v, 0.0) + time.thread_time() - self.self0
        m.children_s[v] = m.children_s.get(v, 0.0) + _rusage_s(resource.RUSAGE_CHILDREN) - self.kids0
