"""One ffmpeg process, from start to exit, as the encoder worker runs it.

* ffmpeg runs in its own process group, SIGTERM and SIGINT blocked in it, so
  neither a Ctrl-C in the terminal nor a scheduler's SIGTERM to the job's
  group reaches it (``envrec.contract.children``): the encoder decides when a
  clip ends.
* A thread drains its stderr continuously (a full stderr pipe would stall
  it) and keeps the last lines for error messages.
* Frames go to its stdin with blocking calls (the kernel waits for room
  instead of the worker polling): ``vmsplice`` of the ring's pages when
  ``zero_copy``, one call for a run of frames (see ``pipe_splice``;
  ``consumed()`` says how far ffmpeg has read them), else a ``write`` a
  frame; a watchdog thread kills ffmpeg when a write has made no progress
  for ``stall_timeout_s`` (ffmpeg hangs), which ends the write with an error and
  breaks the clip, so the env process is never blocked by it for longer.
* ``finish`` closes stdin, waits up to a timeout, then kills — and says so.
* Its output is the worker's descriptor ``output`` names (``OutputSlot``),
  freed once ffmpeg is gone; ``dismiss`` ends an ffmpeg that was started
  ahead and never given a clip.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import subprocess
import threading
import time
from collections.abc import Callable

import numpy as np

from envrec.contract.children import popen_own_group
from envrec.contract.procinfo import signal_name, wait_for_exit
from envrec.errors import FfmpegError

from . import pipe_splice
from .ffmpeg_nice import set_nice
from .ffmpeg_output import OutputSlot

__all__ = ["FfmpegProcess"]

WATCH_INTERVAL_S = 0.25  # how often the watchdog looks at a write in progress
FINISH_TIMEOUT_S = 30.0  # how long a clip's last frames may take to encode after stdin closes
# ffmpeg is dead or dying (a write into its stdin failed, or it was just sent SIGKILL): how long to wait
# for it to exit, so that its exit status can be named; bounded, a process stuck in the kernel cannot stall the worker.
FFMPEG_EXIT_GRACE_S = 5.0
# How long the stderr thread may go on reading ffmpeg's last lines (quoted in the error) once it exited:
# after a failed write, while the worker is still handling the record; and when a clip's ffmpeg finished.
STDERR_TAIL_GRACE_S = 1.0
STDERR_FINISH_GRACE_S = 2.0
STDERR_TAIL_LINES = 20
PIPE_BYTES = 1 << 20  # Linux's default cap for an unprivileged pipe size (/proc/sys/fs/pipe-max-size)


class FfmpegProcess:
    def __init__(self, cmd: list[str], output: OutputSlot, nice: int, stall_timeout_s: float,
                 zero_copy: bool = False) -> None:
        """Start ffmpeg; ``stall_timeout_s`` (``VideoSettings.stall_timeout_s``): no input taken that long is a hang;
        ``zero_copy``: hand it the frames' pages (``VideoSettings.zero_copy``) where the system can; ``output``:
        the descriptor its output path (``cmd``'s last word) names, closed once ffmpeg is gone; ``nice``: its
        niceness (0: the worker's)."""
        self.cmd = cmd
        self.output = output
        self.zero_copy = zero_copy and pipe_splice.available()
        self.sent = 0  # bytes handed to ffmpeg's stdin
        self.stall_timeout_s = stall_timeout_s
        self.proc = popen_own_group(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True)
        self.pid = self.proc.pid
        assert self.proc.stdin is not None and self.proc.stderr is not None  # both are pipes (above)
        self._stdin, self._stderr = self.proc.stdin, self.proc.stderr
        self.nice = nice  # as asked: 0 leaves it the worker's (``ffmpeg_nice``)
        if nice:
            set_nice(self.pid, nice)  # threads ffmpeg starts from now on inherit it
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._drainer = threading.Thread(target=self._drain, name="envrec-ffmpeg-stderr", daemon=True)
        self._drainer.start()
        self._fd = self._stdin.fileno()
        try:  # a whole frame per write instead of 16 wake-ups of 64 KiB
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        self.killed_reason: str | None = None
        # Writes block (the kernel waits for ffmpeg to read); the watchdog bounds how long they make no progress.
        self._writing_since: float | None = None
        self._done = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="envrec-ffmpeg-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        """Kill ffmpeg when a write has made no progress for ``stall_timeout_s``: the blocked write then fails."""
        while not self._done.wait(WATCH_INTERVAL_S):
            since = self._writing_since
            if since is not None and time.monotonic() - since > self.stall_timeout_s:
                self.kill(f"ffmpeg took no input for {self.stall_timeout_s:g} s")
                return

    def _drain(self) -> None:
        for line in self._stderr:
            self.tail.append(line.decode("utf-8", "replace").rstrip())

    def describe(self, what: str) -> str:
        rc = self.proc.poll()
        status = "" if rc is None else f" ({signal_name(rc)})"
        return f"{what}{status}" + (f"; ffmpeg said: {' | '.join(self.tail)}" if self.tail else "")

    def write(self, data) -> None:
        """Hand all of ``data`` (one frame) to ffmpeg's stdin; FfmpegError if it died or hangs (``sent`` counts
        the bytes it took). With ``zero_copy`` it must stay unchanged until ``consumed()`` is past it."""
        view = memoryview(data)
        self._send(pipe_splice.iovec_of(view) if self.zero_copy else None, (view,))

    def write_frames(self, frames: np.ndarray, between: Callable[[], None] | None = None) -> None:
        """``write`` for the rows of ``frames`` ((n, frame bytes) uint8, each row contiguous, e.g. frames of
        consecutive records in a ring), in order: with zero copy, one call for all of them. ``between()``
        after each system call that handed some over (``sent`` counts them by then)."""
        self._send(pipe_splice.iovecs(frames) if self.zero_copy else None, frames, between)

    def _send(self, iov, buffers, between: Callable[[], None] | None = None) -> None:
        """The buffers' pages by reference (``iov``, zero copy), or a ``write`` of each."""
        progress = self._progress
        if between is not None:
            def progress(k: int) -> None:
                self._progress(k)
                between()
        self._writing_since = time.monotonic()
        try:
            if iov is not None:
                pipe_splice.splice_all(self._fd, iov, progress)
            else:
                for b in buffers:
                    view = memoryview(b)
                    while len(view):
                        k = os.write(self._fd, view)
                        if k <= 0:  # a short write goes on with the rest; one that wrote nothing fails loudly
                            raise OSError(errno.EIO, "a write into ffmpeg's pipe wrote nothing")
                        view = view[k:]
                        progress(k)
        except OSError as exc:
            self.proc.wait(FFMPEG_EXIT_GRACE_S)
            self._drainer.join(STDERR_TAIL_GRACE_S)
            reason = self.killed_reason or f"ffmpeg stopped taking frames ({exc.strerror or exc})"
            raise FfmpegError(self.describe(reason)) from None
        finally:
            self._writing_since = None

    def _progress(self, k: int) -> None:
        """ffmpeg took ``k`` more bytes: the watchdog's clock restarts."""
        self.sent += k
        self._writing_since = time.monotonic()

    def consumed(self) -> int:
        """Bytes of its input ffmpeg has read so far (what it had not read stays in the pipe)."""
        if self._stdin.closed:  # ffmpeg is finishing or gone: it reads nothing more from the ring
            return self.sent
        try:
            return self.sent - pipe_splice.unread_bytes(self._fd)
        except OSError:
            return self.sent

    def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> int:
        """Close stdin and wait for ffmpeg to exit (killing it after ``timeout_s``); its exit code."""
        with contextlib.suppress(OSError):
            self._stdin.close()
        if wait_for_exit(self.proc, timeout_s) is None:
            self.kill(f"ffmpeg did not finish within {timeout_s:.0f} s of its input ending")
        self._close(STDERR_FINISH_GRACE_S)
        return self.proc.returncode

    def renice(self, nice: int) -> None:
        """Run at niceness ``nice`` from now on, every thread; only ever raised (lowering it takes a privilege)."""
        if nice > self.nice:
            set_nice(self.pid, nice)
            self.nice = nice

    def dismiss(self) -> None:
        """Kill an ffmpeg that was given no frame (it has written nothing) and free what it held."""
        self.kill("not needed")
        with contextlib.suppress(OSError):
            self._stdin.close()
        self._close(STDERR_TAIL_GRACE_S)

    def _close(self, stderr_grace_s: float) -> None:
        """ffmpeg is gone: stop the watchdog, read the last of its stderr, free its output's descriptor."""
        self._done.set()
        self._drainer.join(stderr_grace_s)
        self._stderr.close()
        self.output.close()

    def kill(self, reason: str) -> None:
        self.killed_reason = reason
        self._done.set()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(FFMPEG_EXIT_GRACE_S)
