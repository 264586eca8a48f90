"""One episode of the index read a part at a time: its plots streamed, one step read from the part that holds it.

A long run may record an episode of 100,000 steps of frames: a few MiB on
disk compressed, gigabytes stitched whole. The viewer never stitches one.

* **Plots** (``PieceReader.plot``): the parts are read one after the other,
  each array a few chunks at a time (``BatchFiles.blocks``), every series
  fed to a ``series.Downsampler``; the next part is read once the last is
  let go. Memory: one part's batch JSON and a block of rows, whatever the
  episode's length. Consecutive parts are checked to follow each other
  (``stitch.check_follows``) as they come.
* **A step** (``step``, ``frame``): the part holding it is found from the
  parts' lengths (``Where.spans``, from the index), and only the chunks
  holding that row are decompressed (``BatchFiles.rows``). The return so far
  adds the parts' own returns before it.

``PartCache`` keeps the raw records of the last ``OPEN_PARTS`` parts read
(batch JSON parsed, files mapped, nothing decompressed), so the cursor's
per-step requests do not parse a batch's JSON each time.

A batch the index listed but the recording's disk budget (``max_bytes``)
evicted since is ``Evicted`` (404: reload the index), not damaged; a damaged
one is ``TraceError`` (422), as before.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from envrec.errors import TraceError
from envrec.formats.part_checks import part_of
from envrec.read.batch_files import BatchFiles, Part
from envrec.read.stitch import check_follows

from .pieces import NotFound, Where, evicted
from .series import MAX_SERIES, Downsampler, Layout
from .step_view import encode_png, frame_strip, info_texts, number

__all__ = ["DEFAULT_OBS_DIMS", "OPEN_PARTS", "Evicted", "PartCache", "PieceReader"]

DEFAULT_OBS_DIMS = 4  # observation dimensions plotted when the user has not chosen
OPEN_PARTS = 8  # parts' raw records kept for per-step requests: a few per episode shown, two episodes side by side
OPEN_CHUNKS = 8  # decompressed chunks kept (each at most a compression chunk, 4 MiB): the cursor's next step is there


class Evicted(NotFound):
    """A batch the index listed was evicted by its recording's disk budget since (404): normal, not damage."""


@dataclass
class _Part:
    """One part's raw record: its batch's files (mapped), the record (``BatchFiles.load``) and its array fields."""

    key: tuple  # the batch (folder, name, size, CRC-32) and the record's place in it
    files: BatchFiles
    raw: dict
    fields: dict[str, Any]


class PartCache:
    """The raw records of the parts read last (at most ``max_parts``); thread-safe.

    Args:
        max_parts: how many parts' records to keep.
    """

    def __init__(self, max_parts: int = OPEN_PARTS) -> None:
        self.max_parts = max_parts
        self._lock = threading.Lock()
        self._parts: collections.OrderedDict[tuple, _Part] = collections.OrderedDict()
        self._chunks: collections.OrderedDict[tuple, np.ndarray] = collections.OrderedDict()

    def get(self, where: Where, k: int) -> _Part:
        """Part ``k`` of a piece; ``Evicted`` or ``TraceError`` (damaged) when its batch cannot be read."""
        entry, position = where.parts[k]
        src = where.source
        key = (src.directory, entry["fn"], entry.get("json_bytes"), entry.get("json_crc32"), position)
        with self._lock:
            part = self._parts.get(key)
            if part is not None:
                self._parts.move_to_end(key)
                return part
        files = BatchFiles(src.directory)
        try:
            raw = files.load(entry, src.manifest)[position]
        except TraceError:
            files.close()
            if evicted(src, entry):
                raise Evicted(f"batch {entry['fn']} of {src.name!r} was evicted by the recording's disk budget "
                              "(max_bytes) since the index listed it: reload the index") from None
            raise
        part = _Part(key, files, raw, files.fields(src.manifest, raw))
        with self._lock:
            self._parts[key] = part
            while len(self._parts) > self.max_parts:
                self._parts.popitem(last=False)
        return part

    def row(self, part: _Part, field: str, k: int, i: int) -> np.ndarray:
        """Row ``i`` of leaf ``k`` (``series.Layout.leaves`` order) of a part's ``field``, flattened; its chunk is
        decompressed once and kept (``OPEN_CHUNKS``), so the cursor's next steps cost no decompression.
        LookupError when the row was not recorded."""
        leaf = Layout.leaves(part.fields[field])[k] if field in ("observations", "actions") else part.fields[field]
        start, stop = part.files.chunk_of(leaf, i)
        key = (part.key, field, k, start)
        with self._lock:
            rows = self._chunks.get(key)
            if rows is not None:
                self._chunks.move_to_end(key)
        if rows is None:
            rows = part.files.rows(leaf, start, stop)
            with self._lock:
                self._chunks[key] = rows
                while len(self._chunks) > OPEN_CHUNKS:
                    self._chunks.popitem(last=False)
        if not 0 <= i - start < len(rows):
            raise LookupError(f"row {i} was not recorded")
        return np.asarray(rows[i - start]).reshape(-1)

    def clear(self) -> None:
        with self._lock:
            self._parts.clear()
            self._chunks.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._parts)


