"""How ``envrec doctor`` prints its results: a line per check, the fix indented under a failure or a
warning, a summary line; or, with ``--json``, a JSON list of the results."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from .result import Result, Status

__all__ = ["LABEL", "exit_status", "print_json", "print_line", "print_summary"]

LABEL = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "SKIP", Status.INFO: "INFO"}


def print_line(result: Result, out: TextIO) -> None:
    """One check as a line (``FAIL  ffmpeg: ...``), and under a failure or a warning, its fix."""
    out.write(f"{LABEL[result.status]:<5} {result.name}: {result.message}\n")
    if result.fix and result.status in (Status.FAIL, Status.WARN):
        out.write(f"      fix: {result.fix}\n")
    out.flush()


def print_summary(results: Sequence[Result], out: TextIO) -> None:
    """The counts, and whether envrec is ready to record here."""
    counts: Counter[Status] = Counter(r.status for r in results if r.status is not Status.INFO)
    parts = [f"{counts[s]} {word}" for s, word in ((Status.PASS, "passed"), (Status.WARN, "warned"),
                                                    (Status.FAIL, "failed"), (Status.SKIP, "skipped")) if counts[s]]
    verdict = "envrec is ready to record here" if not counts[Status.FAIL] else "fix the failures above"
    out.write(f"{sum(counts.values())} checks: {', '.join(parts)}: {verdict}\n")


def print_json(results: Sequence[Result], out: TextIO) -> None:
    """The results as a JSON list of objects (name, status, message, fix, seconds, facts)."""
    json.dump([r.as_json() for r in results], out, indent=1, default=str)
    out.write("\n")


def exit_status(results: Sequence[Result]) -> int:
    """1 when a check failed, else 0 (warnings, skips and information pass)."""
    return 1 if any(r.status is Status.FAIL for r in results) else 0
