"""Shipped recordings brought back as a local folder every reader reads: the cache of a URL.

Objects under a shipped URL never change once committed, so a local copy of
them stays right forever: ``ShippedCache`` keeps, per URL, a folder (under
``~/.cache/envrec/shipped/``, or ``$ENVREC_CACHE_DIR``) holding the data
objects fetched so far under their own names and, for each trace recording,
a manifest made from its commit documents (``PREFIX.manifest.json``: the
shipped head, the batches committed so far, oldest first, and once the
recording ended its final fields). What is fetched and when:

* ``refresh()`` lists each recorder's ``commits/`` and reads the commit
  documents (and indexes) it has not read yet: a few small objects per new
  batch, nothing of the data;
* ``materialize(recorders, keys)`` fetches the data objects of the batches
  and clips asked for that the folder does not hold yet, checks each
  against its commit (size; a batch's CRC-32s), and writes the manifests.

A commit whose objects fail their checks is reported and left out, never
half-copied: files land in the folder through a temporary name.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..errors import TraceError
from ..formats.atomic import write_atomic
from ..formats.shipped import (
    COMMIT_DIR,
    FINAL_DOC,
    HEAD_DOC,
    RECORDER_DOC,
    Commit,
    check_commit,
    commit_name,
)
from ..formats.store import Store, is_url, store_url
from ..formats.trace_format import (
    MANIFEST_SUFFIX,
    BatchEntry,
    Manifest,
    batch_position,
    manifest_document,
    manifest_name,
)

__all__ = [
    "CACHE_ENV_VAR",
    "RecorderCommits",
    "ShippedCache",
    "cache_root",
    "committed_entries",
    "is_shipped",
    "local_folder",
    "object_problem",
    "recorder_manifest",
]

logger = logging.getLogger(__name__)

CACHE_ENV_VAR = "ENVREC_CACHE_DIR"


def cache_root() -> str:
    return os.environ.get(CACHE_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache", "envrec", "shipped")


@dataclass
class RecorderCommits:
    """What one recorder under the URL has committed, as far as the last refresh saw."""

    name: str
    kind: str  # "trace" or "clips"
    commits: dict[str, Commit] = field(default_factory=dict)  # by key
    index_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # a batch's index rows, by key
    head: dict | None = None
    final: dict | None = None
    broken: dict[str, str] = field(default_factory=dict)  # key: why it is left out


class ShippedCache:
    """The commits under ``url`` and a local folder of the objects fetched so far.

    Args:
        url: a shipped run's URL (recorders under it) or one recorder's (``URL/RECORDER``).
        storage_options: fsspec's options. Default None: the store's environment.
        cache_dir: the local folder for this URL. Default: under ``cache_root()``, named by the URL's hash.
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, cache_dir: str | None = None) -> None:
        self.store = Store(url, storage_options)
        digest = hashlib.sha256(self.store.url.encode()).hexdigest()[:16]
        self.folder = cache_dir or os.path.join(cache_root(), digest)
        os.makedirs(self.folder, exist_ok=True)
        self.recorders: dict[str, RecorderCommits] = {}
        self.single: str | None = None  # the URL is one recorder's: its name
        self._root = ""  # the recorders' parent, relative to the store's root ("" or "..")

    # -- commits -------------------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the commit documents (and indexes) committed since the last refresh."""
        names = self._recorder_names()
        for name in names:
            rec = self.recorders.get(name)
            if rec is None:
                doc = self._doc(f"{name}/{RECORDER_DOC}")
                if doc is None:
                    continue
                rec = self.recorders[name] = RecorderCommits(name, str(doc.get("kind", "trace")))
            self._refresh_recorder(rec)

    def _recorder_names(self) -> list[str]:
        """The recorders under the URL: its folders holding a ``recorder.json``, or the URL itself when it has one."""
        if self.single is None and self.store.size(RECORDER_DOC) is not None:
            parent, _, name = self.store.root.rpartition("/")
            self.single = name
            self.store.root = parent
        if self.single is not None:
            return [self.single]
        return [n for n in self.store.names("") if not n.startswith(".")]

    def _refresh_recorder(self, rec: RecorderCommits) -> None:
        keys = [n[: -len(".json")] for n in self.store.names(f"{rec.name}/{COMMIT_DIR}") if n.endswith(".json")]
        new = [k for k in keys if k not in rec.commits and k not in rec.broken]
        if rec.kind == "trace" and rec.head is None:
            rec.head = self._doc(f"{rec.name}/{HEAD_DOC}")
        if rec.final is None:
            rec.final = self._doc(f"{rec.name}/{FINAL_DOC}")
        blobs = self._read_many([f"{rec.name}/{commit_name(k)}" for k in new])
        for key in new:
            where = f"{self.store.display}/{rec.name}/{commit_name(key)}"
            try:
                commit = check_commit(blobs[f"{rec.name}/{commit_name(key)}"], where, rec.name)
            except (TraceError, KeyError, TypeError) as exc:
                rec.broken[key] = str(exc)
                logger.warning("envrec: %s is left out: %s", where, exc)
                continue
            rec.commits[key] = commit
        self._read_indexes(rec, [k for k in new if k in rec.commits and rec.commits[k]["kind"] == "batch"])

    def _read_indexes(self, rec: RecorderCommits, keys: list[str]) -> None:
        import pyarrow.parquet as pq

        names = {k: f"{rec.name}/{index['name']}" for k in keys if (index := rec.commits[k].get("index")) is not None}
        blobs = self._read_many(list(names.values()))
        for key, name in names.items():
            try:
                rec.index_rows[key] = pq.read_table(io.BytesIO(blobs[name])).to_pylist()
            except Exception as exc:  # noqa: BLE001  (pyarrow's errors on a damaged file are many)
                rec.broken[key] = f"its index cannot be read: {exc}"
                rec.commits.pop(key, None)
                logger.warning("envrec: %s/%s is left out: %s", self.store.display, name, exc)

    def _read_many(self, names: list[str]) -> dict[str, bytes]:
        """Objects read concurrently where the store can (s3fs, gcsfs), by name; a missing one left out."""
        if not names:
            return {}
        paths = {self.store.path(n): n for n in names}
        got = self.store.fs.cat(list(paths), on_error="return")
        return {paths[p]: v for p, v in got.items() if isinstance(v, bytes)}

    def _doc(self, name: str) -> dict | None:
        try:
            doc = json.loads(self.store.read(name))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            logger.warning("envrec: %s/%s is not an envrec document: %s", self.store.display, name, exc)
            return None
        return doc if isinstance(doc, dict) else None

    # -- local copies ----------------------------------------------------------------------------------------------------
    def materialize(self, recorders: list[str] | None = None, keys: set[str] | None = None) -> str:
        """Fetch what the folder lacks of ``recorders`` (default all) — their batches (``keys``: only these) and
        clips — and write their manifests; the folder."""
        for rec in self.recorders.values():
            if recorders is not None and rec.name not in recorders:
                continue
            wanted = [c for k, c in sorted(rec.commits.items()) if keys is None or k in keys]
            self._fetch(rec, wanted)
            if rec.kind == "trace":
                self._write_manifest(rec)
        self._forget_gone()
        return self.folder

    def _forget_gone(self) -> None:
        """Remove the manifests of recorders no longer under the URL (a store emptied and used again): the
        cache then reads as the store does."""
        current = {manifest_name(name) for name in self.recorders}
        for n in os.listdir(self.folder):
            if n.endswith(MANIFEST_SUFFIX) and n not in current:
                os.unlink(os.path.join(self.folder, n))

    def _fetch(self, rec: RecorderCommits, commits: list[Commit]) -> None:
        missing = [(c, o) for c in commits for o in c["objects"]
                   if not _have(self.folder, o["name"].split("/", 1)[1], o["size"])]
        blobs = self._read_many([f"{rec.name}/{o['name']}" for _, o in missing])
        for commit, obj in missing:
            local = obj["name"].split("/", 1)[1]
            data = blobs.get(f"{rec.name}/{obj['name']}")
            problem = object_problem(commit, local, obj["size"], data)
            if problem is not None:
                rec.broken[commit["key"]] = problem
                rec.commits.pop(commit["key"], None)
                logger.warning("envrec: %s/%s/%s is left out: %s", self.store.display, rec.name, obj["name"], problem)
                continue
            assert data is not None
            write_atomic(os.path.join(self.folder, local), data)

    def _write_manifest(self, rec: RecorderCommits) -> None:
        entries = [e for e in committed_entries(rec) if all(_have(self.folder, o["name"].split("/", 1)[1], o["size"])
                                                             for o in rec.commits[_key(e)]["objects"])]
        doc = recorder_manifest(rec, entries)
        if doc is not None:
            write_atomic(os.path.join(self.folder, manifest_name(rec.name)), json.dumps(doc).encode())


