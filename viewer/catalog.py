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

What cannot be read (a folder whose manifest is damaged, a damaged batch,
unreadable clip metadata) is listed in the index's ``damaged`` rows, each
with its file and reason, and left out; the rest is listed as usual.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from envrec.errors import TraceError
from envrec.export.sources import RecordingSource, find_recordings
from envrec.formats.clip_meta import META_SUFFIX, ClipMeta, read_clip_meta
from envrec.formats.trace_format import BatchEntry
from envrec.read.batch_files import BatchFiles
from envrec.read.reader import Damaged

from .series import MAX_SERIES, Columns, downsample

__all__ = ["Catalog", "NotFound"]

DEFAULT_OBS_DIMS = 4  # observation dimensions plotted when the user has not chosen


class NotFound(LookupError):
    """No such recording, episode or dimension (the server answers 404)."""


@dataclass(frozen=True)
class _Where:
    source: RecordingSource
    entry: BatchEntry
    position: int  # the episode's place in its batch


class Catalog:
    """The recordings under ``root`` for the viewer's pages; thread-safe, re-scanned on each index request."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._lock = threading.Lock()
        self._summaries: dict[tuple[str, str], list[dict]] = {}  # (folder, batch json) -> its episodes' summaries
        self._where: dict[tuple[str, int], _Where] = {}
        self._clips: list[tuple[str, ClipMeta]] = []

    # -- index -------------------------------------------------------------
    def index(self) -> dict[str, Any]:
        """Recordings, episodes and clips, as the index page lists them."""
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
        recordings, episodes = [], []
        for src in sources:
            eps = self._episodes_of(src, damaged)
            episodes += eps
            m = src.manifest
            recordings.append({
                "name": src.name, "env_id": m.get("env_id"), "episodes": len(eps), "steps": sum(e["length"] for e in eps),
                "complete": bool(m.get("complete")), "folder": os.path.relpath(src.directory, self.root),
            })
        clips = [self._clip_json(folder, meta) for folder, meta in self._clips]
        return {"root": self.root, "recordings": recordings, "episodes": episodes, "clips": clips,
                "damaged": [{"file": d.file, "error": d.reason} for d in damaged]}

    def _episodes_of(self, src: RecordingSource, damaged: list[Damaged]) -> list[dict]:
        files = BatchFiles(src.directory, verify=False)
        out = []
        try:
            for entry in src.batches:
                key = (src.directory, entry["fn"])
                if key not in self._summaries:
                    try:
                        self._summaries[key] = [_summary(raw) for raw in files.load(entry, src.manifest)]
                    except TraceError as exc:
                        damaged.append(Damaged(os.path.relpath(os.path.join(src.directory, entry["fn"]), self.root), str(exc)))
                        continue  # not cached: a batch being repaired is read again at the next index
                for i, s in enumerate(self._summaries[key]):
                    self._where[(src.name, s["episode_id"])] = _Where(src, entry, i)
                    clip = self._clip_for(src, s["episode_id"], s["length"])
                    out.append({"recording": src.name, **s, "clip": clip[1]["name"] if clip else None})
        finally:
            files.close()
        return out

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
    def episode(self, recording: str, episode_id: int, width: int = 800, obs_dims: list[int] | None = None) -> dict[str, Any]:
        """Plot data of one episode: reward, return, actions and chosen observation dimensions, downsampled."""
        with self._lock:
            where = self._where.get((recording, episode_id))
            if where is None:  # committed since the last index, perhaps
                self._scan()
                where = self._where.get((recording, episode_id))
            if where is None:
                raise NotFound(f"no episode {episode_id} in recording {recording!r}")
            length = self._summaries[(where.source.directory, where.entry["fn"])][where.position]["length"]
            clip = self._clip_for(where.source, episode_id, length)
        files = BatchFiles(where.source.directory)
        try:
            raw = files.load(where.entry, where.source.manifest)[where.position]
            ep = files.episode(where.source.manifest, where.entry["first"] + where.position, raw)
            return self._episode_json(recording, ep, width, obs_dims, clip)
        finally:
            files.close()

    def _episode_json(self, recording: str, ep, width: int, obs_dims: list[int] | None, clip) -> dict[str, Any]:
        width = max(50, min(int(width), 4000))
        n = ep.length
        rewards = np.asarray(ep.rewards[:n], np.float64)
        # step t's reward, action and flags sit at x = t + 1: with the observation (and frame) it led to
        series: dict[str, Any] = {"reward": _shifted(downsample(rewards, width))}
        series["return"] = _shifted(downsample(np.nancumsum(np.where(np.isfinite(rewards), rewards, np.nan)), width))
        actions = Columns(ep.actions, n)
        series["actions"] = [
            {"label": actions.label(i), **_shifted(downsample(actions.column(i), width))} for i in range(min(actions.count, MAX_SERIES))
        ]
        observations = Columns(ep.observations, n + 1)
        dims = list(range(min(observations.count, DEFAULT_OBS_DIMS))) if obs_dims is None else obs_dims
        bad = [d for d in dims if not 0 <= d < observations.count]
        if bad or len(dims) > MAX_SERIES:
            raise NotFound(f"observation dimensions {bad or dims}: choose up to {MAX_SERIES} of 0..{observations.count - 1}")
        series["observations"] = [{"label": observations.label(d), "dim": d, **downsample(observations.column(d), width)} for d in dims]
        return {
            "recording": recording, "episode_id": ep.episode_id, "length": n, "return": ep.total_reward,
            "ended_by": ep.ended_by, "complete": ep.complete, "seed": ep.seed,
            "observation_dims": observations.count, "series": series,
            "clip": self._clip_json(*clip) if clip is not None else None,
        }


def _shifted(s: dict[str, Any]) -> dict[str, Any]:
    s["x"] = [x + 1 for x in s["x"]]
    return s


def _summary(raw: dict) -> dict[str, Any]:
    ret = raw.get("return")
    return {
        "episode_id": raw.get("episode_id"), "length": raw.get("length", 0),
        "return": ret if isinstance(ret, int | float) and np.isfinite(ret) else None,
        "ended_by": raw.get("ended_by", "unknown"), "complete": raw.get("complete", True),
    }


def _file_url(rel: str) -> str:
    from urllib.parse import quote

    return "/files/" + "/".join(quote(part, safe="") for part in rel.split(os.sep))
