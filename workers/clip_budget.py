"""Disk budgets for video clips: ``max_bytes`` and ``keep_last_clips``.

After each clip is complete on disk (video and ``.meta.json``), the oldest
clips of the same recorder are deleted until both limits hold; the newest
clip is never deleted. A clip's metadata goes first (it is what names the
video), then the video, so no reader sees metadata naming a missing file.
A clip whose metadata someone else deleted (the env side evicting it for
``envrec.keep.best``, or a user) no longer counts against the limits.
A successor encoder finds its recorder's earlier clips by the ``recorder``
key of their metadata.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from dataclasses import dataclass

from envrec.formats.clip_meta import META_SUFFIX, read_clip_meta

__all__ = ["ClipBudget"]

logger = logging.getLogger(__name__)


@dataclass
class _Kept:
    meta: str  # file names in the folder
    video: str | None
    bytes: int


class ClipBudget:
    """The clips one recorder has on disk, oldest first, and the limits they must keep to."""

    def __init__(self, folder: str, recorder: str, max_bytes: int | None, keep_last: int | None) -> None:
        self.folder = folder
        self.recorder = recorder
        self.max_bytes = max_bytes
        self.keep_last = keep_last
        self.clips: deque[_Kept] = deque()
        self.bytes = 0
        self.evicted = 0
        self.bytes_evicted = 0
        if self.active:
            self._find_earlier()

    @property
    def active(self) -> bool:
        return self.max_bytes is not None or self.keep_last is not None

    def _find_earlier(self) -> None:
        """Clips a dead predecessor of this encoder finished, oldest first."""
        found = []
        for name in os.listdir(self.folder):
            if not name.endswith(META_SUFFIX) or name.startswith("."):
                continue
            try:
                meta = read_clip_meta(os.path.join(self.folder, name))
            except (OSError, ValueError):
                continue
            if meta.get("recorder") == self.recorder:
                found.append((meta.get("finished_seq", 0), name, meta.get("path")))
        for _, meta_name, video in sorted(found):
            self.add(meta_name, video)

    def add(self, meta_name: str, video: str | None) -> None:
        size = sum(_size(os.path.join(self.folder, n)) for n in (meta_name, video) if n)
        self.clips.append(_Kept(meta_name, video, size))
        self.bytes += size

    def enforce(self) -> tuple[int, int]:
        """Delete the oldest clips until the limits hold; returns (clips, bytes) deleted by this call."""
        if not self.active:
            return 0, 0
        self._forget_deleted()
        n = nbytes = 0
        while len(self.clips) > 1 and (
            (self.keep_last is not None and len(self.clips) > self.keep_last)
            or (self.max_bytes is not None and self.bytes > self.max_bytes)
        ):
            old = self.clips.popleft()
            for name in (old.meta, old.video):
                if name:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.folder, name))
            self.bytes -= old.bytes
            n += 1
            nbytes += old.bytes
        if n:
            self.evicted += n
            self.bytes_evicted += nbytes
            logger.info(
                "envrec: clip budget (max_bytes=%s, keep_last_clips=%s): evicted %d clip(s), %d bytes; %d kept, %d bytes",
                self.max_bytes, self.keep_last, n, nbytes, len(self.clips), self.bytes,
            )
        return n, nbytes

    def _forget_deleted(self) -> None:
        """Drop the clips whose metadata is gone: deleted by another hand, they hold no room (one stat a clip)."""
        kept = deque(c for c in self.clips if os.path.lexists(os.path.join(self.folder, c.meta)))
        if len(kept) != len(self.clips):
            self.bytes = sum(c.bytes for c in kept)
            self.clips = kept


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
