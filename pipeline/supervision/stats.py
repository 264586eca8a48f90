"""Cheap statistics kept on the env-side hot path (process facts come from ``procinfo``).

``CallTimes`` records how long each call into envrec took in the env process
(count, total, max, and a histogram for percentiles). Adding one duration
costs a few integer operations: the histogram has 4 buckets per power of two
of nanoseconds, so a percentile is known to within ~12 % (the bucket's
geometric middle is reported), in constant memory however long the job runs.
"""

from __future__ import annotations

import math

from ..contract.procinfo import process_facts

__all__ = ["CallTimes", "process_facts", "summary_line"]

_SUB = 4  # buckets per power of two


class CallTimes:
    __slots__ = ("buckets", "max_ns", "total_ns")

    def __init__(self) -> None:
        self.total_ns = 0
        self.max_ns = 0
        self.buckets = [0] * (65 * _SUB)

    @property
    def count(self) -> int:
        """Calls recorded (the buckets' sum: ``add`` runs per step, this per look)."""
        return sum(self.buckets)

    def add(self, ns: int) -> None:
        self.total_ns += ns
        if ns > self.max_ns:  # noqa: PLR1730  (a compare, not a call: this runs per step)
            self.max_ns = ns
        b = ns.bit_length()
        self.buckets[(b << 2) | ((ns >> (b - 3)) & 3) if b > 2 else ns] += 1

    @staticmethod
    def _bucket_middle_ns(idx: int) -> float:
        b, sub = idx >> 2, idx & 3
        if b <= 2:
            return float(idx)
        lo = (4 + sub) << (b - 3)
        hi = (5 + sub) << (b - 3)
        return math.sqrt(lo * hi)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0-100) in µs; 0 when nothing was recorded."""
        count = self.count
        if not count:
            return 0.0
        rank = max(1, math.ceil(count * q / 100))
        seen = 0
        for idx, n in enumerate(self.buckets):
            seen += n
            if seen >= rank:
                return min(self._bucket_middle_ns(idx), self.max_ns) / 1e3
        return self.max_ns / 1e3

    def summary(self) -> dict[str, float]:
        count = self.count
        return {
            "calls": count,
            "call_total_s": self.total_ns / 1e9,
            "call_mean_us": self.total_ns / count / 1e3 if count else 0.0,
            "call_p50_us": self.percentile(50),
            "call_p99_us": self.percentile(99),
            "call_max_us": self.max_ns / 1e3,
        }


def summary_line(stats: dict) -> str:
    """The one line a recorder logs at close."""
    parts = []
    for key, fmt in (
        ("steps_committed", "{} steps"),
        ("frames_written", "{} frames"),
        ("batches", "{} batches"),
        ("clips_finished", "{} clips"),
        ("bytes_committed", "{} bytes"),
        ("call_p50_us", "env-side p50 {:.1f} µs"),
        ("call_p99_us", "p99 {:.1f} µs"),
        ("call_max_us", "max {:.0f} µs"),
        ("blocked_s", "blocked {:.3f} s"),
        ("records_dropped", "{} records dropped"),
        ("frames_dropped", "{} frames dropped"),
        ("worker_cpu_s", "worker CPU {:.2f} s"),
        ("ffmpeg_cpu_s", "ffmpeg CPU {:.2f} s"),
        ("broken", "BROKEN: {}"),
    ):
        v = stats.get(key)
        if v is not None and (v or key in ("steps_committed", "frames_written")):
            parts.append(fmt.format(v))
    return ", ".join(parts)
