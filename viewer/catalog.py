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

import itertools
import os
import threading
import time
from typing import Any

import numpy as np

from envrec.errors import TraceError
from envrec.export.sources import RecordingSource, find_recordings
from envrec.formats.clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from envrec.formats.trace_format import BatchEntry
from envrec.read.batch_files import BatchFiles
from envrec.read.reader import Damaged
from envrec.read.stitch import check_follows, settled, stitch

from .listing import CLIP_SORTS, EPISODE_SORTS, Listing, page
from .live import STALE_AFTER_S, State
from .pieces import NotFound, Where, build, clip_json, settle, summary_of
from .series import MAX_SERIES, Columns, downsample
from .verdict_marks import VerdictMarks

__all__ = ["Catalog", "NotFound"]

DEFAULT_OBS_DIMS = 4  # observation dimensions plotted when the user has not chosen
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
            pieces = self._pieces(src, kept)
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

    def _pieces(self, src: RecordingSource, kept: list[BatchEntry]) -> list[Where]:
        """The recording's episodes (pieces of one, when a damaged part split it), stitched from the kept batches."""
        return build(src, kept, lambda entry: self._summaries[(src.directory, entry["fn"])])

    def _settle(self, piece: Where, files: BatchFiles) -> None:
        settle(piece, files)

    # -- the index at scale (envrec.viewer.listing) ------------------------------------
    def summary(self) -> dict[str, Any]:
        """``/api/index``: each recording's summary (counts, totals, live state), from the manifests; clips counted."""
        with self._lock:
            self.listing.refresh()
            now = time.time()
            recordings = [self.listing.summary(h, now) for h in self.listing.heads()]
            return {"root": self.root, "recordings": recordings, "episodes": sum(r["episodes"] for r in recordings),
                    "clips": len(self.listing.clip_rows()), "stale_after_s": self.listing.stale_after_s,
                    "live": any(r["state"] == State.RECORDING for r in recordings),
                    "damaged": [{"file": d.file, "error": d.reason} for d in self.listing.damaged()]}

    def episodes(self, recording: str | None = None, offset: int = 0, limit: int = 100, sort: str | None = None) -> dict[str, Any]:
        """``/api/episodes``: a page of a recording's episodes (of every recording when ``recording`` is None).

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
        with self._lock:
            if recording is None:
                self.listing.refresh()
                heads = self.listing.heads()
            else:
                heads = [self.listing.recording(recording)]
            rows = [row for h in heads for row in self.listing.episode_rows(h, self.listing.state(h)["state"])]
            found = page(rows, offset, limit, sort or None, EPISODE_SORTS, "recording" if recording is None else "episode_id")
            return {"recording": recording, **{k: v for k, v in found.items() if k != "rows"}, "episodes": found["rows"]}

    def clips(self, offset: int = 0, limit: int = 100, sort: str | None = None) -> dict[str, Any]:
        """``/api/clips``: a page of the clips under the folder (``sort``: a column of ``listing.CLIP_SORTS``)."""
        with self._lock:
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
        for folder, meta in self._clips:
            if folder not in homes or meta.get("episode_id") != episode_id or not meta.get("path"):
                continue
            if meta["name"].endswith(f"-episode-{episode_id}") or meta.get("frames_written") == length + 1:
                return folder, meta
        return None

    def _clip_json(self, folder: str, meta: ClipMeta) -> dict[str, Any]:
        return clip_json(self.root, folder, meta)

    # -- one episode -----------------------------------------------------------
    def episode(self, recording: str, episode_id: int, width: int = 800, obs_dims: list[int] | None = None,
                first_step: int | None = None) -> dict[str, Any]:
        """Plot data of one episode: reward, return, actions and chosen observation dimensions, downsampled.
        ``first_step`` picks one of the pieces of an episode split by a damaged part (default: the first)."""
        with self._lock:
            self.listing.refresh(REFRESH_EVERY_S)  # a clip may have come since the last page (piece re-stats its manifest)
            where = self.listing.piece(recording, episode_id, first_step)
            if where is None:
                raise NotFound(f"no episode {episode_id} in recording {recording!r}"
                               + (f" from step {first_step}" if first_step is not None else ""))
            clip = self.listing.clip_for(where.source, episode_id, where.summary["first_step"] + where.summary["length"])
            marks = self.verdicts.episode(recording, episode_id, full=True, clip=clip is not None)
        files = BatchFiles(where.source.directory)
        try:
            parts = []
            for entry, position in where.parts:
                raw = files.load(entry, where.source.manifest)[position]
                parts.append(files.episode(where.source.manifest, entry["first"] + position, raw))
            for before, after in itertools.pairwise(parts):
                check_follows(before, after)
            ep = settled(stitch(parts), where.source.manifest, where.parts[-1][0], where.after)
            return {**self._episode_json(recording, ep, width, obs_dims, clip), **marks}
        finally:
            files.close()

    def _episode_json(self, recording: str, ep, width: int, obs_dims: list[int] | None, clip) -> dict[str, Any]:
        width = max(50, min(int(width), 4000))
        n, k = ep.length, ep.first_step
        rewards = np.asarray(ep.rewards[:n], np.float64)
        # x is the episode's observation index (k for the first one read): step t's reward, action and flags
        # sit at x = t + 1, with the observation (and frame) it led to
        series: dict[str, Any] = {"reward": _shifted(downsample(rewards, width), k + 1)}
        series["return"] = _shifted(downsample(np.nancumsum(np.where(np.isfinite(rewards), rewards, np.nan)), width), k + 1)
        actions = Columns(ep.actions, n)
        series["actions"] = [
            {"label": actions.label(i), **_shifted(downsample(actions.column(i), width), k + 1)}
            for i in range(min(actions.count, MAX_SERIES))
        ]
        observations = Columns(ep.observations, n + 1)
        dims = list(range(min(observations.count, DEFAULT_OBS_DIMS))) if obs_dims is None else obs_dims
        bad = [d for d in dims if not 0 <= d < observations.count]
        if bad or len(dims) > MAX_SERIES:
            raise NotFound(f"observation dimensions {bad or dims}: choose up to {MAX_SERIES} of 0..{observations.count - 1}")
        series["observations"] = [{"label": observations.label(d), "dim": d, **_shifted(downsample(observations.column(d), width), k)}
                                  for d in dims]
        return {
            "recording": recording, "episode_id": ep.episode_id, "length": n, "first_step": k, "parts": len(ep.parts),
            "return": ep.total_reward,
            "ended_by": ep.ended_by, "complete": ep.complete, "seed": ep.seed,
            "observation_dims": observations.count, "series": series,
            "clip": self._clip_json(*clip) if clip is not None else None,
        }


def _shifted(s: dict[str, Any], by: int) -> dict[str, Any]:
    s["x"] = [x + by for x in s["x"]]
    return s
