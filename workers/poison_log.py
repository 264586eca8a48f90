"""The records a serializer skipped because they made it fail every time (see ``envrec.contract.protocol.Suspect``).

Kept in the manifest: ``counters.records_poisoned`` counts them all,
``poisoned`` names the first ``MAX_LISTED`` (kind, episode, step, reason);
a successor takes both over from the manifest it resumes.
"""

from __future__ import annotations

from typing import Any

from envrec.contract.protocol import Kind
from envrec.formats.trace_format import Manifest

__all__ = ["MAX_LISTED", "PoisonLog"]

MAX_LISTED = 100  # poison records named in the manifest (all are counted)


class PoisonLog:
    def __init__(self) -> None:
        self.count = 0
        self.entries: list[dict[str, Any]] = []

    def load(self, head: Manifest) -> None:
        """Take over what a predecessor's manifest says (none in manifests older than this field)."""
        self.entries = list(head.get("poisoned") or [])
        self.count = head.get("counters", {}).get("records_poisoned", len(self.entries))

    def add(self, rec: Any, reason: str) -> None:
        self.count += 1
        if len(self.entries) < MAX_LISTED:
            self.entries.append({"kind": Kind(rec.kind).name, "episode": rec.episode, "step": rec.step, "reason": reason})
