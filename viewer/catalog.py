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
"""

from __future__ import annotations

import collections
import itertools
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from envrec.errors import TraceError
from envrec.export.sources import RecordingSource, find_recordings
from envrec.formats.clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from envrec.formats.part_checks import part_of
from envrec.formats.trace_format import BatchEntry
from envrec.read.batch_files import BatchFiles
from envrec.read.reader import Damaged
from envrec.read.stitch import check_follows, joins, recording_ended, settled, stitch

from .series import MAX_SERIES, Columns, downsample
from .step_view import action_space_json, image_layout
from .verdict_marks import VerdictMarks

__all__ = ["Catalog", "NotFound"]

DEFAULT_OBS_DIMS = 4  # observation dimensions plotted when the user has not chosen
OPEN_EPISODES = 2  # stitched episodes kept for per-step requests: the one shown and the one compared with
OPEN_BYTES = 512 << 20  # ... and their decompressed arrays at most (beyond, only the last opened is kept)


class NotFound(LookupError):
    """No such recording, episode or dimension (the server answers 404)."""


@dataclass
class _Where:
    source: RecordingSource
    parts: list[tuple[BatchEntry, int]]  # each part's batch and place in it
    summary: dict[str, Any]
    after: BatchEntry | None = None  # the batch after its last part's (how it ended: stitch.settled)


class Catalog:
    """The recordings under ``root`` for the viewer's pages; thread-safe, re-scanned on each index request."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.verdicts = VerdictMarks(root, self.root)  # the render command names the folder as given
        self._lock = threading.Lock()
        self._summaries: dict[tuple[str, str], list[dict]] = {}  # (folder, batch json) -> its episodes' summaries
        self._where: dict[tuple[str, int], list[_Where]] = {}  # (recording, episode id) -> its pieces, oldest first
        self._clips: list[tuple[str, ClipMeta]] = []
        self._opened: collections.OrderedDict[tuple, Any] = collections.OrderedDict()  # the episodes read last

    # -- index -------------------------------------------------------------
    def index(self) -> dict[str, Any]:
        """Recordings, episodes and clips, as the index page lists them."""
        with self._lock:
            return self._scan()

    def _scan(self) -> dict[str, Any]:
        """The index, the lock held by the caller."""
        damaged: list[Damaged] = []
        self._where = {}
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
                        self._summaries[key] = [_summary(raw) for raw in files.load(entry, src.manifest)]
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
            self._where.setdefault((src.name, piece.summary["episode_id"]), []).append(piece)
            s = piece.summary
            clip = self._clip_for(src, s["episode_id"], s["first_step"] + s["length"])
            out.append({"recording": src.name, **s, "clip": clip[1]["name"] if clip else None,
                        **self.verdicts.episode(src.name, s["episode_id"])})
        return out

    def _pieces(self, src: RecordingSource, kept: list[BatchEntry]) -> list[_Where]:
        """The recording's episodes (pieces of one, when a damaged part split it), stitched from the kept batches."""
        pieces: list[_Where] = []
        for k, (entry, joined) in enumerate(zip(kept, joins(kept), strict=True)):
            for i, s in enumerate(self._summaries[(src.directory, entry["fn"])]):
                if i == 0 and joined and pieces and pieces[-1].summary["episode_id"] == s["episode_id"]:
                    _extend(pieces[-1], entry, s)
                else:
                    pieces.append(_Where(src, [(entry, i)], dict(s, parts=1)))
                pieces[-1].after = kept[k + 1] if k + 1 < len(kept) else None
        return pieces

    def _settle(self, piece: _Where, files: BatchFiles) -> None:
        """How an episode whose last part continues ended, when something came after it (``stitch.settled``)."""
        entry, position = piece.parts[-1]
        if recording_ended(piece.source.manifest, entry, piece.after) is None:
            return
        try:
            last = files.episode(piece.source.manifest, 0, files.load(entry, piece.source.manifest)[position])
        except TraceError:
            return  # listed damaged when its plots are asked for
        last = settled(last, piece.source.manifest, entry, piece.after)
        piece.summary.update(ended_by=last.ended_by, complete=last.complete)

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
        path = meta.get("path")
        return {
            "name": meta["name"], "episode_id": meta.get("episode_id"), "fps": meta.get("fps"),
            "frames": meta.get("frames_written"), "broken": bool(meta.get("broken")), "reason": meta.get("reason"),
            "kind": "ansi" if meta.get("content_type") == "application/x-asciicast" else "video",
            "url": _file_url(os.path.relpath(os.path.join(folder, path), self.root)) if path else None,
            "folder": os.path.relpath(folder, self.root),
        }

    # -- one episode -----------------------------------------------------------
    def episode(self, recording: str, episode_id: int, width: int = 800, obs_dims: list[int] | None = None,
                first_step: int | None = None) -> dict[str, Any]:
        """Plot data of one episode: reward, return, actions and chosen observation dimensions, downsampled.
        ``first_step`` picks one of the pieces of an episode split by a damaged part (default: the first).
        An image observation's pixels are not plotted unless asked for (``obs_dims``): the page shows it as an image."""
        ep, manifest, clip, marks = self._open(recording, episode_id, first_step)
        extras = {"image": image_layout(manifest.get("observation_space")),
                  "action_space": action_space_json(manifest.get("action_space"), manifest.get("env"))}
        if obs_dims is None and extras["image"] is not None:
            obs_dims = []
        return {**self._episode_json(recording, ep, width, obs_dims, clip), **marks, **extras}

    def open(self, recording: str, episode_id: int, first_step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """One episode, stitched (an ``Episode``), and its recording's manifest; NotFound when there is none.
        The last ``OPEN_EPISODES`` opened (at most ``OPEN_BYTES`` of arrays, but always the last) are kept, so the
        page's per-step requests read an episode once."""
        ep, manifest, _, _ = self._open(recording, episode_id, first_step)
        return ep, manifest

    def _open(self, recording: str, episode_id: int, first_step: int | None):
        with self._lock:
            where = self._piece(recording, episode_id, first_step)
            if where is None:  # committed since the last index, perhaps
                self._scan()
                where = self._piece(recording, episode_id, first_step)
            if where is None:
                raise NotFound(f"no episode {episode_id} in recording {recording!r}"
                               + (f" from step {first_step}" if first_step is not None else ""))
            clip = self._clip_for(where.source, episode_id, where.summary["first_step"] + where.summary["length"])
            marks = self.verdicts.episode(recording, episode_id, full=True, clip=clip is not None)
            key = (recording, episode_id, tuple((e["fn"], i) for e, i in where.parts), where.after and where.after["fn"])
            ep = self._opened.get(key)
            if ep is not None:
                self._opened.move_to_end(key)
        if ep is None:
            ep = self._read(where)
            with self._lock:
                self._opened[key] = ep
                while len(self._opened) > OPEN_EPISODES or (len(self._opened) > 1 and _held_bytes(self._opened) > OPEN_BYTES):
                    self._opened.popitem(last=False)
        return ep, where.source.manifest, clip, marks

    def _read(self, where):  # a piece of the index (its parts, the batch after them): stitched and settled
        files = BatchFiles(where.source.directory)
        try:
            parts = []
            for entry, position in where.parts:
                raw = files.load(entry, where.source.manifest)[position]
                parts.append(files.episode(where.source.manifest, entry["first"] + position, raw))
            for before, after in itertools.pairwise(parts):
                check_follows(before, after)
            return settled(stitch(parts), where.source.manifest, where.parts[-1][0], where.after)
        finally:
            files.close()

    def _piece(self, recording: str, episode_id: int, first_step: int | None) -> _Where | None:
        pieces = self._where.get((recording, episode_id), [])
        return next((p for p in pieces if first_step is None or p.summary["first_step"] == first_step), None)

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


def _held_bytes(opened: collections.OrderedDict[tuple, Any]) -> int:
    """Bytes of the arrays the opened episodes hold in memory (memory-mapped ones cost nothing: the page cache's)."""
    total = 0
    for ep in opened.values():
        for field in (ep.observations, ep.actions):
            for a in field.values() if isinstance(field, dict) else field if isinstance(field, tuple) else (field,):
                if isinstance(a, np.ndarray) and not isinstance(a.base, mmap.mmap | np.memmap):
                    total += a.nbytes
    return total


def _shifted(s: dict[str, Any], by: int) -> dict[str, Any]:
    s["x"] = [x + by for x in s["x"]]
    return s


def _summary(raw: dict) -> dict[str, Any]:
    ret = raw.get("return")
    _, first_step, _ = part_of(raw)
    return {
        "episode_id": raw.get("episode_id"), "length": raw.get("length", 0),
        "return": ret if isinstance(ret, int | float) and np.isfinite(ret) else None,
        "ended_by": raw.get("ended_by", "unknown"), "complete": raw.get("complete", True),
        "first_step": first_step,
    }


def _extend(piece: _Where, entry: BatchEntry, s: dict[str, Any]) -> None:
    """Add the next part (``s``, the first record of ``entry``) to a piece of an episode."""
    piece.parts.append((entry, 0))
    t = piece.summary
    t["length"] += s["length"]
    total = t["return"] + s["return"] if t["return"] is not None and s["return"] is not None else None
    t["return"] = total if total is not None and np.isfinite(total) else None
    t.update(ended_by=s["ended_by"], complete=s["complete"], parts=t["parts"] + 1)


def _file_url(rel: str) -> str:
    from urllib.parse import quote

    return "/files/" + "/".join(quote(part, safe="") for part in rel.split(os.sep))
