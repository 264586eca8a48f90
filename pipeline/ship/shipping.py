"""One folder's recordings and clips shipped to a store: what a shipper process (or ``envrec ship``) does per pass.

``FolderShipping.ship_pass()`` finds the recordings it is asked for (trace
prefixes, and their vector sub-env traces ``PREFIX.envN``; or every one in
the folder) and the clips (a video recorder's, or every one), claims each
one's id under the store the first time, and ships what was committed
locally since. A store that does not answer raises out of the pass (the
caller waits and tries again); a recording that conflicts with another one
under the store is left out for good, logged and counted.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..formats.atomic import process_alive
from ..formats.ownfolder import OwnFolder
from ..formats.ship_ledger import ledger_name, read_ledger
from ..formats.shipped import batch_key, clip_key, clip_recorder_id, host_label
from ..formats.store import Store
from ..formats.trace_format import MANIFEST_SUFFIX, Manifest, recording_batches
from .clips import ClipShipper, finished_clips
from .counters import ShipCounter, ShipCounters
from .recording import RecordingShipper, ShipConflict, origin_of

__all__ = ["FolderShipping", "ShipTargets"]

logger = logging.getLogger(__name__)

UPLOADS = 4  # batches shipped side by side when several are pending
_SEGMENT = re.compile(r".*\.m\d{6}" + re.escape(MANIFEST_SUFFIX) + "$")


@dataclass(frozen=True)
class ShipTargets:
    """What to ship from a folder.

    Args:
        prefixes: trace prefixes; None: every recording there.
        family: the prefixes stand for their vector sub-env traces ``PREFIX.envN`` too.
        clip_recorders: video recorder ids whose clips to ship; None: every clip there.
        clip_remote: the id under the store of a single video recorder's clips (default ``clips.HOST.ID``).
    """

    prefixes: tuple[str, ...] | None = None
    family: bool = False
    clip_recorders: tuple[str, ...] | None = None
    clip_remote: str | None = None

    def wants(self, prefix: str) -> bool:
        if self.prefixes is None:
            return True
        return any(prefix == p or self.family and re.fullmatch(re.escape(p) + r"\.env\d+", prefix) for p in self.prefixes)


@dataclass
class FolderShipping:
    """Ships ``targets`` of the folder ``own`` to ``store``, pass by pass, counting in ``counters``."""

    store: Store
    own: OwnFolder
    targets: ShipTargets
    counters: ShipCounters
    recordings: dict[str, RecordingShipper] = field(default_factory=dict)
    clips: dict[str, ClipShipper] = field(default_factory=dict)
    conflicted: set[str] = field(default_factory=set)
    pool: ThreadPoolExecutor | None = None

    def ship_pass(self) -> bool:
        """Ship what is committed and not shipped; True when every recording found ended and all is shipped."""
        pending = 0
        settled = True
        for prefix in self._prefixes():
            shipper = self.recordings.get(prefix)
            manifest = self._manifest(prefix)
            if manifest is None:
                settled = False
                continue
            try:
                if shipper is None:
                    shipper = self.recordings[prefix] = RecordingShipper(self.store, self.own, prefix)
                if not shipper.claimed:
                    shipper.claim(origin_of(manifest, self.own.path))
                pending += self._ship_recording(shipper, manifest)
            except ShipConflict as exc:
                self._conflict(prefix, exc)
                continue
            settled = settled and (shipper.finished(manifest) or _writer_gone(manifest) and not shipper.pending(manifest))
        pending += self._ship_clips()
        self.counters[ShipCounter.PENDING] = pending
        return settled and pending == 0

    def count_pending(self) -> int:
        """What is committed locally and not shipped as far as the ledgers say, the store not asked (after a
        pass that failed: a store that is away); set as ``PENDING`` and returned."""
        n = 0
        for prefix in self._prefixes():
            manifest = self._manifest(prefix)
            if manifest is not None:
                shipped = read_ledger(self.own.path, ledger_name(prefix, self.store.url))
                n += sum(batch_key(e) not in shipped for e in recording_batches(self.own.path, manifest))
        if self.targets.clip_recorders != ():
            metas = finished_clips(self.own)
            for rid in {m.get("recorder") for m in metas.values()}:
                if rid and (self.targets.clip_recorders is None or rid in self.targets.clip_recorders):
                    remote = self.targets.clip_remote or clip_recorder_id(rid)
                    shipped = read_ledger(self.own.path, ledger_name(remote, self.store.url))
                    n += sum(m.get("recorder") == rid and clip_key(m["name"]) not in shipped for m in metas.values())
        self.counters[ShipCounter.PENDING] = n
        return n

    def _prefixes(self) -> list[str]:
        names = self.own.listdir()
        found = [n[: -len(MANIFEST_SUFFIX)] for n in names
                 if n.endswith(MANIFEST_SUFFIX) and not n.startswith(".") and not _SEGMENT.match(n)]
        return [p for p in sorted(found) if self.targets.wants(p) and p not in self.conflicted]

    def _manifest(self, prefix: str) -> Manifest | None:
        try:
            return RecordingShipper(self.store, self.own, prefix).manifest() if prefix not in self.recordings \
                else self.recordings[prefix].manifest()
        except (OSError, ValueError) as exc:
            logger.debug("envrec: the manifest of %s cannot be read now: %s", prefix, exc)
            return None

    def _ship_recording(self, shipper: RecordingShipper, manifest: Manifest) -> int:
        """Ship the recording's head, its pending batches and (once it ended) its end; what is left pending."""
        shipper.ship_head(manifest)
        pending = shipper.pending(manifest)
        before = len(shipper.shipped)
        if len(pending) > 1:  # several batches behind (a store that came back, envrec ship): uploads side by side
            sent = list(self._pool().map(lambda e: shipper.ship_batch(manifest, e), pending))
        else:
            sent = [shipper.ship_batch(manifest, e) for e in pending]
        self.counters.add(ShipCounter.BYTES_SHIPPED, sum(sent))
        for _ in range(len(shipper.shipped) - before):
            self._shipped(ShipCounter.BATCHES_SHIPPED)
        self.counters[ShipCounter.DAMAGED] = sum(len(s.damaged) for s in self.recordings.values()) + \
            sum(len(s.damaged) for s in self.clips.values())
        manifest = shipper.manifest()
        shipper.ship_final(manifest)
        return len(shipper.pending(manifest))

    def _pool(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(UPLOADS, thread_name_prefix="envrec-ship")
        return self.pool

    def _ship_clips(self) -> int:
        if self.targets.clip_recorders == ():
            return 0
        metas = finished_clips(self.own)
        wanted = self.targets.clip_recorders
        ids = sorted({m["recorder"] for m in metas.values() if m.get("recorder")} if wanted is None else set(wanted))
        pending = 0
        for rid in ids:
            if rid in self.conflicted:
                continue
            shipper = self.clips.get(rid)
            try:
                if shipper is None:
                    remote = self.targets.clip_remote if wanted is not None and len(wanted) == 1 else None
                    shipper = self.clips[rid] = ClipShipper(self.store, self.own, rid, remote)
                if not shipper.claimed:
                    shipper.claim()
                for meta in shipper.pending(metas):
                    self.counters.add(ShipCounter.BYTES_SHIPPED, shipper.ship_clip(meta))
                    self._shipped(ShipCounter.CLIPS_SHIPPED)
                pending += len(shipper.pending(metas))
            except ShipConflict as exc:
                self._conflict(rid, exc)
        return pending

    def _shipped(self, counter: ShipCounter) -> None:
        self.counters.add(counter)
        self.counters[ShipCounter.LAST_SHIPPED_NS] = time.time_ns()

    def _conflict(self, name: str, exc: Exception) -> None:
        logger.error("envrec: %s is not shipped: %s", name, exc)
        self.conflicted.add(name)
        self.counters.add(ShipCounter.CONFLICTS)

    def ledger_names(self) -> list[str]:
        return [s.ledger for s in self.recordings.values()] + [c.ledger for c in self.clips.values()]


def _writer_gone(manifest: Manifest) -> bool:
    """A recording that will never be completed: its writer, on this host, is gone (killed with its job)."""
    writer = manifest.get("writer") or {}
    pid = writer.get("pid")
    return writer.get("host") in (None, host_label(), socket.gethostname()) and isinstance(pid, int) and not process_alive(pid)

