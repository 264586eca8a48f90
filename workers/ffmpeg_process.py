"""One ffmpeg process, from start to exit, as the encoder worker runs it.

* ffmpeg runs in its own process group, so a Ctrl-C in the terminal does not
  reach it: the encoder decides when a clip ends.
* A thread drains its stderr continuously (a full stderr pipe would stall
  it) and keeps the last lines for error messages.
* Frames are written to a non-blocking stdin; a pipe that takes nothing for
  ``WRITE_STALL_S`` means ffmpeg hangs: it is killed and the clip is broken,
  so the env process is never blocked by it for longer.
* ``finish`` closes stdin, waits up to a timeout, then kills — and says so.
"""

from __future__ import annotations

import collections
import fcntl
import os
import select
import subprocess
import threading
import time

from envrec.procinfo import signal_name

__all__ = ["FfmpegError", "FfmpegProcess", "WRITE_STALL_S"]

WRITE_STALL_S = 10.0  # ffmpeg taking no input this long is considered hung
FINISH_TIMEOUT_S = 30.0  # how long a clip's last frames may take to encode after stdin closes
STDERR_TAIL_LINES = 20
PIPE_BYTES = 1 << 20  # Linux's default cap for an unprivileged pipe size (/proc/sys/fs/pipe-max-size)


class FfmpegError(Exception):
    """ffmpeg died, hung or refused its input; the message says how and quotes its stderr."""


class FfmpegProcess:
    def __init__(self, cmd: list[str], nice: int = 0) -> None:
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            process_group=0,
            close_fds=True,
        )
        self.pid = self.proc.pid
        if nice:
            try:  # threads ffmpeg starts from now on inherit it
                os.setpriority(os.PRIO_PROCESS, self.pid, nice)
            except OSError:
                pass
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._drainer = threading.Thread(target=self._drain, name="envrec-ffmpeg-stderr", daemon=True)
        self._drainer.start()
        self._fd = self.proc.stdin.fileno()
        os.set_blocking(self._fd, False)
        try:  # a whole frame per write instead of 16 wake-ups of 64 KiB
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        self.killed_reason: str | None = None

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.tail.append(line.decode("utf-8", "replace").rstrip())

    def describe(self, what: str) -> str:
        rc = self.proc.poll()
        status = "" if rc is None else f" ({signal_name(rc)})"
        return f"{what}{status}" + (f"; ffmpeg said: {' | '.join(self.tail)}" if self.tail else "")

    def write(self, data) -> None:
        """Write all of ``data`` to ffmpeg's stdin; FfmpegError if it died or hangs."""
        view = memoryview(data)
        stalled_since = None
        while len(view):
            try:
                n = os.write(self._fd, view)
            except BlockingIOError:
                n = 0
            except (BrokenPipeError, OSError) as exc:
                self.proc.wait(5)
                self._drainer.join(1)
                raise FfmpegError(self.describe(f"ffmpeg stopped taking frames ({exc.strerror or exc})")) from None
            if n:
                view = view[n:]
                stalled_since = None
                continue
            now = time.monotonic()
            stalled_since = stalled_since or now
            if now - stalled_since > WRITE_STALL_S:
                self.kill(f"ffmpeg took no input for {WRITE_STALL_S:.0f} s")
                raise FfmpegError(self.describe(self.killed_reason))
            select.select([], [self._fd], [], 0.1)

    def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> int:
        """Close stdin and wait for ffmpeg to exit (killing it after ``timeout_s``); its exit code."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(f"ffmpeg did not finish within {timeout_s:.0f} s of its input ending")
        self._drainer.join(2)
        self.proc.stderr.close()
        return self.proc.returncode

    def kill(self, reason: str) -> None:
        self.killed_reason = reason
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait(5)