class PieceReader:
    """A piece of an episode (``pieces.Where``) read part by part.

    Args:
        where: the piece, as the index lists it.
        cache: where the parts' raw records are kept.
    """

    def __init__(self, where: Where, cache: PartCache) -> None:
        self.where = where
        self.cache = cache
        self.lengths = [int(s["length"]) for s in where.spans]
        self.length = sum(self.lengths)
        self.first_step = int(where.summary["first_step"])

    # -- plots -----------------------------------------------------------------------
    def plot(self, width: int, obs_dims: list[int] | None, shown: list[list[int]] | tuple = ()) -> dict[str, Any]:
        """Reward, return, actions and observation dimensions ``obs_dims`` (None: the first ``DEFAULT_OBS_DIMS``
        outside ``shown``, the ``[start, stop)`` dimensions of the leaves the page shows as images), each downsampled
        to at most ``width`` columns; x is the episode's observation index."""
        first = self.cache.get(self.where, 0)
        actions = Layout(first.fields["actions"], BatchFiles.leaf_shape)
        observations = Layout(first.fields["observations"], BatchFiles.leaf_shape)
        dims = _default_dims(observations.count, shown) if obs_dims is None else obs_dims
        bad = [d for d in dims if not 0 <= d < observations.count]
        if bad or len(dims) > MAX_SERIES:
            raise NotFound(f"observation dimensions {bad or dims}: choose up to {MAX_SERIES} of 0..{observations.count - 1}")
        n = self.length
        reward, ret = Downsampler(n, width), Downsampler(n, width)
        act = {i: Downsampler(n, width) for i in range(min(actions.count, MAX_SERIES))}
        obs = {d: Downsampler(n + 1, width) for d in dims}
        carry = 0.0
        before: Any = None
        for k, part in enumerate(self._parts()):
            before = _follows(before, part, *self.where.parts[k])
            for block in _blocks(part, part.fields["rewards"], skip_first=False):
                r = np.asarray(block, np.float64).reshape(-1)
                reward.add(r)
                sums = carry + np.nancumsum(np.where(np.isfinite(r), r, np.nan))
                ret.add(sums)
                carry = float(sums[-1]) if len(sums) else carry
            _feed(part, part.fields["actions"], actions, act, skip_first=False)
            _feed(part, part.fields["observations"], observations, obs, skip_first=k > 0)
        k = self.first_step
        return {
            "series": {
                "reward": _shifted(reward.result(), k + 1), "return": _shifted(ret.result(), k + 1),
                "actions": [{"label": actions.label(i), **_shifted(d.result(), k + 1)} for i, d in act.items()],
                "observations": [{"label": observations.label(d), "dim": d, **_shifted(s.result(), k)} for d, s in obs.items()],
            },
            "observation_dims": observations.count, "seed": first.raw.get("seed"),
        }

    def _parts(self) -> Iterator[_Part]:
        for k in range(len(self.where.parts)):
            yield self.cache.get(self.where, k)

    # -- one step ----------------------------------------------------------------------
    def locate(self, step: int) -> tuple[int, int]:
        """(part, row in it) of observation ``step`` (an observation index, as the plots' x); LookupError when it
        was not read."""
        row = step - self.first_step
        if not 0 <= row <= self.length:
            raise LookupError(f"no step {step}: this episode's observations are {self.first_step}..{self.first_step + self.length}")
        start = 0
        for k, n in enumerate(self.lengths):
            if row <= start + n:
                return k, row - start
            start += n
        raise LookupError(f"no step {step}")  # pragma: no cover  (row <= length)

    def step(self, step: int, dims: list[int]) -> dict[str, Any]:
        """One step's values (``step_view``'s fields): reward, return so far, actions, flags, the chosen
        observation dimensions and the info, from the one part that holds it."""
        k, row = self.locate(step)
        part = self.cache.get(self.where, k)
        files, fields = part.files, part.fields
        observations = Layout(fields["observations"], BatchFiles.leaf_shape)
        bad = [d for d in dims if not 0 <= d < observations.count]
        if bad:
            raise LookupError(f"observation dimensions {bad}: there are 0..{observations.count - 1}")
        out: dict[str, Any] = {"step": step, "reward": None, "return": 0.0, "actions": [], "terminated": None, "truncated": None}
        if row > 0:  # the step that led to this observation (locate gives row 0 only in the first part)
            out.update(self._step_values(k, part, row))
        values = []
        for d in dims:
            leaf, j = observations.find(d)
            values.append({"dim": d, "label": observations.label(d), "value": number(self.cache.row(part, "observations", leaf, row)[j])})
        out["observations"] = values
        out["info"] = info_texts(files.info(part.raw, row))
        return out

    def _step_values(self, k: int, part: _Part, row: int) -> dict[str, Any]:
        """Reward, return so far, flags and actions of the step that led to observation ``row`` (>= 1) of part ``k``."""
        files, fields = part.files, part.fields
        i = row - 1
        rewards = np.asarray(files.rows(fields["rewards"], 0, row), np.float64)
        earlier: list[float | None] = [s.get("return") for s in self.where.spans[:k]]  # the parts' own (None: not finite)
        total = None if any(r is None for r in earlier) else sum(float(r or 0.0) for r in earlier) + float(rewards.sum())
        actions = Layout(fields["actions"], BatchFiles.leaf_shape)
        out: dict[str, Any] = {"reward": number(rewards[-1]), "return": number(total) if total is not None else None}
        for flag, key in (("terminations", "terminated"), ("truncations", "truncated")):
            out[key] = bool(self.cache.row(part, flag, 0, i)[0]) if fields[flag] is not None else None
        out["actions"] = []
        for d in range(min(actions.count, MAX_SERIES)):
            leaf, j = actions.find(d)
            out["actions"].append({"label": actions.label(d), "value": number(self.cache.row(part, "actions", leaf, i)[j])})
        return out

    def frame(self, step: int, image: dict[str, Any]) -> bytes:
        """Observation ``step``'s image leaf as a PNG, a stack as a strip of its frames (``image``: one of
        ``step_view.image_leaves`` of the observation space); LookupError when it is not those pixels."""
        k, row = self.locate(step)
        part = self.cache.get(self.where, k)
        try:
            return encode_png(frame_strip(self.cache.row(part, "observations", image["leaf"], row), image))
        except (ValueError, IndexError) as exc:
            raise LookupError(f"observation {step}{' ' + image['label'] if image['label'] else ''}: {exc}") from None


