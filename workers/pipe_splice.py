"""Handing ffmpeg a frame's pages instead of a copy of them, and knowing when it has read them.

A ``write`` into ffmpeg's stdin copies the frame from the ring into the
pipe; ffmpeg then copies it out again. ``vmsplice(2)`` puts references to
the ring's own pages into the pipe instead: the worker's copy is gone, and
ffmpeg's read copies straight from the ring. The price is that the ring may
not reuse those pages until ffmpeg has read them, so the encoder releases a
frame's room only once the pipe's unread byte count (``FIONREAD``) says
ffmpeg has read past it (see ``FrameFeed``). A run of frames goes in with
one call, an iovec per frame (``iovecs``).

Linux only, through libc with ctypes; where vmsplice is missing,
``available()`` is False and frames are written as before.
"""

from __future__ import annotations

import array
import ctypes
import errno
import fcntl
import os
import termios

import numpy as np

__all__ = ["IOVEC", "IOV_MAX", "advance", "available", "iovecs", "splice_some", "unread_bytes"]


IOVEC = np.dtype([("base", np.uintp), ("len", np.uintp)])  # struct iovec
IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers per vmsplice or writev (1024 on Linux)


def _load_vmsplice():
    try:
        fn = ctypes.CDLL(None, use_errno=True).vmsplice
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_uint)
    fn.restype = ctypes.c_ssize_t
    return fn


_vmsplice = _load_vmsplice()


def available() -> bool:
    """Whether this system has vmsplice (Linux's libc does)."""
    return _vmsplice is not None


def iovecs(rows: np.ndarray) -> np.ndarray:
    """One ``IOVEC`` per row of ``rows``, a 2-D uint8 array over mapped memory whose rows are each
    contiguous (frames in the ring, one record apart)."""
    iov = np.empty(len(rows), IOVEC)
    iov["base"] = rows.ctypes.data + np.arange(len(rows), dtype=np.uintp) * rows.strides[0]
    iov["len"] = rows.shape[1]
    return iov


def splice_some(fd: int, iov: np.ndarray, start: int) -> int:
    """One vmsplice of ``iov[start:]`` into the pipe ``fd``: the bytes it took (it waits while the pipe
    is full; 0 when a signal interrupted it). Then ``advance``.

    The memory must stay mapped and unchanged until the reader has read it.
    OSError as ``write`` would raise it (EPIPE once the reader is gone).
    """
    assert _vmsplice is not None  # callers check available()
    count = min(len(iov) - start, IOV_MAX)
    k = _vmsplice(fd, iov.ctypes.data + start * IOVEC.itemsize, count, 0)  # ctypes lets other threads run meanwhile
    if k < 0:
        err = ctypes.get_errno()
        if err == errno.EINTR:
            return 0
        raise OSError(err, os.strerror(err))
    return k


def advance(iov: np.ndarray, start: int, done: int) -> int:
    """After ``done`` bytes from ``iov[start:]`` went into the pipe: the first iovec not wholly sent (its
    base and length moved past what was)."""
    while done and start < len(iov):
        n = int(iov[start]["len"])
        if done < n:
            iov[start]["base"] += done
            iov[start]["len"] = n - done
            break
        done -= n
        start += 1
    return start


def unread_bytes(fd: int) -> int:
    """Bytes in the pipe ``fd`` (either end) that its reader has not read yet."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    return buf[0]
