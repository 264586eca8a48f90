"""What the viewer shows: the recordings, episodes and clips under a folder, and one episode's plot data.

Recordings are found as the exporters find them (``envrec.export.sources``:
recursively, named relative to the folder). An episode's summary (length,
return, how it ended) comes from its batch's ``.json`` alone; committed
batches never change, so they are read once and cached. A clip belongs to
an episode when its metadata names the episode, it lies in the recording's
folder (or its ``videos/`` subfolder, as ``envrec.ray`` lays them out) and it
starts at the episode's reset: named ``...-episode-N`` or holding one frame
per observation. Frame ``f`` of such a clip shows observation ``f`` (frame 0
the reset), which is why the plots' x axis is the observation index.

A long episode written in parts is listed once, stitched across its parts
(``parts``: how many; ``first_step``: its first step kept). When a disk
budget evicted its oldest parts, its plots start at ``first_step``: the x
axis stays the episode's observation index, so frame ``f`` of its clip
still lands on observation ``f``. An episode split by a damaged part is
listed as two, told apart by ``first_step`` (``/api/episode?...&first_step=K``).

What cannot be read (a folder whose manifest is damaged, a damaged batch,
unreadable clip metadata) is listed in the index's ``damaged`` rows, each
with its file and reason, and left out; the rest is listed as usual.

The pages use the lazy index (``summary``, ``episodes``, ``clips``:
``envrec.viewer.listing``), which reads a recording's batches only when its
episodes are asked for and says which recordings are live
(``envrec.viewer.live``); ``index()`` is the full scan, every episode at once.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any

from envrec.errors import TraceError
from envrec.export.sources import RecordingSource, find_recordings
from envrec.formats.clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from envrec.formats.shipped import shipped_suffix
from envrec.formats.trace_format import BatchEntry
from envrec.read.batch_files import BatchFiles
from envrec.read.reader import Damaged
from envrec.read.stitch import joins

from .episode_read import PartCache, PieceReader
from .listing import CLIP_SORTS, EPISODE_SORTS, Listing, page
from .live import STALE_AFTER_S, State
from .pieces import NotFound, Where, build, clip_json, settle, summary_of
from .step_view import action_space_json, image_leaves
from .verdict_marks import VerdictMarks

__all__ = ["Catalog", "NotFound"]

FIRST_PAGE_ROWS = 1000  # a page in recording order this near the start is read from the first batches only
REFRESH_EVERY_S = 1.0  # an episode's requests walk the folder for new clips at most this often



class Catalog:
    """The recordings under ``root`` for the viewer's pages; thread-safe, re-scanned (what changed) on each request.

    Args:
        root: the folder of recordings and clips (searched recursively).
        stale_after_s: the staleness timeout of ``envrec.viewer.live`` (a recording never finalized reads
            ``interrupted`` once nothing of it changed this long and no worker of it runs here).
    """

    def __init__(self, root: str, stale_after_s: float = STALE_AFTER_S) -> None:
        self.root = os.path.realpath(root)
        self.verdicts = VerdictMarks(root, self.root)  # the render command names the folder as given
        self._lock = threading.Lock()
        self._summaries: dict[tuple[str, str], list[dict]] = {}  # (folder, batch json) -> its episodes' summaries
        self._clips: list[tuple[str, ClipMeta]] = []
        self.listing = Listing(self.root, self.verdicts, stale_after_s)
        self.parts = PartCache()  # the parts read last, for the page's per-step requests

    # -- index -------------------------------------------------------------
    def index(self) -> dict[str, Any]:
        """Recordings, episodes and clips, every one at once: the full scan (the pages use ``summary`` and ``episodes``)."""
        with self._lock:
            return self._scan()

    def _scan(self) -> dict[str, Any]:
        """The index, the lock held by the caller."""
        damaged: list[Damaged] = []
        try:
            sources = find_recordings(self.root, verify=False, damaged=damaged)
        except TraceError:
            sources = []  # a folder of clips only, or nothing recorded yet
        self._clips = self._find_clips(damaged)
        self.verdicts.scan(sources, damaged)
        recordings, episodes = [], []
        for src in sources:
            eps = self._episodes_of(src, damaged)
            episodes += eps
            m = src.manifest
            recordings.append({
                "name": src.name, "env_id": m.get("env_id"), "episodes": len(eps), "steps": sum(e["length"] for e in eps),
                "complete": bool(m.get("complete")), "folder": os.path.relpath(src.directory, self.root),
                **self.verdicts.recording(src.name, len(eps)),
            })
        clips = [self._clip_json(folder, meta) for folder, meta in self._clips]
        return {"root": self.root, "recordings": recordings, "episodes": episodes, "clips": clips,
                "damaged": [{"file": d.file, "error": d.reason} for d in damaged]}

    def _episodes_of(self, src: RecordingSource, damaged: list[Damaged]) -> list[dict]:
        files = BatchFiles(src.directory, verify=False)
        kept: list[BatchEntry] = []
        try:
            for entry in src.batches:
                key = (src.directory, entry["fn"])
                if key not in self._summaries:
                    try:
                        self._summaries[key] = [summary_of(raw) for raw in files.load(entry, src.manifest)]
                    except TraceError as exc:
                        damaged.append(Damaged(os.path.relpath(os.path.join(src.directory, entry["fn"]), self.root), str(exc)))
                        continue  # not cached: a batch being repaired is read again at the next index
                kept.append(entry)
            pieces = self._pieces(src, kept, damaged)
            for piece in pieces:
                if piece.summary["ended_by"] is None:  # its last part continues: has something come after it?
                    self._settle(piece, files)
        finally:
            files.close()
        out = []
        for piece in pieces:
            s = piece.summary
            clip = self._clip_for(src, s["episode_id"], s["first_step"] + s["length"])
            out.append({"recording": src.name, **s, "clip": clip[1]["name"] if clip else None,
                        **self.verdicts.episode(src.name, s["episode_id"])})
        return out

    def _pieces(self, src: RecordingSource, kept: list[BatchEntry], damaged: list[Damaged]) -> list[Where]:
        """The recording's episodes (pieces of one, when a damaged part split it), stitched from the kept batches;
        a part that does not follow the one before it is listed in ``damaged``."""
        return build(src, kept, lambda entry: self._summaries[(src.directory, entry["fn"])],
                     lambda e, why: damaged.append(Damaged(os.path.relpath(os.path.join(src.directory, e["fn"]), self.root), why)))

    def _settle(self, piece: Where, files: BatchFiles) -> None:
        settle(piece, files)

    # -- the index at scale (envrec.viewer.listing) ------------------------------------
    def summary(self) -> dict[str, Any]:
        """``/api/index``: each recording's summary (counts, totals, live state), from the manifests; clips counted."""
        self.listing.refresh()  # reads aside, swaps in: holds no lock other requests wait on
        with self._lock:
            now = time.time()
            recordings = [self.listing.summary(h, now) for h in self.listing.heads()]
            return {"root": self.root, "recordings": recordings, "episodes": sum(r["episodes"] for r in recordings),
                    "clips": len(self.listing.clip_rows()), "stale_after_s": self.listing.stale_after_s,
                    "live": any(r["state"] == State.RECORDING for r in recordings),
                    "damaged": [{"file": d.file, "error": d.reason} for d in self.listing.damaged()]}

    def episodes(self, recording: str | None = None, offset: int = 0, limit: int = 100, sort: str | None = None) -> dict[str, Any]:
        """``/api/episodes``: a page of a recording's episodes (of every recording when ``recording`` is None).

        A recording's episodes are stitched from its batches the first time they are asked for, without the lock
        the other requests wait on: the index, other recordings' pages and the files are served meanwhile.

        Args:
            recording: the recording's name, as ``summary`` lists it.
            offset: the first row of the page.
            limit: rows in the page (1 to ``listing.MAX_PAGE``).
            sort: a column of ``listing.EPISODE_SORTS``, ``-`` before it for descending (default: ``episode_id``, in
                recording order).

        Raises:
            NotFound: no such recording.
            ConfigError: a bad offset, limit or sort.
        """
        if recording is None:
            self.listing.refresh()
            heads = self.listing.heads()
        else:
            heads = [self.listing.recording(recording)]
            first = self._first_page(heads[0], offset, limit, sort)
            if first is not None:
                return {"recording": recording, **first}
        for h in heads:
            self.listing.pieces(h)  # the long read, when they are not stitched yet: no catalog lock held
        with self._lock:
            rows = [row for h in heads for row in self.listing.episode_rows(h, self.listing.state(h)["state"])]
        found = page(rows, offset, limit, sort or None, EPISODE_SORTS, "recording" if recording is None else "episode_id")
        return {"recording": recording, **{k: v for k, v in found.items() if k != "rows"}, "episodes": found["rows"]}

    def _first_page(self, head: Any, offset: int, limit: int, sort: str | None) -> dict[str, Any] | None:
        """A page in recording order near the start of a recording not stitched yet, from its first batches only
        (``Listing.first_pieces``), the whole recording then stitched in the background for the other pages; None
        when the page needs the whole recording (another sort, a page further on, a recording stitched already)."""
        page(rows=[], offset=offset, limit=limit, sort=sort or None, allowed=EPISODE_SORTS, default="episode_id")  # checks
        if sort not in (None, "", "episode_id") or head.pieces is not None or offset + limit > FIRST_PAGE_ROWS:
            return None
        pieces = self.listing.first_pieces(head, offset + limit)
        if pieces is None:
            return None
        with self._lock:
            rows = self.listing.episode_rows(head, None, pieces)[offset:offset + limit]
        if not head.stitching.locked():
            threading.Thread(target=self._stitch_quietly, args=(head,), name="envrec-viewer-stitch", daemon=True).start()
        entries = head.source.batches  # counted from the manifest, as the index counts them
        total = sum(e["len"] for e in entries) - sum(joins(entries))
        return {"total": total, "offset": offset, "limit": limit, "sort": "episode_id", "episodes": rows}

    def _stitch_quietly(self, head: Any) -> None:
        try:
            self.listing.pieces(head)
        except (OSError, TraceError):  # the folder went away meanwhile: the next request that needs it says so
            logging.getLogger(__name__).debug("envrec view: stitching %s in the background failed", head.source.name, exc_info=True)

    def clips(self, offset: int = 0, limit: int = 100, sort: str | None = None) -> dict[str, Any]:
        """``/api/clips``: a page of the clips under the folder (``sort``: a column of ``listing.CLIP_SORTS``)."""
        self.listing.refresh()
        found = page(self.listing.clip_rows(), offset, limit, sort or None, CLIP_SORTS, "folder")
        return {**{k: v for k, v in found.items() if k != "rows"}, "clips": found["rows"]}

    # -- clips ---------------------------------------------------------------
    def _find_clips(self, damaged: list[Damaged]) -> list[tuple[str, ClipMeta]]:
        found = []
        for folder, dirs, names in os.walk(self.root):
            dirs.sort()
            for n in sorted(names):
                if n.endswith(META_SUFFIX) and ".manifest" not in n and not n.startswith("."):
                    try:
                        found.append((folder, read_clip_meta(os.path.join(folder, n))))
                    except FileNotFoundError:
                        continue  # evicted by a disk budget since the folder was listed
                    except (OSError, ValueError) as exc:
                        damaged.append(Damaged(os.path.relpath(os.path.join(folder, n), self.root), str(exc)))
        return found

    def _clip_for(self, src: RecordingSource, episode_id: int, length: int) -> tuple[str, ClipMeta] | None:
        """The clip of the episode from its reset; ``length``: its steps from the reset (first_step + steps read)."""
        homes = {src.directory, os.path.join(src.directory, "videos")}
        found = [(folder, meta) for folder, meta in self._clips
                 if folder in homes and meta.get("episode_id") == episode_id and meta.get("path")
                 and (re.search(rf"-episode-{episode_id}(-\d+)?$", meta["name"]) or meta.get("frames_written") == length + 1)]
        suffix = shipped_suffix(str(src.manifest.get("prefix") or src.name))
        if suffix is not None and len(found) > 1:  # shipped recorders of many processes: its own process's clip
            found = [c for c in found if suffix in c[1]["name"]] or found
        return found[0] if found else None

    def _clip_json(self, folder: str, meta: ClipMeta) -> dict[str, Any]:
        return clip_json(self.root, folder, meta)

    # -- one episode -----------------------------------------------------------
    def episode(self, recording: str, episode_id: int, width: int = 800, obs_dims: list[int] | None = None,
                first_step: int | None = None) -> dict[str, Any]:
        """Plot data of one episode: reward, return, actions and chosen observation dimensions, downsampled, read a
        part at a time (``envrec.viewer.episode_read``). ``first_step`` picks one of the pieces of an episode split by
        a damaged part (default: the first). The pixels of image observations and image leaves
        (``step_view.image_leaves``: ``"images"``, the first also as ``"image"``) are not plotted unless asked for
        (``obs_dims``): the page shows them as images, and plots the other dimensions."""
        reader, manifest, clip, marks = self._open(recording, episode_id, first_step)
        images = image_leaves(manifest.get("observation_space"))
        extras = {"images": images, "image": images[0] if images else None,
                  "action_space": action_space_json(manifest.get("action_space"), manifest.get("env"))}
        plot = reader.plot(max(50, min(int(width), 4000)), obs_dims, [i["dims"] for i in images])
        s = reader.where.summary
        return {
            "recording": recording, "episode_id": s["episode_id"], "length": reader.length, "first_step": reader.first_step,
            "parts": len(reader.where.parts), "return": s["return"], "ended_by": s["ended_by"], "complete": s["complete"],
            **plot, "clip": self._clip_json(*clip) if clip is not None else None, **marks, **extras,
        }

    def open(self, recording: str, episode_id: int, first_step: int | None = None) -> tuple[PieceReader, dict[str, Any]]:
        """One episode as a ``PieceReader`` (read a part at a time; the last ``OPEN_PARTS`` parts' records are kept
        for the page's per-step requests) and its recording's manifest; NotFound when there is none."""
        reader, manifest, _, _ = self._open(recording, episode_id, first_step)
        return reader, manifest

    def _open(self, recording: str, episode_id: int, first_step: int | None):
        self.listing.refresh(REFRESH_EVERY_S)  # a clip may have come since the last page (piece re-stats its manifest)
        where = self.listing.piece(recording, episode_id, first_step)  # stitched outside the lock, as for a page
        if where is None:
            raise NotFound(f"no episode {episode_id} in recording {recording!r}"
                           + (f" from step {first_step}" if first_step is not None else ""))
        with self._lock:
            clip = self.listing.clip_for(where.source, episode_id, where.summary["first_step"] + where.summary["length"])
            marks = self.verdicts.episode(recording, episode_id, full=True, clip=clip is not None)
        return PieceReader(where, self.parts), where.source.manifest, clip, marks
