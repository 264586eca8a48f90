"""Reading traces back: ``TraceReader`` and gym-recording's ``scan_recorded_traces``.

Arrays are memory-mapped from the ``.bin`` files (no copy, read-only);
compressed ones (see ``envrec.formats.compression``) are decompressed when their
episode is read, each array once while it stays in a small cache. Only
batches the manifest names are read, so a recording still running is read up
to its last committed batch; ``refresh()`` picks up batches committed since.
A batch whose files are missing, not the size the manifest says, (with
``verify=True``, the default) whose CRC-32 differs, or whose contents are
not a trace raises ``TraceError`` naming the file and the field.

``on_damaged="skip"`` reads what is intact instead: a manifest that cannot
be read leaves its recording out, a damaged batch leaves its episodes out,
and ``damaged`` lists each (file and reason). Batch files are then checked
when the reader opens (or refreshes): present, inside the folder, of the
sizes and (with ``verify``) the CRC-32s the manifest names, so ``len()`` and
indexing count those batches only. A batch whose contents turn out damaged
only while they are read (a CRC-32 made to match, or ``verify=False``) is
added to ``damaged`` and the rest of it skipped by iteration; indexing raises.

Episodes written in parts (a long episode committed while it ran: see
``docs/format.md``) are stitched into one ``Episode`` (``envrec.read.stitch``);
``len()``, indexing and iteration count stitched episodes, worked out from
the manifest's entries without loading a batch. A stitched episode is the
concatenation of its parts, so it is in memory whole: ``iter_parts(i)`` reads
a long one part by part instead. When a part in the middle is left out as
damaged (``"skip"``), the episode is split there: the parts after the damage
make an ``Episode`` of their own, starting at their ``first_step``. When a disk
budget (``max_bytes``) evicted batches after the reader read the manifests,
reading them raises ``TraceError`` saying the batch was evicted: ``refresh()``
reads what is kept (an endless episode then starts at a later ``first_step``).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self

from ..errors import ConfigError, TraceError
from ..formats.trace_format import MANIFEST_SUFFIX, BatchEntry, Manifest, is_segment, read_manifest, recording_batches
from .batch_files import BatchFiles, Episode, Part, SavedState
from .shipped_cache import is_shipped, local_folder
from .stitch import chained, check_follows, check_part_follows, joins, settled, stitch

__all__ = ["ON_DAMAGED", "Damaged", "Episode", "Part", "Recording", "SavedState", "TraceError", "TraceReader", "scan_recorded_traces"]

ON_DAMAGED = ("raise", "skip")


@dataclass(frozen=True)
class Recording:
    """One recording in the folder: its head manifest and every batch entry it names, oldest first."""

    path: str
    manifest: Manifest
    batches: list[BatchEntry]


@dataclass(frozen=True)
class Damaged:
    """A file that could not be read: a manifest (its recording left out) or a batch (its episodes left out)."""

    file: str  # its path relative to the reader's folder
    reason: str


@dataclass(frozen=True)
class _BatchRef:
    manifest: Manifest
    entry: BatchEntry
    first_index: int  # index across the reader of its first record's (stitched) episode
    joined: bool  # its first record continues the last record of the batch before it
    recording: str  # the head manifest's path


class TraceReader:
    """Episodes of every recording in ``directory`` (or only of ``prefix``), in order.

    ``len(reader)``, ``reader[i]`` (negative indices count from the end) and
    iteration give ``Episode`` objects; ``refresh()`` sees batches a live
    recording committed since.

    Args:
        directory: the folder holding the recordings' files, or a URL recordings were shipped to (``ship_to``,
            ``envrec ship``): every batch committed there is fetched into a local cache first
            (``envrec.read.shipped_cache``), and again at each ``refresh()`` for the batches committed since.
        prefix: read only the recording with this file prefix. Default None: every recording in the folder.
        verify: check each batch's CRC-32 when it is first loaded (reads its files once). Default True.
        on_damaged: ``"raise"`` (the default): a damaged manifest or batch raises ``TraceError`` naming
            it; ``"skip"``: read the intact ones and list the others in ``damaged``.

    Raises:
        ConfigError: ``on_damaged`` is neither ``"raise"`` nor ``"skip"``.
        TraceError: a manifest or batch is missing, damaged or not envrec's (with ``on_damaged="raise"``).
    """

    def __init__(
        self, directory: str | os.PathLike, prefix: str | None = None, verify: bool = True, on_damaged: str = "raise"
    ) -> None:
        if on_damaged not in ON_DAMAGED:
            raise ConfigError(f"on_damaged must be one of {', '.join(map(repr, ON_DAMAGED))}, not {on_damaged!r}")
        self.source = os.fspath(directory)  # a folder, or a shipped URL read through its local cache
        self.directory = local_folder(self.source) if is_shipped(self.source) else self.source
        self.prefix = prefix
        self.verify = verify
        self.on_damaged = on_damaged
        self.damaged: list[Damaged] = []  # what on_damaged="skip" left out, in the order it was found
        self._files = BatchFiles(self.directory, verify)
        self._cache: tuple[int, list] | None = None
        self.manifests: list[Manifest] = []  # the head manifests
        self.recordings: list[Recording] = []
        self._batches: list[_BatchRef] = []
        self.refresh()

    def refresh(self) -> None:
        """Re-read the manifests (a recording may have committed batches since; from a shipped URL: fetch the
        batches committed there since into the cache first)."""
        if self.source != self.directory:
            local_folder(self.source)
        for attempt in range(3):  # a file named by a head we read may be evicted before we read it: read again
            try:
                self._read_manifests(last=attempt == 2)
                return
            except FileNotFoundError as exc:
                missing = exc
        raise TraceError(f"a manifest segment in {self.directory} keeps vanishing while it is read: {missing}")

    def _read_manifests(self, last: bool) -> None:
        pattern = f"{glob.escape(self.prefix)}{MANIFEST_SUFFIX}" if self.prefix else f"*{MANIFEST_SUFFIX}"
        paths = sorted(glob.glob(os.path.join(glob.escape(self.directory), pattern)))
        self.damaged = []
        heads: list[tuple[str, Manifest]] = []
        for path in paths:
            try:
                manifest = read_manifest(path)
            except FileNotFoundError:
                raise
            except (OSError, TraceError) as exc:
                self._damage(path, f"cannot read the manifest {path}: {exc}", exc)
                continue
            if not is_segment(manifest):  # segments are read through the head that counts them
                heads.append((path, manifest))
        if not heads:
            found = "; ".join(d.reason for d in self.damaged)
            raise TraceError(f"no {'readable ' if found else ''}trace manifest ({pattern}) in {self.directory}"
                             + (f": {found}" if found else ""))
        self.manifests, self.recordings, self._batches = [], [], []
        n = 0
        for path, manifest in heads:
            try:
                entries = self._intact(self._chained(path, recording_batches(self.directory, manifest)))
            except FileNotFoundError as exc:
                if not last or self.on_damaged == "raise":
                    raise
                self._damage(path, f"a manifest segment of {path} is missing: {exc.filename}", exc)
                continue
            except (OSError, TraceError) as exc:
                self._damage(path, f"cannot read a manifest segment of {path}: {exc}", exc)
                continue
            self.manifests.append(manifest)
            self.recordings.append(Recording(path, manifest, entries))
            for entry, joined in zip(entries, joins(entries), strict=True):
                start = n - 1 if joined else n
                self._batches.append(_BatchRef(manifest, entry, start, joined, path))
                n = start + entry["len"]
        if n == 0:
            failed = [(p, m["error"]) for p, m in heads if m.get("error")]
            if failed:
                raise TraceError(
                    "no episode was recorded: "
                    + "; ".join(f"{os.path.basename(p)} says the recording failed: {why}" for p, why in failed)
                )
        self._len = n
        self._cache = None

    def _chained(self, path: str, entries: list[BatchEntry]) -> list[BatchEntry]:
        """``entries`` checked to be the serializer's chain (``stitch.chained``): a break raises ``TraceError``
        (``"raise"``) or is listed in ``damaged`` under the manifest's name (``"skip"``)."""
        name = os.path.relpath(path, self.directory)
        if self.on_damaged == "raise":
            return chained(entries, name)
        return chained(entries, name, lambda why: self.damaged.append(Damaged(name, why)))

    def _intact(self, entries: list[BatchEntry]) -> list[BatchEntry]:
        """``entries`` as they are (``on_damaged="raise"``), or those whose files check out (``"skip"``)."""
        if self.on_damaged == "raise":
            return entries
        intact = []
        for entry in entries:
            problems = self._files.check(entry, checksums=self.verify)
            if problems:
                self.damaged.append(Damaged(entry["fn"], f"batch {entry['fn']} is damaged: {'; '.join(problems)}"))
            else:
                intact.append(entry)
        return intact

    def _damage(self, path: str, reason: str, cause: Exception) -> None:
        """Note a damaged file (``"skip"``) or raise ``TraceError`` with ``reason`` (``"raise"``)."""
        if self.on_damaged == "raise":
            raise TraceError(reason) from cause
        damaged = Damaged(os.path.relpath(path, self.directory), reason)
        if damaged not in self.damaged:  # a batch found damaged again by a second iteration
            self.damaged.append(damaged)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Episode]:
        pending: list[Episode] = []  # the parts read so far of an episode that continues in the next batch
        for b, ref in enumerate(self._batches):
            try:
                records = self._load_batch(b)
                for i, raw in enumerate(records):
                    part = self._episode(ref, ref.first_index + i, raw)
                    if i == 0 and ref.joined and pending:
                        check_follows(pending[-1], part)
                        pending.append(part)
                    else:  # (pending is empty: only a batch that continues it, ref.joined, follows parts)
                        pending = [part]
                    if not self._continued(b, i):
                        yield self._stitch(pending, b)
                        pending = []
            except TraceError as exc:
                if self.on_damaged == "raise":
                    raise
                self._damage(os.path.join(self.directory, ref.entry["fn"]), str(exc), exc)
                if pending:  # the batch that continued it is damaged: the episode ends where it was read to
                    yield stitch(pending)
                    pending = []

    def _continued(self, b: int, i: int) -> bool:
        """Record ``i`` of batch ``b`` is a part continued by the first record of batch ``b + 1``."""
        return i == self._batches[b].entry["len"] - 1 and b + 1 < len(self._batches) and self._batches[b + 1].joined

    def __getitem__(self, index: int) -> Episode:
        found = list(self._parts(index))  # each part checked to follow the one before it
        return self._stitch([ep for _, ep in found], found[-1][0])

    def _stitch(self, parts: list[Episode], b: int) -> Episode:
        """The parts as one episode (``b``: the last one's batch), told how it ended (``stitch.settled``)."""
        ref = self._batches[b]
        following = self._batches[b + 1] if b + 1 < len(self._batches) else None
        after = following.entry if following is not None and following.recording == ref.recording else None
        return settled(stitch(parts), ref.manifest, ref.entry, after)

    def iter_parts(self, index: int) -> Iterator[Episode]:
        """The parts of episode ``index`` one by one, each an ``Episode`` of its own (``parts`` holds its one
        ``Part``; ``observations[0]`` repeats the last observation of the part before): a long episode read
        without holding all of it. An episode written whole has one part, itself.

        Args:
            index: the episode's position across the reader (negative counts from the end).

        Raises:
            IndexError: no such episode.
            TraceError: a batch holding one of its parts is damaged or was evicted.
        """
        for _, ep in self._parts(index):
            yield ep

    def _parts(self, index: int) -> Iterator[tuple[int, Episode]]:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"episode {index} out of range: the trace has {self._len}")
        lo, hi = 0, len(self._batches) - 1
        while lo < hi:  # the last batch whose first_index <= index
            mid = (lo + hi + 1) // 2
            if self._batches[mid].first_index <= index:
                lo = mid
            else:
                hi = mid - 1
        while self._batches[lo].joined and self._batches[lo].first_index == index:
            lo -= 1  # back to the batch holding its first part
        b, i = lo, index - self._batches[lo].first_index
        before: tuple[Part, int] | None = None  # the part handed out last (not its arrays) and its episode's id
        while True:
            ref = self._batches[b]
            ep = self._episode(ref, index, self._load_batch(b)[i])
            if before is not None:  # before it is handed out: iter_parts gives no part out of order
                check_part_follows(*before, ep.parts[0], ep.episode_id)
            yield b, ep
            if not self._continued(b, i):
                return
            before, b, i = (ep.parts[-1], ep.episode_id), b + 1, 0

    # -- files -------------------------------------------------------------
    def check_batch(self, entry: Mapping[str, Any], checksums: bool = True) -> list[str]:
        """Problems with a batch's files (missing, wrong size, wrong CRC-32); empty when complete."""
        return self._files.check(entry, checksums)

    def _load_batch(self, b: int) -> list:
        if self._cache is not None and self._cache[0] == b:
            return self._cache[1]
        ref = self._batches[b]
        try:
            episodes = self._files.load(ref.entry, ref.manifest)
        except TraceError as exc:
            evicted = self._evicted(ref)
            if evicted:
                raise TraceError(evicted) from exc
            raise
        self._cache = (b, episodes)
        return episodes

    def _evicted(self, ref: _BatchRef) -> str | None:
        """Why ``ref``'s batch cannot be read when its recording no longer names it (a disk budget evicted it
        since the manifest was read), else None."""
        if all(os.path.exists(os.path.join(self.directory, ref.entry[k])) for k in ("fn", "bin") if k in ref.entry):
            return None
        try:
            manifest = read_manifest(ref.recording)
            named = {e["fn"] for e in recording_batches(self.directory, manifest)}
        except (OSError, TraceError):
            return None
        if ref.entry["fn"] in named:
            return None
        return (f"batch {ref.entry['fn']} in {self.directory} was evicted (the recording's disk budget, max_bytes) "
                "after this reader read its manifest: refresh() reads the batches that are kept")

    def _episode(self, ref: _BatchRef, index: int, raw: dict) -> Episode:
        return self._files.episode(ref.manifest, index, raw)

    def close(self) -> None:
        """Forget the memory maps (arrays handed out keep theirs alive)."""
        self._files.close()
        self._cache = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def scan_recorded_traces(
    directory: str | os.PathLike,
    episode_cb: Callable[[Any, Any, Any], Any],
    max_episodes: int | None = None,
) -> None:
    """gym-recording's entry point: ``episode_cb(observations, actions, rewards)`` per episode."""
    with TraceReader(directory) as reader:
        for n, ep in enumerate(reader):
            if max_episodes is not None and n >= max_episodes:
                return
            episode_cb(ep.observations, ep.actions, ep.rewards)
