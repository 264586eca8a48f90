"""Frames from the ring into a clip's ffmpeg, and how much of the ring ffmpeg still needs.

A FRAME record in the ring is its header, its ``FRAME_SHAPE`` section and its
pixels (``envrec.contract.records.frame_layout``). With zero copy
(``VideoSettings.zero_copy``) ffmpeg reads the pixels from the ring's own
pages, so a frame's room may be given back only once ffmpeg has read past
it: the feed keeps, for each frame handed over, its ring position and the
bytes sent up to its end, and ``release_point`` says how far the worker
loop may release the ring.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np

from envrec.errors import FfmpegError

from .ffmpeg_process import FfmpegProcess

__all__ = ["FrameFeed"]


class FrameFeed:
    """The frames handed to the open clip's ffmpeg that it may not have read yet."""

    def __init__(self) -> None:
        self._in_pipe: collections.deque[tuple[int, int]] = collections.deque()  # (ring position, bytes sent at its end)

    def send(self, proc: FfmpegProcess, position: int, frame: memoryview) -> str | None:
        """Hand ``proc`` one frame, the pixels of the record at ring position ``position``; None, or why it
        did not take it (ffmpeg died or hangs)."""
        try:
            proc.write(frame)
        except FfmpegError as exc:
            return str(exc)  # the clip breaks: nothing in the pipe matters now
        if proc.zero_copy:
            self._in_pipe.append((position, proc.sent))
        return None

    def send_run(self, proc: FfmpegProcess, position: int, record_bytes: int, frames: np.ndarray,
                 between: Callable[[], None] | None = None) -> tuple[int, str | None]:
        """Hand ``proc`` the rows of ``frames``: the pixels of consecutive records ``record_bytes`` apart in
        the ring, the first at ring position ``position``. Returns how many frames it took whole, and why it
        took no more (ffmpeg died or hangs) or None. ``between()``: after each system call of the hand-over
        (``Handler.release_now``), when ``release_point`` already counts the frames not handed over yet."""
        nbytes, before = frames.shape[1], proc.sent
        self._in_pipe.extend((position + i * record_bytes, before + (i + 1) * nbytes) for i in range(len(frames)))
        try:
            proc.write_frames(frames, between)
        except FfmpegError as exc:
            return (proc.sent - before) // nbytes, str(exc)  # the clip breaks: nothing in the pipe matters now
        return len(frames), None

    def release_point(self, proc: FfmpegProcess | None, cursor: int) -> int:
        """How far the ring may be released (``cursor``: all the worker loop has read): up to the oldest frame
        ``proc`` has not read yet (None: ffmpeg has finished, it reads nothing more), or, without zero copy,
        not taken yet."""
        pending = self._in_pipe
        if pending:
            if proc is None:
                consumed = pending[-1][1]
            elif proc.zero_copy:
                consumed = proc.consumed()
            else:
                consumed = proc.sent
            while pending and pending[0][1] <= consumed:
                pending.popleft()
            if pending:
                return pending[0][0]
        return cursor

    def clear(self) -> None:
        """ffmpeg has read all it will ever read (it finished, or is gone)."""
        self._in_pipe.clear()
