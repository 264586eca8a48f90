"""Writes that put every byte down or raise: the one place short writes are handled.

``os.write``, ``os.pwrite`` and ``os.writev`` may return fewer bytes than
they were given (a disk filling up mid-write, a signal, a file-size limit).
Each function here writes the rest with further calls and raises ``OSError``
when a call makes no progress at all (returns 0), so a short write is
either completed or reported, never taken for a whole one.

Buffered files (``open(path, "wb")``) need none of this: ``io.BufferedWriter``
writes the rest of a short write itself (tested in ``tests/test_fullwrite.py``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["IOV_MAX", "pwrite_all", "write_all", "writev_all"]

IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers per writev (1024 on Linux)


def _no_progress(call: str, done: int, total: int) -> OSError:
    return OSError(errno.EIO, f"{call} wrote nothing after {done} of {total} bytes")


def write_all(fd: int, data: Any) -> None:
    """Write all of ``data`` (any contiguous buffer) at ``fd``'s offset."""
    with memoryview(data) as whole, whole.cast("B") as view:  # released at once: ``data`` may be resized next
        total, done = len(view), 0
        while done < total:
            k = os.write(fd, view[done:])
            if k <= 0:
                raise _no_progress("write", done, total)
            done += k


def pwrite_all(fd: int, data: Any, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (the file offset does not move)."""
    with memoryview(data) as whole, whole.cast("B") as view:
        total, done = len(view), 0
        while done < total:
            k = os.pwrite(fd, view[done:], offset + done)
            if k <= 0:
                raise _no_progress("pwrite", done, total)
            done += k


def writev_all(fd: int, buffers: Sequence[Any]) -> None:
    """Write every buffer, in order, with as few ``writev`` calls as the kernel allows."""
    views = [memoryview(b).cast("B") for b in buffers]
    total, done_total = sum(len(v) for v in views), 0
    while views:
        done = os.writev(fd, views[:IOV_MAX])
        if done <= 0 and any(len(v) for v in views[:IOV_MAX]):
            raise _no_progress("writev", done_total, total)
        done_total += done
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if done:
            views[0] = views[0][done:]
