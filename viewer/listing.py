"""The index at scale: a summary per recording from its manifest alone, its episodes a sorted page at a time.

``refresh`` walks the folder and stats every manifest and clip metadata
file; only those whose (size, mtime) changed since are read again. A head
manifest read again is read through ``TraceReader`` (its segments, its
batches' files checked); segments are read through their head. A recording's
summary (episodes and steps counted from its batch entries, how many batches
and bytes, what a disk budget evicted, whether it is live: ``envrec.viewer.live``)
needs no batch file, but for one: while its newest batch ends in a part that
continues, that batch (cached) says how far the running episode has got.

A recording's episodes are stitched (``pieces.build``) the first time a page
of them, or one of them, is asked for, from the summaries of its batches;
each batch's are read once and kept (committed batches never change: the key
holds the entry's size and CRC-32, so a batch written again under the same
name is read again). Pages are sorted by any column, missing values last.
A page in recording order near the start (``first_pieces``) needs only the
first batches: the catalog serves it from them and stitches the rest in the
background.

Threads: ``refresh`` reads aside and swaps the new state in (one refresh at
a time), a recording's pieces are stitched by one thread under its own lock
(``_Head.stitching``): none of this holds the catalog's lock, so requests for
other things are answered meanwhile. A batch a disk budget evicted after its
manifest was read is left out, not listed damaged (``pieces.evicted``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from envrec.errors import ConfigError, TraceError
from envrec.export.sources import RecordingSource
from envrec.formats.clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from envrec.formats.trace_format import MANIFEST_SUFFIX, BatchEntry, is_segment, read_manifest, recording_batches
from envrec.read.batch_files import BatchFiles
from envrec.read.reader import Damaged, TraceReader
from envrec.read.stitch import joins

from .live import STALE_AFTER_S, State, newest_change, recording_state
from .pieces import NotFound, Where, build, clip_json, evicted, settle, summary_of
from .verdict_marks import VerdictMarks

__all__ = ["CLIP_SORTS", "EPISODE_SORTS", "MAX_PAGE", "Listing", "page"]

MAX_PAGE = 1000  # rows a page may ask for: a browser draws a thousand rows at once without a pause
EPISODE_SORTS = ("recording", "episode_id", "length", "parts", "return", "ended_by", "complete", "clip", "verdict", "first_step")
CLIP_SORTS = ("name", "episode_id", "frames", "fps", "broken", "folder")

_Key = tuple[int, int]  # a file's (size, mtime_ns)


@dataclass
class _Head:
    """A head manifest as last read: its recording (None when unreadable), its batches' summaries once stitched."""

    key: _Key
    mtime: float
    source: RecordingSource | None
    damaged: list[Damaged]
    pieces: list[Where] | None = None
    piece_damaged: list[Damaged] = field(default_factory=list)
    stitching: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one thread stitches its pieces


def _stat_key(path: str) -> tuple[_Key, float] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns), st.st_mtime


def _evicted_meanwhile(folder: str, head_path: str, damaged: Damaged) -> bool:
    """Whether a batch ``TraceReader`` found missing was evicted by the disk budget after it read the manifest:
    the manifest, read again, no longer names it (normal for a live recording with ``max_bytes``, not damage)."""
    if damaged.file.endswith(MANIFEST_SUFFIX) or not os.path.exists(head_path):
        return False
    try:
        named = {e["fn"] for e in recording_batches(folder, read_manifest(head_path))}
    except (OSError, TraceError, KeyError, TypeError):
        return False
    return damaged.file not in named


def parse_sort(sort: str | None, allowed: Iterable[str], default: str) -> tuple[str, bool]:
    """``(column, descending)`` of a ``sort`` parameter (``"length"``, ``"-length"``); ``ConfigError`` otherwise."""
    allowed = tuple(allowed)
    text = default if sort is None or sort == "" else sort
    key, descending = (text[1:], True) if text.startswith("-") else (text, False)
    if key not in allowed:
        raise ConfigError(f"sort must be one of {', '.join(allowed)} (a '-' before it: descending), not {sort!r}")
    return key, descending


