"""Disk budgets for video clips: ``max_bytes`` and ``keep_last_clips``.

After each clip is complete on disk (video and ``.meta.json``), the oldest
clips of the same recorder are deleted until both limits hold; the newest
clip is never deleted. A clip's metadata goes first (it is what names the
video), then the video, so no reader sees metadata naming a missing file.
A clip whose metadata someone else deleted (the env side evicting it for
``envrec.keep.best``, or a user) no longer counts against the limits.
A successor encoder finds its recorder's earlier clips by the ``recorder``
key of their metadata, and adopts one only when it is the clip's own: its
``path`` is the video of the metadata file's own name (``NAME.meta.json``
names ``NAME.mp4`` or ``NAME.cast``, or nothing) and that video is a regular
file (not a symlink). Metadata naming anything else (a file elsewhere, a
user's file beside the clips) is left alone, counted (``ignored``) and
logged: a budget deletes only what its recorder wrote. Every deletion is
relative to the folder opened once (``OwnFolder``).
"""

from __future__ import annotations

import logging
import os
import stat
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from envrec.errors import RecordError
from envrec.formats.clip_meta import META_SUFFIX, is_clip_file, read_clip_meta
from envrec.formats.ownfolder import OwnFolder

__all__ = ["ClipBudget"]

logger = logging.getLogger(__name__)


@dataclass
class _Kept:
    meta: str  # file names in the folder
    video: str | None
    bytes: int


class ClipBudget:
    """The clips one recorder has on disk, oldest first, and the limits they must keep to."""

    def __init__(self, folder: OwnFolder, recorder: str, max_bytes: int | None, keep_last: int | None,
                 ship_ledger: str | None = None) -> None:
        self.folder = folder
        self.ship_ledger = ship_ledger  # shipping is on: a clip not in this ledger is not deleted yet
        self.held_for_shipping = 0  # clips the limits would delete that wait for the shipper
        self.recorder = recorder
        self.max_bytes = max_bytes
        self.keep_last = keep_last
        self.clips: deque[_Kept] = deque()
        self.bytes = 0
        self.evicted = 0
        self.bytes_evicted = 0
        self.ignored: list[str] = []  # metadata of this recorder's id naming what is not its clip's: left alone
        if self.active:
            self._find_earlier()

    @property
    def active(self) -> bool:
        return self.max_bytes is not None or self.keep_last is not None

    def _find_earlier(self) -> None:
        """Clips a dead predecessor of this encoder finished, oldest first (its own clips only: ``_adoptable``)."""
        found = []
        for name in self.folder.listdir():
            if not name.endswith(META_SUFFIX) or name.startswith(".") or not is_clip_file(name):
                continue
            try:
                if not self.folder.is_regular(name):
                    continue
                meta = read_clip_meta(os.path.join(self.folder.path, name))
            except (OSError, ValueError):
                continue
            if meta.get("recorder") != self.recorder:
                continue
            video = meta.get("path")
            why = self._not_adoptable(name, video)
            if why is not None:
                self.ignored.append(name)
                logger.warning("envrec: clip budget: %s carries this recorder's id but %s: left alone, never deleted",
                               name, why)
                continue
            found.append((meta.get("finished_seq", 0), name, video))
        for _, meta_name, video in sorted(found):
            self.add(meta_name, video)

    def _not_adoptable(self, meta_name: str, video: object) -> str | None:
        """Why metadata ``meta_name`` does not describe a clip this recorder wrote; None when it does."""
        if video is None:
            return None
        stem = meta_name[: -len(META_SUFFIX)]
        if video not in (stem + ".mp4", stem + ".cast"):
            return f"its path {video!r} is not its own clip's video ({stem}.mp4 or {stem}.cast)"
        st = self.folder.lstat(video)
        if st is not None and not stat.S_ISREG(st.st_mode):
            return f"its video {video} is not a regular file (a symlink, a FIFO, a folder)"
        return None

    def add(self, meta_name: str, video: str | None) -> None:
        size = sum(_size(self.folder, n) for n in (meta_name, video) if n)
        self.clips.append(_Kept(meta_name, video, size))
        self.bytes += size

    def _shipped(self) -> Callable[[str], bool] | None:
        """Whether a clip (by name) is in the shipper's ledger: uploaded; None without a ship ledger. Imported
        here, so that an encoder worker's start does not pay for shipping's formats."""
        if not self.ship_ledger:
            return None
        from envrec.formats.ship_ledger import read_ledger
        from envrec.formats.shipped import clip_key

        keys = read_ledger(self.folder.path, self.ship_ledger)
        return lambda clip: clip_key(clip) in keys

    def enforce(self) -> tuple[int, int]:
        """Delete the oldest clips until the limits hold; returns (clips, bytes) deleted by this call."""
        if not self.active:
            return 0, 0
        self._forget_deleted()
        n = nbytes = 0
        shipped = self._shipped()
        while len(self.clips) > 1 and (
            (self.keep_last is not None and len(self.clips) > self.keep_last)
            or (self.max_bytes is not None and self.bytes > self.max_bytes)
        ):
            if shipped is not None and not shipped(self.clips[0].meta[: -len(META_SUFFIX)]):
                break
            old = self.clips.popleft()
            for name in (old.meta, old.video):
                if name:
                    self._delete(name)
            self.bytes -= old.bytes
            n += 1
            nbytes += old.bytes
        self.held_for_shipping = _over(self) if shipped is not None else 0
        if n:
            self.evicted += n
            self.bytes_evicted += nbytes
            logger.info(
                "envrec: clip budget (max_bytes=%s, keep_last_clips=%s): evicted %d clip(s), %d bytes; %d kept, %d bytes",
                self.max_bytes, self.keep_last, n, nbytes, len(self.clips), self.bytes,
            )
        return n, nbytes

    def _delete(self, name: str) -> None:
        """Delete a clip's file: a regular file of its own name only (something else put there stays)."""
        try:
            st = self.folder.lstat(name)
            if st is not None and stat.S_ISREG(st.st_mode):
                self.folder.unlink(name)
            elif st is not None:
                logger.warning("envrec: clip budget: %s is no longer a regular file: left alone", name)
        except (OSError, RecordError) as exc:
            logger.warning("envrec: clip budget: could not delete %s: %s", name, exc)

    def _forget_deleted(self) -> None:
        """Drop the clips whose metadata is gone: deleted by another hand, they hold no room (one stat a clip)."""
        kept = deque(c for c in self.clips if self.folder.lstat(c.meta) is not None)
        if len(kept) != len(self.clips):
            self.bytes = sum(c.bytes for c in kept)
            self.clips = kept


def _over(budget: ClipBudget) -> int:
    """Clips beyond the limits, kept for the shipper."""
    over_count = len(budget.clips) - budget.keep_last if budget.keep_last is not None else 0
    over_bytes, k = budget.bytes, 0
    if budget.max_bytes is not None:
        for c in budget.clips:
            if over_bytes <= budget.max_bytes:
                break
            over_bytes -= c.bytes
            k += 1
    return max(0, over_count, k)


def _size(folder: OwnFolder, name: str) -> int:
    try:
        st = folder.lstat(name)
    except (OSError, RecordError):
        return 0
    return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0
