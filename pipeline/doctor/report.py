"""How ``envrec doctor`` prints its results: a line per check, the fix indented under a failure or a
warning, a summary line; or, with ``--json``, a JSON list of the results."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from .result import CheckStatus, Result

__all__ = ["LABEL", "exit_status", "print_json", "print_line", "print_summary"]

LABEL = {CheckStatus.PASS: "PASS", CheckStatus.WARN: "WARN", CheckStatus.FAIL: "FAIL", CheckStatus.SKIP: "SKIP", CheckStatus.INFO: "INFO"}


def print_line(result: Result, out: TextIO) -> None:
    """One check as a line (``FAIL  ffmpeg: ...``), and under a failure or a warning, its fix."""
    out.write(f"{LABEL[result.status]:<5} {result.name}: {result.message}\n")
    if result.fix and result.status in (CheckStatus.FAIL, CheckStatus.WARN):
        out.write(f"      fix: {result.fix}\n")
    out.flush()


def print_summary(results: Sequence[Result], out: TextIO) -> None:
    """The counts, and whether envrec is ready to record here."""
    counts: Counter[CheckStatus] = Counter(r.status for r in results if r.status is not CheckStatus.INFO)
    parts = [f"{counts[s]} {word}" for s, word in ((CheckStatus.PASS, "passed"), (CheckStatus.WARN, "warned"),
                                                    (CheckStatus.FAIL, "failed"), (CheckStatus.SKIP, "skipped")) if counts[s]]
    verdict = "envrec is ready to record here" if not counts[CheckStatus.FAIL] else "fix the failures above"
    out.write(f"{sum(counts.values())} checks: {', '.join(parts)}: {verdict}\n")


def print_json(results: Sequence[Result], out: TextIO) -> None:
    """The results as a JSON list of objects (name, status, message, fix, seconds, facts)."""
    json.dump([r.as_json() for r in results], out, indent=1, default=str)
    out.write("\n")


def exit_status(results: Sequence[Result]) -> int:
    """1 when a check failed, else 0 (warnings, skips and information pass)."""
    return 1 if any(r.status is CheckStatus.FAIL for r in results) else 0