def committed_entries(rec: RecorderCommits) -> list[BatchEntry]:
    """The manifest entries of ``rec``'s committed batches, oldest first."""
    return sorted((c["entry"] for c in rec.commits.values() if c["kind"] == "batch"), key=batch_position)


def recorder_manifest(rec: RecorderCommits, entries: list[BatchEntry]) -> Manifest | None:
    """The manifest of trace recorder ``rec`` naming ``entries``, made from its shipped head (and final fields once
    it ended); None before its head was shipped."""
    if rec.head is None:
        return None
    final = rec.final or {}
    doc = manifest_document(
        prefix=rec.name, env_id=rec.head.get("env_id"), observation_space=rec.head.get("observation_space") or {},
        action_space=rec.head.get("action_space") or {}, settings=rec.head.get("settings") or {}, batches=entries,
        complete=bool(final.get("complete")), closed_cleanly=bool(final.get("closed_cleanly")), stats=final.get("stats"),
        error=final.get("error"), terminated_by=final.get("terminated_by"), env=rec.head.get("env"),
    )
    doc["counters"] = {"batches": len(entries), "episodes": sum(e["len"] - bool(e.get("head_part")) for e in entries),
                       "steps": sum(e["steps"] for e in entries),
                       "bytes": sum(e["json_bytes"] + e["bin_bytes"] for e in entries),
                       "orphan_steps": 0, "records_poisoned": 0}
    if rec.head.get("writer"):
        doc["writer"] = rec.head["writer"]
    return doc


