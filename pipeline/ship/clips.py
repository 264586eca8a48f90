"""A video recorder's finished clips shipped to its folder under a store.

A clip is finished once its ``NAME.meta.json`` is there (the encoder, or the
env process for a clip whose encoder died, writes it last, atomically). Its
video (the file the metadata names, if any) goes up first, then the metadata,
then the commit ``commits/clip.NAME.json``, create-only. The clips a shipper
takes are those whose metadata carries its recorder's id (``recorder``), or,
for ``envrec ship`` on a folder, every clip there, grouped by that id.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import TraceError
from ..formats.clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from ..formats.inside import open_inside
from ..formats.ownfolder import OwnFolder
from ..formats.ship_ledger import append_ledger, ledger_name, read_ledger
from ..formats.shipped import (
    COMMIT_DIR,
    RECORDER_DOC,
    SHIPPED_FORMAT,
    SHIPPED_VERSION,
    Commit,
    ShippedObject,
    check_commit,
    clip_key,
    clip_recorder_id,
    commit_name,
    data_name,
    document_bytes,
    host_label,
)
from ..formats.store import Store
from .recording import ShipConflict, shipped_by

__all__ = ["ClipShipper", "finished_clips"]

logger = logging.getLogger(__name__)


def finished_clips(own: OwnFolder) -> dict[str, ClipMeta]:
    """Every finished clip of the folder, by name: its metadata read (unreadable ones left out, logged)."""
    found: dict[str, ClipMeta] = {}
    for n in own.listdir():
        if not n.endswith(META_SUFFIX) or n.startswith("."):
            continue
        try:
            meta = read_clip_meta(f"{own.path}/{n}")
        except (OSError, ValueError) as exc:
            logger.debug("envrec: %s is not a clip's metadata: %s", n, exc)
            continue
        if meta.get("name") == n[: -len(META_SUFFIX)]:
            found[meta["name"]] = meta
    return found


class ClipShipper:
    """Ships the finished clips of video recorder ``recorder`` (its metadata's ``recorder`` id) in ``own``'s folder.

    Args:
        store: where to.
        own: the clips' folder, opened once.
        recorder: the video recorder's id, as its clips' metadata carries it.
        remote: its id under the store (default: ``clip_recorder_id(recorder)``).
    """

    def __init__(self, store: Store, own: OwnFolder, recorder: str, remote: str | None = None) -> None:
        self.store = store
        self.own = own
        self.recorder = recorder
        self.remote = remote or clip_recorder_id(recorder)
        self.shipped: set[str] = set()
        self.claimed = False
        self.damaged: set[str] = set()
        self.ledger = ledger_name(self.remote, store.url)

    def name(self, *parts: str) -> str:
        return "/".join((self.remote, *parts))

    def claim(self) -> None:
        mine = {"format": SHIPPED_FORMAT, "version": SHIPPED_VERSION, "kind": "clips", "recorder": self.remote,
                "origin": {"host": host_label(), "video_recorder": self.recorder}, "claimed_by": shipped_by(),
                "claimed_at": time.time()}
        if not self.store.put_once(self.name(RECORDER_DOC), document_bytes(mine)):
            from .recording import _json

            there = _json(self.store.read_existing(self.name(RECORDER_DOC)), f"{self.store.display}/{self.name(RECORDER_DOC)}")
            if there.get("origin") != mine["origin"]:
                raise ShipConflict(f"{self.store.display}/{self.remote} belongs to other clips ({there.get('origin')!r})")
        self.claimed = True
        local = read_ledger(self.own.path, self.ledger)
        remote = {n[: -len(".json")] for n in self.store.names(self.name(COMMIT_DIR)) if n.endswith(".json")}
        append_ledger(self.own, self.ledger, sorted(remote - local))
        self.shipped = local | remote

    def pending(self, clips: dict[str, ClipMeta]) -> list[ClipMeta]:
        """This recorder's finished clips not shipped yet, in the order they finished."""
        mine = [m for m in clips.values() if m.get("recorder") == self.recorder
                and clip_key(m["name"]) not in self.shipped and m["name"] not in self.damaged]
        return sorted(mine, key=lambda m: (m.get("finished_seq", 0), m["name"]))

    def ship_clip(self, meta: ClipMeta) -> int:
        """Ship one finished clip: its video, its metadata, its commit; the bytes sent."""
        name = meta["name"]
        files: list[str] = [meta["path"]] if meta.get("path") else []  # type: ignore[list-item]
        files.append(name + META_SUFFIX)
        try:
            blobs = [(f, _read(self.own.path, f)) for f in files]
        except FileNotFoundError:
            return 0  # deleted since it was listed (keep rules of a recorder that does not ship)
        except TraceError as exc:
            logger.error("envrec: clip %s is not shipped: %s", name, exc)
            self.damaged.add(name)
            return 0
        objects: list[ShippedObject] = [{"name": data_name(f), "size": len(b)} for f, b in blobs]
        sent = 0
        for obj, (_, blob) in zip(objects, blobs, strict=True):
            if self.store.put_once(self.name(obj["name"]), blob):
                sent += len(blob)
            elif self.store.size(self.name(obj["name"])) not in (len(blob), None):  # None: another's, in flight
                raise ShipConflict(f"{self.store.display}/{self.name(obj['name'])} exists with another size")
        key = clip_key(name)
        clip: dict[str, Any] = {k: meta.get(k) for k in ("name", "path", "episode_id", "content_type", "frames_written")}
        commit: Commit = {"format": SHIPPED_FORMAT, "version": SHIPPED_VERSION, "kind": "clip", "recorder": self.remote,
                          "key": key, "objects": objects, "index": None, "clip": clip, "shipped_by": shipped_by(),
                          "committed_at": time.time()}
        if not self.store.put_once(self.name(commit_name(key)), document_bytes(dict(commit))):
            where = f"{self.store.display}/{self.name(commit_name(key))}"
            there = check_commit(self.store.read_existing(self.name(commit_name(key))), where, self.remote)
            if there.get("objects") != objects:
                raise ShipConflict(f"{where} commits another clip than the local {name}")
        append_ledger(self.own, self.ledger, [key])
        self.shipped.add(key)
        return sent


def _read(folder: str, name: str) -> bytes:
    with open_inside(folder, name, name) as f:
        return f.read()
