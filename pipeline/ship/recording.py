"""One local trace recording shipped to its folder under a store: its claim, head, batches and end.

``RecordingShipper.ship_pending()`` ships, oldest first, every batch the
local manifest names that is not shipped yet: its files (read once, their
sizes and CRC-32s checked against the manifest: a damaged batch is never
shipped), its index, then its commit document, create-only. An object that
is already there (a predecessor's, or a racing shipper's) is accepted when
its size is the one expected; a commit already there when it names the same
batch (same CRC-32s). Anything else is a ``ShipConflict``: another recording
ships under this id.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from typing import Any

from ..errors import TraceError
from ..formats.compression import JSON_ZST_SUFFIX, decompress_frames
from ..formats.inside import open_inside
from ..formats.ownfolder import OwnFolder
from ..formats.ship_ledger import append_ledger, ledger_name, read_ledger
from ..formats.shipped import (
    COMMIT_DIR,
    FINAL_DOC,
    HEAD_DOC,
    RECORDER_DOC,
    SHIPPED_FORMAT,
    SHIPPED_VERSION,
    Commit,
    ShippedObject,
    batch_key,
    check_commit,
    commit_name,
    data_name,
    document_bytes,
    host_label,
    index_name,
)
from ..formats.shipped_index import index_parquet, index_rows
from ..formats.store import Store, StoreUnavailable
from ..formats.trace_checks import MAX_BATCH_JSON_BYTES, MAX_RATIO, JsonBudget, check_batch, parse_json
from ..formats.trace_format import BatchEntry, Manifest, manifest_name, read_manifest_in, recording_batches

__all__ = ["FINAL_FIELDS", "HEAD_FIELDS", "RecordingShipper", "ShipConflict", "live_origin", "origin_of", "shipped_by"]

logger = logging.getLogger(__name__)

# The manifest's fields that do not change while a recording runs (head.json) and those of its end (final.json).
HEAD_FIELDS = ("format", "version", "prefix", "env_id", "observation_space", "action_space", "settings", "env", "writer")
FINAL_FIELDS = ("complete", "closed_cleanly", "stats", "error", "terminated_by", "counters", "evicted", "poisoned")


class ShipConflict(TraceError):
    """Another recording claimed this recorder id under the store, or committed a different unit at a key."""


def shipped_by() -> dict[str, Any]:
    return {"host": host_label(), "pid": os.getpid()}


class RecordingShipper:
    """Ships the trace recording ``prefix`` of ``own``'s folder to ``store``/``prefix``/.

    Args:
        store: where to.
        own: the recording's folder, opened once.
        prefix: the recording's prefix, which is its recorder id under the store.
    """

    def __init__(self, store: Store, own: OwnFolder, prefix: str) -> None:
        self.store = store
        self.own = own
        self.prefix = prefix
        self.shipped: set[str] = set()
        self.claimed = False
        self.head_shipped = False
        self.final_shipped = False
        self.damaged: set[str] = set()  # keys of batches whose local files failed their checks (never shipped)
        self._lock = threading.Lock()  # batches are shipped side by side (FolderShipping)
        self.ledger = ledger_name(prefix, store.url)

    def name(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts))

    # -- claim and resume --------------------------------------------------------------------------------------
    def claim(self, origin: dict[str, Any]) -> None:
        """Claim the recorder id (or recognise an earlier claim of this recording), then learn what is shipped.

        Args:
            origin: what identifies the recording (``origin_of``): a claim with another origin is a conflict.
        """
        mine = {"format": SHIPPED_FORMAT, "version": SHIPPED_VERSION, "kind": "trace", "recorder": self.prefix,
                "origin": origin, "claimed_by": shipped_by(), "claimed_at": time.time()}
        if not self.store.put_once(self.name(RECORDER_DOC), document_bytes(mine)):
            there = _json(self.store.read_existing(self.name(RECORDER_DOC)), f"{self.store.display}/{self.name(RECORDER_DOC)}")
            if there.get("origin") != mine["origin"]:
                raise ShipConflict(f"{self.store.display}/{self.prefix} belongs to another recording "
                                   f"({there.get('origin')!r}, not {mine['origin']!r}): ship to another URL")
        self.claimed = True
        self.resume()

    def resume(self) -> None:
        """What is shipped: the local ledger, and the store's commits (a predecessor may have committed units
        it had no time to write in the ledger; they are added to it)."""
        swept = self.store.sweep_temporaries(self.prefix)
        if swept:
            logger.info("envrec: removed %d temporary file(s) of dead shippers under %s", len(swept), self.prefix)
        local = read_ledger(self.own.path, self.ledger)
        remote = {n[: -len(".json")] for n in self.store.names(self.name(COMMIT_DIR)) if n.endswith(".json")}
        append_ledger(self.own, self.ledger, sorted(remote - local))
        self.shipped = local | remote
        self.head_shipped = self.store.size(self.name(HEAD_DOC)) is not None
        self.final_shipped = self.store.size(self.name(FINAL_DOC)) is not None

    # -- what is pending -----------------------------------------------------------------------------------------
    def manifest(self) -> Manifest:
        return read_manifest_in(self.own, manifest_name(self.prefix))

    def pending(self, manifest: Manifest) -> list[BatchEntry]:
        """The batches the manifest names that are not shipped (nor known damaged), oldest first."""
        return [e for e in recording_batches(self.own.path, manifest)
                if batch_key(e) not in self.shipped and batch_key(e) not in self.damaged]

    def finished(self, manifest: Manifest) -> bool:
        """Whether everything of the recording is shipped: it ended, its batches and its final document."""
        return bool(manifest.get("complete")) and self.final_shipped and not self.pending(manifest)

    # -- shipping --------------------------------------------------------------------------------------------------
    def ship_head(self, manifest: Manifest) -> None:
        if not self.head_shipped:
            head = {k: manifest.get(k) for k in HEAD_FIELDS}
            self.store.put_once(self.name(HEAD_DOC), document_bytes(head))
            self.head_shipped = True

    def ship_final(self, manifest: Manifest) -> None:
        if manifest.get("complete") and not self.final_shipped and not self.pending(manifest):
            final = {k: manifest.get(k) for k in FINAL_FIELDS}
            self.store.put_once(self.name(FINAL_DOC), document_bytes(final))
            self.final_shipped = True

    def ship_batch(self, manifest: Manifest, entry: BatchEntry) -> int:
        """Ship one committed batch; the bytes sent (0 when it was shipped already, or is damaged)."""
        key = batch_key(entry)
        try:
            blobs = [(entry["fn"], _read_checked(self.own.path, entry["fn"], entry["json_bytes"], entry["json_crc32"]))]
            if entry.get("bin"):
                blobs.append((entry["bin"], _read_checked(self.own.path, entry["bin"], entry["bin_bytes"], entry["bin_crc32"])))
            records = _records(blobs[0][1], entry, manifest)
        except FileNotFoundError:
            return 0  # evicted since the manifest was read (only a budget without shipping does that)
        except TraceError as exc:
            logger.error("envrec: batch %s of %s is damaged and is not shipped: %s", key, self.prefix, exc)
            self.damaged.add(key)
            return 0
        objects: list[ShippedObject] = [{"name": data_name(n), "size": len(b)} for n, b in blobs]
        index = index_parquet(index_rows(self.prefix, key, records, [o["name"] for o in objects],
                                         sum(o["size"] for o in objects)))
        sent = 0
        for obj, (_, blob) in zip(objects, blobs, strict=True):
            sent += self._put_object(obj["name"], blob)
        sent += self._put_object(index_name(key), index)
        commit: Commit = {"format": SHIPPED_FORMAT, "version": SHIPPED_VERSION, "kind": "batch", "recorder": self.prefix,
                          "key": key, "objects": objects, "index": {"name": index_name(key), "size": len(index)},
                          "entry": entry, "shipped_by": shipped_by(), "committed_at": time.time()}
        self._commit(key, commit)
        return sent

    def _put_object(self, name: str, data: bytes) -> int:
        """Put an immutable object; one already there must have the same size (a predecessor's, identical)."""
        if self.store.put_once(self.name(name), data):
            return len(data)
        size = self.store.size(self.name(name))
        if size is None:
            raise StoreUnavailable(f"{self.store.display}/{self.name(name)} is being written by another shipper: "
                                   "tried again later")
        if size != len(data) and not name.startswith("index/"):
            raise ShipConflict(f"{self.store.display}/{self.name(name)} exists with {size} bytes, not {len(data)}: "
                               "another recording ships under this recorder id")
        return 0

    def _commit(self, key: str, commit: Commit) -> None:
        if not self.store.put_once(self.name(commit_name(key)), document_bytes(dict(commit))):
            where = f"{self.store.display}/{self.name(commit_name(key))}"
            there = check_commit(self.store.read_existing(self.name(commit_name(key))), where, self.prefix)
            same = ("json_crc32", "bin_crc32", "fn")
            if any(there.get("entry", {}).get(k) != commit["entry"].get(k) for k in same):
                raise ShipConflict(f"{where} commits another batch than the local {commit['entry']['fn']}")
        with self._lock:
            append_ledger(self.own, self.ledger, [key])
            self.shipped.add(key)


def _records(data: bytes, entry: BatchEntry, manifest: Manifest) -> list[dict[str, Any]]:
    """The batch's episode records, from its JSON (read once, already checked against its CRC-32), checked as a
    reader checks them, its arrays left unread: what the index needs."""
    what = entry["fn"]
    if what.endswith(JSON_ZST_SUFFIX):
        data = decompress_frames(data, min(MAX_BATCH_JSON_BYTES, MAX_RATIO * len(data)), JsonBudget(what))
    return check_batch(parse_json(data, what), manifest, what, entry["len"])


def _read_checked(folder: str, name: str, size: int, crc: int) -> bytes:
    with open_inside(folder, name, name) as f:
        data = f.read(size + 1)
    if len(data) != size or zlib.crc32(data) != crc:
        raise TraceError(f"{name}: its size or CRC-32 differs from the manifest's")
    return data


def origin_of(manifest: Manifest, folder: str) -> dict[str, Any]:
    """What identifies a recording across shippers: its writer's host and env process, else this host and folder."""
    writer = manifest.get("writer") or {}
    if writer.get("host") and writer.get("env_pid"):
        return live_origin(writer["host"], writer["env_pid"], manifest.get("prefix", ""))
    return {"host": host_label(), "folder": os.path.abspath(folder), "prefix": manifest.get("prefix")}


def live_origin(host: str, env_pid: int, prefix: str) -> dict[str, Any]:
    """The origin of a recording made by env process ``env_pid`` on ``host`` (``socket.gethostname()``)."""
    return {"host": host, "env_pid": env_pid, "prefix": prefix}


def _json(data: bytes, where: str) -> dict:
    try:
        doc = json.loads(data)
    except ValueError:
        raise ShipConflict(f"{where} is not an envrec document: another program's files are there") from None
    if not isinstance(doc, dict):
        raise ShipConflict(f"{where} is not an envrec document")
    return doc
