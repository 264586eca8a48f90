"""The serializer's side of the manifest: segments, running counters and the disk budget.

What a commit costs does not grow with the recording: the head manifest is
rewritten with at most ``SEGMENT_BATCHES`` batch entries; full segments are
written once to a file of their own (see ``envrec.formats.trace_format``), and
counters are kept running instead of summed over every batch.

Every step is crash-safe: files are replaced atomically, a segment file is
written before the head that counts it (a successor finds it and writes it
again, identically), and evicted batches leave the manifest before their
files are deleted (a successor deletes what an interrupted eviction left).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

from envrec.contract.protocol import SerializerConfig, Status, StatusSink
from envrec.formats.ownfolder import OwnFolder
from envrec.formats.shipped import batch_key
from envrec.formats.trace_format import (
    SEGMENT_BATCHES,
    BatchEntry,
    Manifest,
    manifest_document,
    read_manifest_in,
    recording_batches,
    segment_document,
    segment_name,
    unnamed_batch_files,
    write_manifest_into,
)

from .poison_log import PoisonLog

__all__ = ["ManifestWriter", "Totals"]

logger = logging.getLogger(__name__)


@dataclass
class Totals:
    """Sums over a set of batch entries."""

    batches: int = 0
    episodes: int = 0
    steps: int = 0
    bytes: int = 0

    def add(self, entry: BatchEntry, sign: int = 1) -> None:
        self.batches += sign
        self.episodes += sign * (entry["len"] - (1 if entry.get("head_part") else 0))  # episodes that start in it
        self.steps += sign * entry["steps"]
        self.bytes += sign * (entry["json_bytes"] + entry["bin_bytes"])


class ManifestWriter:
    """The batches a recording names, kept as segments plus the head's list.

    Args:
        own: the recording's folder opened once (``trace_file_names``): every file this writer writes or removes,
            relative to it, of the recording's naming only.
        prefix: the recording's.
        fault: the fault points (see envrec.contract.faults).
    """

    def __init__(self, own: OwnFolder, prefix: str, fault: Callable[[str], None] = lambda name: None) -> None:
        self.own = own
        self.folder = own.path
        self.prefix = prefix
        self.fault = fault
        self.batches: list[BatchEntry] = []  # the head's: the segment being filled
        self.first_segment = 0
        self.next_segment = 0
        self.named = Totals()  # what the manifest names now
        self.evicted = Totals()  # what disk budgets deleted
        self.held_for_shipping = 0  # bytes over max_bytes kept for the shipper (see evict)
        self.poisoned = PoisonLog()  # records skipped as poison

    # -- state ---------------------------------------------------------------
    def load(self, head: Manifest) -> None:
        """Take over a dead serializer's manifest (counters recomputed from what it names)."""
        seg = head.get("segments") or {"first": 0, "next": 0}
        self.first_segment, self.next_segment = seg["first"], seg["next"]
        self.batches = list(head["batches"])
        self.named = Totals()
        for entry in recording_batches(self.folder, head):
            self.named.add(entry)
        self.evicted = Totals(**head["evicted"]) if head.get("evicted") else Totals()
        self.poisoned.load(head)

    def head_fields(self) -> Manifest:
        """The manifest keys this writer owns (see ``trace_format.manifest_document``)."""
        return {
            "batches": self.batches,
            "segments": {"first": self.first_segment, "next": self.next_segment},
            "evicted": asdict(self.evicted),
            "poisoned": self.poisoned.entries,
        }

    def write_head(self, name: str, cfg: SerializerConfig, orphan_steps: int, **doc) -> None:
        """Write the head manifest ``name``: ``cfg``'s recording, the counters, this writer's keys and
        ``doc`` (``complete``, ``closed_cleanly``, ``stats``, ``error``, ``terminated_by``: see ``manifest_document``)."""
        counters = {**asdict(self.named), "orphan_steps": orphan_steps, "records_poisoned": self.poisoned.count}
        manifest = manifest_document(
            prefix=cfg.prefix, env_id=cfg.env_id, observation_space=cfg.observation_space,
            action_space=cfg.action_space, settings=cfg.settings, counters=counters, env=cfg.env, **doc,
        )
        manifest.update(self.head_fields())
        manifest["writer"]["env_pid"] = os.getppid()  # the env process that started this worker
        write_manifest_into(self.own, name, manifest)

    def figures(self) -> dict[str, int]:
        """What was committed, evictions included, for the serializer's summary."""
        named, evicted = self.named, self.evicted
        return {
            "steps_committed": named.steps + evicted.steps,
            "batches": named.batches + evicted.batches,
            "bytes": named.bytes + evicted.bytes,
            "batches_evicted": evicted.batches,
            "bytes_evicted": evicted.bytes,
        }

    def publish(self, status: StatusSink, commits: int, commit_us: int) -> None:
        """Set the ring's status words of what is committed (``commits``, ``commit_us``: the serializer's)."""
        named, evicted = self.named, self.evicted
        status(Status.BATCHES, named.batches + evicted.batches)
        status(Status.BYTES, named.bytes + evicted.bytes)
        status(Status.STEPS_COMMITTED, named.steps + evicted.steps)
        status(Status.EVICTED, evicted.batches)
        status(Status.BYTES_EVICTED, evicted.bytes)
        status(Status.COMMITS, commits)
        status(Status.COMMIT_US, commit_us)
        status(Status.POISONED, self.poisoned.count)
        status(Status.HELD_FOR_SHIPPING, self.held_for_shipping)

    def names(self, fn: str) -> bool:
        """Whether the head's list names the batch ``fn`` (where a pending batch would be)."""
        return any(b["fn"] == fn for b in self.batches)

    # -- commits ---------------------------------------------------------------
    def add(self, entry: BatchEntry) -> None:
        """Name a committed batch (the caller writes the head next)."""
        if len(self.batches) >= SEGMENT_BATCHES:
            name = segment_name(self.prefix, self.next_segment)
            write_manifest_into(self.own, name, segment_document(self.prefix, self.next_segment, self.batches))
            self.fault("commit:segment")
            self.next_segment += 1
            self.batches = []
        self.batches.append(entry)
        self.named.add(entry)

    # -- disk budget -----------------------------------------------------------
    def evict(self, max_bytes: int, write_head: Callable[[], None], shipped: set[str] | None = None) -> Totals:
        """Delete the oldest whole batches until what is named fits in ``max_bytes`` (the newest stays).

        The manifest stops naming them first (a segment rewritten without
        them, or the head written), then their files go. With ``shipped``
        (the shipper's ledger: shipping is on), eviction stops at the first
        batch not in it, and ``held_for_shipping`` says how many bytes over
        the budget wait for the shipper. Returns what was evicted by this call.
        """
        run = Totals()
        doomed: list[BatchEntry] = []
        dropped_segments: list[int] = []
        evictable = (lambda e: True) if shipped is None else (lambda e: batch_key(e) in shipped)
        while self.named.bytes > max_bytes and self.named.batches > 1:
            if self.first_segment < self.next_segment:
                k = self.first_segment
                entries = read_manifest_in(self.own, segment_name(self.prefix, k))["batches"]
                n = len(entries)
                while entries and self.named.bytes > max_bytes and self.named.batches > 1 and evictable(entries[0]):
                    doomed.append(self._forget(entries.pop(0), run))
                if entries and len(entries) < n:
                    write_manifest_into(self.own, segment_name(self.prefix, k), segment_document(self.prefix, k, entries))
                elif not entries:
                    dropped_segments.append(k)
                    self.first_segment += 1
                if entries:
                    break
            elif evictable(self.batches[0]):
                doomed.append(self._forget(self.batches.pop(0), run))
            else:
                break
        self.held_for_shipping = max(0, self.named.bytes - max_bytes) if shipped is not None else 0
        if not doomed:
            return run
        write_head()
        self.fault("evict:manifest")
        for k in dropped_segments:
            _unlink(self.own, segment_name(self.prefix, k))
        for entry in doomed:
            for name in (entry["fn"], entry.get("bin")):
                if name:
                    _unlink(self.own, name)
            self.fault("evict:files")
        logger.info(
            "envrec: disk budget of %d bytes: evicted %d batch(es), %d bytes, of %s (%d bytes kept)",
            max_bytes, run.batches, run.bytes, self.prefix, self.named.bytes,
        )
        return run

    def _forget(self, entry: BatchEntry, run: Totals) -> BatchEntry:
        self.named.add(entry, -1)
        self.evicted.add(entry)
        run.add(entry)
        return entry

    def sweep_evicted(self, keep: set[str]) -> list[str]:
        """Delete what an interrupted eviction left: segment files below the first one the head counts, and
        batch files of this prefix no entry names (``keep``: file names still in use, e.g. a reopened batch)."""
        named = set(keep)
        for entry in self.all_entries():
            named.update(n for n in (entry["fn"], entry.get("bin")) if n)
        seg_file = re.compile(re.escape(self.prefix) + r"\.m(\d{6})\.manifest\.json$")
        removed = [n for n in self.own.listdir() if (m := seg_file.match(n)) and int(m.group(1)) < self.first_segment]
        removed += unnamed_batch_files(self.folder, self.prefix, named)
        for name in removed:
            _unlink(self.own, name)
        return removed

    def all_entries(self) -> list[BatchEntry]:
        head: Manifest = {"prefix": self.prefix, **self.head_fields()}
        return recording_batches(self.folder, head)


def _unlink(own: OwnFolder, name: str) -> None:
    """Remove ``name`` (a name the manifest or the folder gave: one of the recording's own, or RecordError),
    relative to the folder opened once."""
    own.unlink(name)
