"""A spill: where one field of the open episode waits until the episode is written into its batch.

Fields other than the largest arrive interleaved with it, step by step, and
must end up contiguous in the batch, so each waits in a spill of its own.
Most episodes' spills are small (CartPole's actions: 8 bytes a step), so a
spill keeps its tail in memory and goes to its file only when the tail
grows past ``MEMORY_BYTES`` or a checkpoint needs it on disk (``flush``): an
episode that fits is appended to the batch from memory, with no system call
of its own, and a spill is rewound for the next episode by forgetting, not
truncating. Whatever a checkpoint covers is in the file (``tell()`` bytes
of it after ``flush``), which is what a successor resumes from.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from envrec.formats.fullwrite import pwrite_all, write_all
from envrec.formats.ownfolder import OwnFolder

__all__ = ["MEMORY_BYTES", "Spill", "append_file"]

MEMORY_BYTES = 64 << 10  # the tail kept in memory; each spill's buffer is reused by every episode
COPY_CHUNK_BYTES = 1 << 20


def append_file(src_fd: int, dst_fd: int, n: int) -> None:
    """Append ``n`` bytes from the start of ``src_fd`` at ``dst_fd``'s offset (a kernel-side copy)."""
    done = 0
    try:
        while done < n:
            k = os.copy_file_range(src_fd, dst_fd, n - done, done)
            if k == 0:
                raise OSError(f"copy_file_range stopped after {done} of {n} bytes")
            done += k
        return
    except OSError as exc:
        if done or exc.errno not in (18, 22, 38, 95):  # EXDEV, EINVAL, ENOSYS, EOPNOTSUPP: fall back
            raise
    while done < n:
        chunk = os.pread(src_fd, min(COPY_CHUNK_BYTES, n - done), done)
        if not chunk:
            raise OSError(f"spill file ended after {done} of {n} bytes")
        write_all(dst_fd, chunk)
        done += len(chunk)


class Spill:
    """One field's data for the open episode: a temporary file plus its tail in memory.

    Args:
        path: the spill file (created, or emptied).
        own: the recording's folder opened once, which ``path`` is in: the file is created and a predecessor's
            read relative to it, by one of the recording's own names (``envrec.formats.ownfolder``).
    """

    def __init__(self, path: str, own: OwnFolder | None = None) -> None:
        self.path = path
        self._own = own
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
        if own is not None:
            self._fd = own.open_fd(own.name_of(path), flags, 0o666)  # never through a link, a regular file only
        else:  # a spill of its own (tools, tests): its folder opened for this one file
            with OwnFolder(os.path.dirname(path) or ".") as folder:
                self._fd = folder.open_fd(os.path.basename(path), flags, 0o666)
        self._tail = bytearray()
        self._in_file = 0  # bytes of the content that are in the file (the tail follows them)

    def fileno(self) -> int:
        return self._fd

    def write(self, data) -> None:
        """Append bytes (or any contiguous buffer)."""
        self._tail += memoryview(data)  # not the object itself: a numpy array would take over the +=
        if len(self._tail) >= MEMORY_BYTES:
            self.flush()

    def flush(self) -> None:
        """Put the tail into the file."""
        if self._tail:
            pwrite_all(self._fd, self._tail, self._in_file)
            self._in_file += len(self._tail)
        self._tail.clear()

    def take_over(self, path: str, size: int) -> None:
        """Hold the first ``size`` bytes of the spill file at ``path`` (a dead predecessor's, as its last
        checkpoint counted them) and nothing else; OSError if that file is shorter."""
        self.rewind()
        os.lseek(self._fd, 0, os.SEEK_SET)
        with open(path, "rb") if self._own is None else self._own.open_read(self._own.name_of(path)) as src:
            append_file(src.fileno(), self._fd, size)
        self._in_file = size

    def tell(self) -> int:
        """Bytes of content."""
        return self._in_file + len(self._tail)

    def rewind(self) -> None:
        """Empty, for the next episode (the file's old bytes are simply written over)."""
        self._in_file = 0
        self._tail.clear()

    def read_all(self) -> bytes:
        """The whole content."""
        head = os.pread(self._fd, self._in_file, 0) if self._in_file else b""
        if len(head) != self._in_file:
            raise OSError(f"spill file {self.path} holds {len(head)} of its {self._in_file} bytes")
        return head + self._tail

    def read_range(self, start: int, n: int) -> bytes:
        """``n`` bytes of the content from ``start`` on (from the file, the tail or both)."""
        end = start + n
        head = b""
        if start < self._in_file:
            k = min(end, self._in_file) - start
            head = os.pread(self._fd, k, start)
            if len(head) != k:
                raise OSError(f"spill file {self.path} holds {len(head)} of the {k} bytes asked at {start}")
        return head + bytes(self._tail[max(0, start - self._in_file) : max(0, end - self._in_file)])

    def pieces(self) -> Iterator[bytes]:
        """The whole content in pieces of at most ``COPY_CHUNK_BYTES`` from the file, then the tail."""
        done = 0
        while done < self._in_file:
            piece = os.pread(self._fd, min(COPY_CHUNK_BYTES, self._in_file - done), done)
            if not piece:
                raise OSError(f"spill file {self.path} ended after {done} of its {self._in_file} bytes")
            done += len(piece)
            yield piece
        yield bytes(self._tail)

    def append_to(self, dst) -> int:
        """Append the content at the end of ``dst`` (a buffered file); how many bytes."""
        if self._in_file:
            dst.flush()
            append_file(self._fd, dst.fileno(), self._in_file)
            dst.seek(0, os.SEEK_END)
        dst.write(self._tail)
        return self.tell()

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)