def _default_dims(count: int, shown: list[list[int]] | tuple) -> list[int]:
    """The first ``DEFAULT_OBS_DIMS`` of ``count`` observation dimensions outside the ``[start, stop)`` ranges."""
    out: list[int] = []
    d = 0
    for start, stop in sorted(shown):
        out.extend(range(d, min(start, count, d + DEFAULT_OBS_DIMS - len(out))))
        d = max(d, stop)
    out.extend(range(d, min(count, d + DEFAULT_OBS_DIMS - len(out))))
    return out[:DEFAULT_OBS_DIMS]


def _blocks(part: _Part, leaf: Any, skip_first: bool) -> Iterator[np.ndarray]:
    """A leaf's rows a block at a time (its first row left out when ``skip_first``: a later part's row 0)."""
    if leaf is None:
        return
    for block in part.files.blocks(leaf):
        if skip_first:
            block, skip_first = block[1:], False
        yield block


def _feed(part: _Part, field: Any, layout: Layout, series: dict[int, Downsampler], skip_first: bool) -> None:
    """Feed each wanted dimension of a field (``series``: dimension -> its downsampler), a leaf at a time."""
    wanted: dict[int, list[tuple[int, Downsampler]]] = {}
    for d, s in series.items():
        leaf, j = layout.find(d)
        wanted.setdefault(leaf, []).append((j, s))
    leaves = Layout.leaves(field)
    for leaf, cols in wanted.items():
        for block in _blocks(part, leaves[leaf], skip_first):
            flat = np.asarray(block).reshape(len(block), -1) if len(block) else np.empty((0, layout.widths[leaf]))
            for j, s in cols:
                s.add(flat[:, j])


def _follows(before: Any, part: _Part, entry: Any, record: int) -> Any:
    """Check that ``part`` (record ``record`` of batch ``entry``) continues ``before`` (the stub of the part read
    before it, or None) with ``stitch.check_follows``; the stub of ``part``."""
    index, first_step, continues = part_of(part.raw)
    batch = entry["fn"]
    length = int(part.raw.get("length", BatchFiles.leaf_shape(part.fields["rewards"])[0]))
    stub = SimpleNamespace(episode_id=part.raw.get("episode_id"),
                           parts=(Part(batch, record, index, first_step, length, continues),))
    if before is not None:
        check_follows(before, stub)  # type: ignore[arg-type]  # it reads parts and episode_id only
    return stub


def _shifted(s: dict[str, Any], by: int) -> dict[str, Any]:
    s["x"] = [x + by for x in s["x"]]
    return s
