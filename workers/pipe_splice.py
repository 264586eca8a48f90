"""Handing ffmpeg a frame's pages instead of a copy of them, and knowing when it has read them.

A ``write`` into ffmpeg's stdin copies the frame from the ring into the
pipe; ffmpeg then copies it out again. ``vmsplice(2)`` puts references to
the ring's own pages into the pipe instead: the worker's copy is gone, and
ffmpeg's read copies straight from the ring. The price is that the ring may
not reuse those pages until ffmpeg has read them, so the encoder releases a
frame's room only once the pipe's unread byte count (``FIONREAD``) says
ffmpeg has read past it (see ``FrameFeed``). A run of frames is handed over
by one call of ``splice_all`` (``iovecs``).

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
from collections.abc import Callable

import numpy as np

__all__ = ["available", "iovec_of", "iovecs", "splice_all", "unread_bytes"]


class _IoVec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_size_t), ("iov_len", ctypes.c_size_t))  # an address as an integer: numpy can view it




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


_OneIoVec = _IoVec * 1


def iovec_of(view: memoryview):
    """The iovec of one writable buffer (a frame in the ring), for ``splice_all``."""
    iov = _OneIoVec()
    iov[0].iov_base = ctypes.addressof(ctypes.c_char.from_buffer(view))
    iov[0].iov_len = view.nbytes
    return iov


def iovecs(rows: np.ndarray):
    """An iovec per row of ``rows``, a 2-D uint8 array over mapped memory whose rows are each contiguous
    (frames in the ring, one record apart), for ``splice_all``."""
    iov = (_IoVec * len(rows))()
    table = np.ctypeslib.as_array(iov)  # numpy's view of the same structs
    table["iov_base"] = rows.ctypes.data + np.arange(len(rows), dtype=np.uintp) * rows.strides[0]
    table["iov_len"] = rows.shape[1]
    return iov


def splice_all(fd: int, iov, on_progress: Callable[[int], None]) -> None:
    """Put every buffer of ``iov`` (``iovec_of``, ``iovecs``) into the pipe ``fd`` by reference, in order,
    waiting while the pipe is full; ``on_progress(bytes)`` after each call. ``iov`` is used up.

    One buffer per call: several frames per call measured no cheaper at 210x160 and costlier at 600x400
    (what a run saves is the worker loop's work per record, not system calls).

    The memory must stay mapped and unchanged until the reader has read it.
    OSError as ``write`` would raise it (EPIPE once the reader is gone).
    """
    assert _vmsplice is not None  # callers check available()
    address, size, i, n = ctypes.addressof(iov), ctypes.sizeof(_IoVec), 0, len(iov)
    while i < n:
        k = _vmsplice(fd, address + i * size, 1, 0)  # ctypes lets other threads run meanwhile
        if k < 0:
            err = ctypes.get_errno()
            if err == errno.EINTR:
                continue
            raise OSError(err, os.strerror(err))
        if k == 0:  # a short one goes on with the rest; one that moved nothing fails loudly
            raise OSError(errno.EIO, "vmsplice into ffmpeg's pipe moved nothing")
        on_progress(k)
        v = iov[i]  # ctypes fields: numpy's scalar arithmetic cost 5-30 µs a call here
        if k < v.iov_len:
            v.iov_base += k
            v.iov_len -= k
        else:
            i += 1


def unread_bytes(fd: int) -> int:
    """Bytes in the pipe ``fd`` (either end) that its reader has not read yet."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    return buf[0]