def _order(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, int | float) else (1, str(v))  # numbers before text: a crafted folder may mix them


def page(rows: list[dict], offset: int, limit: int, sort: str | None, allowed: Iterable[str], default: str) -> dict[str, Any]:
    """``rows`` sorted by ``sort`` (missing values last either way) and cut to ``limit`` from ``offset``.

    Args:
        rows: the rows, in their natural order (ties keep it).
        offset: the first row (0-based; past the end: an empty page).
        limit: how many, 1 to ``MAX_PAGE``.
        sort: a column of ``allowed``, ``-`` before it for descending; None or empty: ``default``.
        allowed: the columns that sort.
        default: the sort when none is given.

    Raises:
        ConfigError: a bad offset, limit or sort (the server answers 400 with the message).
    """
    if type(offset) is not int or offset < 0:
        raise ConfigError(f"offset must be a whole number >= 0, not {offset!r}")
    if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"limit must be a whole number from 1 to {MAX_PAGE}, not {limit!r}")
    key, descending = parse_sort(sort, allowed, default)
    present = [r for r in rows if r.get(key) is not None]
    present.sort(key=lambda r: _order(r[key]), reverse=descending)
    ordered = present + [r for r in rows if r.get(key) is None]
    return {"total": len(rows), "offset": offset, "limit": limit, "sort": ("-" if descending else "") + key,
            "rows": ordered[offset:offset + limit]}