def _key(entry: BatchEntry) -> str:
    from ..formats.shipped import batch_key

    return batch_key(entry)


def _have(folder: str, name: str, size: int) -> bool:
    try:
        return os.stat(os.path.join(folder, name)).st_size == size
    except OSError:
        return False


def object_problem(commit: Commit, local: str, size: int, data: bytes | None) -> str | None:
    """Why a fetched object (``local``: its name in the recording folder) does not match its commit, or None.
    Its name must be one its commit's unit owns (a batch's files, under its recorder's prefix; a clip's
    files): a commit naming another recording's files, or a manifest, is not followed."""
    entry, clip = commit.get("entry"), commit.get("clip") or {}
    if entry is not None and (local not in (entry.get("fn"), entry.get("bin")) or
                              not local.startswith(f"{commit['recorder']}.")):
        return f"{local} is not a file of batch {commit['key']} of {commit['recorder']}"
    if entry is None and not (isinstance(clip.get("name"), str) and
                              local in {clip["name"] + s for s in (".mp4", ".cast", ".meta.json")}):
        return f"{local} is not a file of clip {clip.get('name')!r}"
    if data is None:
        return "missing from the store"
    if len(data) != size:
        return f"{len(data)} bytes, its commit says {size}"
    entry = commit.get("entry")
    if entry is not None:
        crc = {entry.get("fn"): entry.get("json_crc32"), entry.get("bin"): entry.get("bin_crc32")}.get(local)
        if crc is not None and zlib.crc32(data) != crc:
            return "its CRC-32 differs from its commit's"
    return None


def is_shipped(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL, or a local folder holding shipped recorders (``recorder.json`` in it or in a
    folder of it) rather than a recording folder."""
    path = os.fspath(path)
    if is_url(path) and not path.startswith("file://"):
        return True
    folder = store_url(path)
    if os.path.isfile(os.path.join(folder, RECORDER_DOC)):
        return True
    try:
        with os.scandir(folder) as entries:
            return any(e.is_dir(follow_symlinks=False) and os.path.isfile(os.path.join(e.path, RECORDER_DOC))
                       for _, e in zip(range(1000), entries, strict=False))
    except OSError:
        return False


def local_folder(path: str | os.PathLike, storage_options: dict[str, Any] | None = None) -> str:
    """``path`` itself for a recording folder; for a shipped URL (or a folder of shipped recorders), the cache
    folder holding every batch and clip committed there so far, fetched now where missing."""
    if not is_shipped(path):
        return store_url(path) if os.fspath(path).startswith("file://") else os.fspath(path)
    cache = ShippedCache(os.fspath(path), storage_options)
    cache.refresh()
    folder = cache.materialize()
    logger.info("envrec: %s read from its local cache %s", cache.store.display, folder)
    return folder
