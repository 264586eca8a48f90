"""The fields of a trace episode as the serializer writes them, and the spill files behind them.

One ``ArrayField`` per fixed-shape leaf of the observation and action spaces
plus rewards, terminations and truncations; one ``JsonField`` per Text leaf
plus the infos. The largest array field is written straight into the batch
file (``direct``); every other field has a spill file of its own, and every
compressed array field (all of them, or the image-like ones, as the
``Compression`` says) also has a spill for its chunk index.
``structure`` maps the episode's top-level keys to the nesting of the
spaces, with field keys as leaves (see ``BatchWriter.write_episode``).
"""

from __future__ import annotations

import os
from typing import Any

from envrec.contract.records import TraceLayout
from envrec.formats.compression import Compression
from envrec.formats.ownfolder import OwnFolder
from envrec.formats.schema import Leaf

from .field_sinks import ArrayField, ChunkPacker, JsonField
from .spill import Spill

__all__ = ["EpisodeFields"]


def _structure(spec: dict, key: tuple) -> Any:
    t = spec["type"]
    if t == "Dict":
        return {k: _structure(sub, (*key, k)) for k, sub in spec["spaces"]}
    if t == "Tuple":
        return [_structure(sub, (*key, i)) for i, sub in enumerate(spec["spaces"])]
    return key


class EpisodeFields:
    """Every field of an episode, keyed by ``("observations", *path)`` and so on; owns the spill files."""

    def __init__(self, own: OwnFolder, prefix: str, layout: TraceLayout, obs_spec: dict, act_spec: dict,
                 compression: Compression | None) -> None:
        self.own, self.prefix = own, prefix  # the spills are created and removed relative to the folder opened once
        self.arrays: list[ArrayField] = []
        self.jsons: list[JsonField] = []
        self.spills: list[tuple[Spill, str]] = []  # (spill, path), in creation order (checkpoints rely on it)
        self.structure = {
            "observations": _structure(obs_spec, ("observations",)),
            "actions": _structure(act_spec, ("actions",)),
            "rewards": ("rewards",),
            "terminations": ("terminations",),
            "truncations": ("truncations",),
            "infos": ("infos",),
        }
        try:
            self.sinks: dict[tuple, ArrayField | JsonField] = {}
            for root, lvs in (("observations", layout.obs_leaves), ("actions", layout.act_leaves)):
                for leaf in lvs:
                    key = (root, *leaf.path)
                    self.sinks[key] = self._array(key, leaf) if leaf.kind == "array" else self._json(key)
            self.rewards = self._array(("rewards",), Leaf((), "array", "<f8", ()))
            self.terms = self._array(("terminations",), Leaf((), "array", "|b1", ()))
            self.truncs = self._array(("truncations",), Leaf((), "array", "|b1", ()))
            self.infos = self._json(("infos",))
            max(self.arrays, key=lambda f: f.row_bytes).direct = True
            for f in self.arrays:
                if not f.direct:
                    f.spill = self._spill()
                if compression is not None and compression.compresses(f.dtype, f.shape):
                    f.packer = ChunkPacker(compression, f.row_bytes, self._spill(), delta=compression.filters(f.dtype))
                    f.codec = compression.codec
        except BaseException:
            self.close()
            raise

    @property
    def compressed(self) -> bool:
        """Whether any array field is compressed (the batch JSON is then compressed too)."""
        return any(f.packer is not None for f in self.arrays)

    def _spill(self) -> Spill:
        path = os.path.join(self.own.path, self.own.tmp_name(f"{self.prefix}.spill{len(self.spills)}"))
        f = Spill(path, self.own)
        self.spills.append((f, path))
        return f

    def _array(self, key: tuple, leaf: Leaf) -> ArrayField:
        f = ArrayField(key, leaf.dtype, leaf.shape, leaf.nbytes)
        self.arrays.append(f)
        return f

    def _json(self, key: tuple) -> JsonField:
        f = JsonField(key, spill=self._spill())
        self.jsons.append(f)
        return f

    def start_episode(self, bin_size: int) -> None:
        """Empty every field for a new episode (or part) whose data starts at ``bin_size`` in the batch."""
        for f in self.arrays:
            f.start_episode(bin_size)
        for jf in self.jsons:
            jf.items = 0

    def restore(self, arrays: list[list[int]], jsons: list[int], filters: list[str | None]) -> None:
        """Where each field stood at a checkpoint (``Checkpoint.arrays``, ``.jsons``, ``.filters``)."""
        for af, (rows, offset, stored) in zip(self.arrays, arrays, strict=True):
            af.rows, af.offset, af.stored = rows, offset, stored
        for jf, items in zip(self.jsons, jsons, strict=True):
            jf.items = items
        for af, choice in zip(self.arrays, filters, strict=False):  # the recording's delta filters
            if af.packer is not None:
                af.packer.choose(choice)

    def flush(self) -> None:
        for f, _ in self.spills:
            f.flush()

    def rewind(self) -> None:
        """The episode is in the batch: its spills are reused from the start (see ``Spill.rewind``)."""
        for f, _ in self.spills:
            f.rewind()

    def close(self) -> None:
        """Close and remove every spill file."""
        for f, path in self.spills:
            f.close()
            self.own.discard(None, os.path.basename(path))
        self.spills.clear()
