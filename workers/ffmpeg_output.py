"""Where a clip's ffmpeg writes: a descriptor of the worker that its output path names.

ffmpeg's output path is ``/proc/PID/fd/N``, N a descriptor of the worker
(PID). The worker points N at the clip's video (``point_at``: a file it
opened itself, relative to the clips' folder, never through a symlink) before
the clip's first frame goes to ffmpeg; ffmpeg opens its output only once it
has read that frame (it probes its input first), and through N it gets the
very file the worker opened: ffmpeg resolves no path in the folder.

So ffmpeg can start before its clip's name is known: the encoder keeps one
started ahead for the next clip (``Encoder`` standby), and a clip's first
frames do not wait for ffmpeg's start (~10-15 ms of CPU, more at nice 10 on a
busy machine) when the ring is full. Until N is pointed at a video it names
the clips' folder, which ffmpeg cannot open for writing: a mistake is a
failed clip, never a video written elsewhere. An ffmpeg that no clip took
and whose worker died reads the end of its input, cannot open its output
(the worker's descriptors are gone) and exits, having written nothing.
"""

from __future__ import annotations

import os

__all__ = ["OutputSlot"]


class OutputSlot:
    """A descriptor of this process for one ffmpeg's output (see the module docstring).

    Args:
        placeholder: what it names until ``point_at``: a descriptor that cannot be opened for writing
            (the clips' folder).
    """

    def __init__(self, placeholder: int) -> None:
        self.fd = os.dup(placeholder)  # not inherited by children: ffmpeg reaches it through /proc
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"

    def point_at(self, fd: int) -> None:
        """Make the slot name the file open at ``fd`` (ffmpeg must not have opened its output yet)."""
        os.dup2(fd, self.fd, inheritable=False)

    def close(self) -> None:
        """Once its ffmpeg is gone (or has opened its output): the descriptor is freed."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