class Listing:
    """Summaries, pages and pieces of the recordings under ``root``, cached; not thread-safe (the catalog's lock guards it).

    Args:
        root: the folder (resolved).
        verdicts: the catalog's verify marks.
        stale_after_s: the staleness timeout of ``envrec.viewer.live``.
    """

    def __init__(self, root: str, verdicts: VerdictMarks, stale_after_s: float = STALE_AFTER_S) -> None:
        self.root = root
        self.verdicts = verdicts
        self.stale_after_s = stale_after_s
        self._heads: dict[str, _Head] = {}  # head manifest path -> as last read
        self._segments: dict[str, _Key] = {}  # segment paths seen (read through their heads)
        self._clip_files: dict[str, tuple[_Key, ClipMeta | None, str | None]] = {}  # meta path -> (key, meta, error)
        self._clips: list[tuple[str, ClipMeta]] = []
        self._clips_of: dict[tuple[str, Any], list[tuple[str, ClipMeta]]] = {}  # (folder, episode id) -> clips
        self._batches: dict[tuple[str, str, Any, Any], list[dict]] = {}  # (folder, fn, size, crc) -> summaries
        self._verdict_damaged: list[Damaged] = []
        self._refreshed_at = -float("inf")  # time.monotonic() of the last refresh
        self._refreshing = threading.Lock()  # one refresh at a time

    # -- reading the folder ------------------------------------------------------
    def refresh(self, max_age_s: float = 0.0) -> None:
        """Stat the folder's manifests and clip metadata; read again those that changed.

        What is read is built aside and swapped in at once: requests reading the listing meanwhile see the one
        before, whole. One refresh runs at a time: the others wait for it, but for those given ``max_age_s``,
        which take the listing as it is.

        Args:
            max_age_s: do nothing when the last refresh is younger than this (seconds): an episode's requests
                re-stat their recording's manifest (``recording``) and need the rest of the folder only now and then.
        """
        stale_ok = max_age_s > 0 and self._refreshed_at > -float("inf")  # has a listing, and takes an older one
        if stale_ok and time.monotonic() - self._refreshed_at < max_age_s:
            return
        if not self._refreshing.acquire(blocking=not stale_ok):
            return  # being refreshed now: a caller that takes an older listing does not wait for it
        try:
            self._refresh()
        finally:
            self._refreshing.release()

    def _refresh(self) -> None:
        """``refresh``'s reading, its lock held."""
        started = time.monotonic()
        manifests, metas = [], []
        for folder, dirs, names in os.walk(self.root):
            dirs.sort()
            for n in sorted(names):
                if n.startswith("."):
                    continue
                if n.endswith(MANIFEST_SUFFIX):
                    manifests.append(os.path.join(folder, n))
                elif n.endswith(META_SUFFIX):
                    metas.append((folder, n))
        heads = {}
        for path in manifests:
            head = self._read_head(path)
            if head is not None:
                heads[path] = head
        self._heads = heads
        self._read_clips(metas)
        verdict_damaged: list[Damaged] = []
        self.verdicts.scan([h.source for h in self.heads() if h.source is not None], verdict_damaged)
        self._verdict_damaged = verdict_damaged
        self._refreshed_at = started

    def _read_head(self, path: str, known_head: bool = False) -> _Head | None:
        """The head manifest at ``path`` as it is now (the one read before when it did not change); None when it is
        gone or is a segment (read through its head)."""
        stat = _stat_key(path)
        if stat is None:
            return None
        key, mtime = stat
        cached = self._heads.get(path)
        if cached is not None:
            if cached.key == key:
                return cached
        elif not known_head and self._segments.get(path) == key:
            return None
        folder, name = os.path.split(path)
        try:
            if not known_head and is_segment(read_manifest(path)):
                self._segments[path] = key
                return None
            reader = TraceReader(folder, prefix=name[: -len(MANIFEST_SUFFIX)], verify=False, on_damaged="skip")
        except FileNotFoundError:
            return None  # replaced or evicted while read: the next refresh reads it
        except (OSError, TraceError) as exc:
            return _Head(key, mtime, None, [Damaged(os.path.relpath(path, self.root), str(exc))])
        with reader:
            damaged = [Damaged(os.path.relpath(os.path.join(folder, d.file), self.root), d.reason)
                       for d in reader.damaged if not _evicted_meanwhile(folder, path, d)]
            source = None
            for rec in reader.recordings:
                source = RecordingSource(os.path.relpath(rec.path, self.root)[: -len(MANIFEST_SUFFIX)], folder, rec.manifest, rec.batches)
        return _Head(key, mtime, source, damaged)

    def _read_clips(self, metas: list[tuple[str, str]]) -> None:
        files: dict[str, tuple[_Key, ClipMeta | None, str | None]] = {}
        for folder, n in metas:
            path = os.path.join(folder, n)
            stat = _stat_key(path)
            if stat is None:
                continue  # evicted by a disk budget since the folder was listed
            cached = self._clip_files.get(path)
            if cached is None or cached[0] != stat[0]:
                try:
                    cached = (stat[0], read_clip_meta(path), None)
                except FileNotFoundError:
                    continue
                except (OSError, ValueError) as exc:
                    cached = (stat[0], None, str(exc))
            files[path] = cached
        clips: list[tuple[str, ClipMeta]] = []
        clips_of: dict[tuple[str, Any], list[tuple[str, ClipMeta]]] = {}
        for path, (_, meta, _) in files.items():
            if meta is not None:
                folder = os.path.dirname(path)
                clips.append((folder, meta))
                clips_of.setdefault((folder, meta.get("episode_id")), []).append((folder, meta))
        self._clip_files, self._clips, self._clips_of = files, clips, clips_of

    def _head(self, recording: str) -> _Head:
        for head in self._heads.values():
            if head.source is not None and head.source.name == recording:
                return head
        raise NotFound(f"no recording {recording!r}")

    def recording(self, name: str) -> _Head:
        """A recording by name, its head manifest read again if it changed (the folder walked if it is not known)."""
        path = os.path.join(self.root, name + MANIFEST_SUFFIX)
        if path in self._heads:
            head = self._read_head(path, known_head=True)
            heads = {p: h for p, h in self._heads.items() if p != path}  # a new dict: others may be iterating this one
            if head is not None:
                heads[path] = head
            self._heads = heads
        else:
            self.refresh()
        return self._head(name)

    # -- episodes --------------------------------------------------------------------
    def _summaries(self, src: RecordingSource, files: BatchFiles, entry: BatchEntry, damaged: list[Damaged]) -> list[dict] | None:
        key = (src.directory, entry["fn"], entry.get("json_bytes"), entry.get("json_crc32"))
        if key not in self._batches:
            try:
                self._batches[key] = [summary_of(raw) for raw in files.load(entry, src.manifest)]
            except TraceError as exc:
                if not evicted(src, entry):  # evicted by the disk budget since its manifest was read: not damage
                    damaged.append(Damaged(os.path.relpath(os.path.join(src.directory, entry["fn"]), self.root), str(exc)))
                return None  # not cached: a batch being repaired is read again
        return self._batches[key]

    def pieces(self, head: _Head) -> list[Where]:
        """The recording's episodes, stitched once per version of its manifest (by one thread: the others asking
        for them wait for it; requests for other things do not)."""
        if head.pieces is not None:
            return head.pieces
        src = head.source
        if src is None:
            return []
        with head.stitching:
            if head.pieces is not None:
                return head.pieces  # stitched by the thread this one waited for
            files = BatchFiles(src.directory, verify=False)
            damaged: list[Damaged] = []
            try:
                kept = [e for e in src.batches if self._summaries(src, files, e, damaged) is not None]
                pieces = build(src, kept, lambda e: self._summaries(src, files, e, damaged) or [],
                               lambda e, why: damaged.append(Damaged(os.path.relpath(os.path.join(src.directory, e["fn"]), self.root), why)))
                for piece in pieces:
                    if piece.summary["ended_by"] is None:  # its last part continues: has something come after it?
                        settle(piece, files)
            finally:
                files.close()
            head.piece_damaged, head.pieces = damaged, pieces
        return pieces

    def piece(self, recording: str, episode_id: int, first_step: int | None) -> Where | None:
        """The piece of an episode (``first_step``: which, when a damaged part split it; None: the first); None when
        there is none, in that recording or because there is no such recording."""
        try:
            pieces = self.pieces(self.recording(recording))
        except NotFound:
            return None
        return next((p for p in pieces if p.summary["episode_id"] == episode_id
                     and (first_step is None or p.summary["first_step"] == first_step)), None)

    def clip_for(self, src: RecordingSource, episode_id: Any, length: int) -> tuple[str, ClipMeta] | None:
        """The clip of the episode from its reset; ``length``: its steps from the reset (first_step + steps read)."""
        for folder in (src.directory, os.path.join(src.directory, "videos")):
            for found, meta in self._clips_of.get((folder, episode_id), []):
                if meta.get("path") and (meta["name"].endswith(f"-episode-{episode_id}") or meta.get("frames_written") == length + 1):
                    return found, meta
        return None

    def first_pieces(self, head: _Head, count: int) -> list[Where] | None:
        """The recording's first ``count`` episodes in recording order, stitched from as few of its first batches as
        hold them (each batch's summaries cached as ``pieces`` caches them): a first page of a recording of 100,000
        batches without reading them all. None when the recording holds no more than ``count`` (then its pages are
        cut from ``pieces``)."""
        src = head.source
        if src is None or head.pieces is not None:
            return None
        files = BatchFiles(src.directory, verify=False)
        damaged: list[Damaged] = []  # listed by the full stitch (``pieces``), which reads these batches again
        kept: list[BatchEntry] = []
        started = 0  # episodes begun in the kept batches
        try:
            for entry in src.batches:
                if self._summaries(src, files, entry, damaged) is None:
                    continue
                kept.append(entry)
                started += entry["len"] - (len(kept) > 1 and joins(kept[-2:])[1])
                if started > count:  # the next episode has begun: the first count are whole
                    pieces = build(src, kept, lambda e: self._summaries(src, files, e, damaged) or [])[:count]
                    for piece in pieces:
                        if piece.summary["ended_by"] is None:
                            settle(piece, files)
                    return pieces
        finally:
            files.close()
        return None

    def episode_rows(self, head: _Head, state: str | None = None, pieces: list[Where] | None = None) -> list[dict]:
        """The index's rows of a recording's episodes (``pieces``: only these, the first of them), with ``live`` set
        on the one still being recorded."""
        assert head.source is not None
        src, rows = head.source, []
        some = pieces is not None
        pieces = self.pieces(head) if pieces is None else pieces
        for k, piece in enumerate(pieces):
            s = piece.summary
            clip = self.clip_for(src, s["episode_id"], s["first_step"] + s["length"])
            live = state == State.RECORDING and k == len(pieces) - 1 and s["ended_by"] is None and not some
            rows.append({"recording": src.name, **s, "clip": clip[1]["name"] if clip else None, "live": live,
                         **self.verdicts.episode(src.name, s["episode_id"])})
        return rows

    def clip_rows(self) -> list[dict]:
        return [clip_json(self.root, folder, meta) for folder, meta in self._clips]

    def damaged(self) -> list[Damaged]:
        out = [d for h in self._heads.values() for d in (*h.damaged, *h.piece_damaged)] + self._verdict_damaged
        return out + [Damaged(os.path.relpath(p, self.root), err) for p, (_, meta, err) in self._clip_files.items() if err]

    # -- recordings ---------------------------------------------------------------------
    def heads(self) -> list[_Head]:
        """The readable recordings, by name."""
        return sorted((h for h in self._heads.values() if h.source is not None), key=lambda h: h.source.name)  # type: ignore[union-attr]

    def state(self, head: _Head, now: float | None = None) -> dict[str, Any]:
        assert head.source is not None
        src = head.source
        changed = newest_change(src.directory, src.manifest.get("prefix"), head.mtime)
        return recording_state(src.manifest, changed, self.stale_after_s, now)

    def summary(self, head: _Head, now: float | None = None) -> dict[str, Any]:
        """A recording as the index lists it, from its manifest (and its newest batch while an episode runs)."""
        assert head.source is not None
        src, m = head.source, head.source.manifest
        entries = src.batches
        if head.pieces is not None:  # stitched already: count what the episode pages list
            episodes, steps = len(head.pieces), sum(p.summary["length"] for p in head.pieces)
        else:
            episodes = sum(e["len"] for e in entries) - sum(joins(entries))
            steps = sum(e["steps"] for e in entries) if all("steps" in e for e in entries) else None
            if steps is None:  # a trace from elsewhere (gym-recording's names no steps): from its episodes
                steps = sum(p.summary["length"] for p in self.pieces(head))
        evicted = m.get("evicted") or {}
        state = self.state(head, now)
        return {
            "name": src.name, "env_id": m.get("env_id"), "folder": os.path.relpath(src.directory, self.root),
            "episodes": episodes, "steps": steps, "batches": len(entries),
            "bytes": sum(int(e.get("json_bytes", 0)) + int(e.get("bin_bytes", 0)) for e in entries),
            "evicted_episodes": evicted.get("episodes", 0), "complete": bool(m.get("complete")), **state,
            "live_episode": self._running(head) if not m.get("complete") else None,
            **self.verdicts.recording(src.name, episodes),
        }

    def _running(self, head: _Head) -> dict[str, Any] | None:
        """The episode still being recorded, when the newest batch ends in a part that continues, else None."""
        assert head.source is not None
        src, entries = head.source, head.source.batches
        if not entries or not entries[-1].get("continues"):
            return None
        files = BatchFiles(src.directory, verify=False)
        try:
            last = self._summaries(src, files, entries[-1], head.piece_damaged)
        finally:
            files.close()
        if not last:
            return None
        s, joined = last[-1], joins(entries)
        start = len(entries) - 1
        while joined[start]:
            start -= 1
        # a part after the first is always the first record of its batch: the piece starts at a head_part (its
        # earlier parts evicted) only when the batch it starts in holds nothing else
        head_part = entries[start].get("head_part") if entries[start]["len"] == 1 else None
        first_step = head_part["first_step"] if head_part else 0
        steps = s["first_step"] + s["length"]
        return {"episode_id": s["episode_id"], "steps": steps, "first_step": first_step, "length": steps - first_step,
                "parts": len(entries) - start}
