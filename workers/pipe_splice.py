"""Handing ffmpeg a frame's pages instead of a copy of them, and knowing when it has read them.

A ``write`` into ffmpeg's stdin copies the frame from the ring into the
pipe; ffmpeg then copies it out again. ``vmsplice(2)`` puts references to
the ring's own pages into the pipe instead: the worker's copy is gone, and
ffmpeg's read copies straight from the ring. The price is that the ring may
not reuse those pages until ffmpeg has read them, so the encoder releases a
frame's room only once the pipe's unread byte count (``FIONREAD``) says
ffmpeg has read past it (see ``Encoder.release_point``).

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

__all__ = ["available", "splice_pages", "unread_bytes"]


class _IoVec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t))


def _load_vmsplice():
    try:
        fn = ctypes.CDLL(None, use_errno=True).vmsplice
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_uint)
    fn.restype = ctypes.c_ssize_t
    return fn


_vmsplice = _load_vmsplice()


def available() -> bool:
    """Whether this system has vmsplice (Linux's libc does)."""
    return _vmsplice is not None


def splice_pages(fd: int, view: memoryview) -> None:
    """Put all of ``view``'s bytes into the pipe ``fd`` by reference, waiting while the pipe is full.

    ``view`` must be writable memory (the ring's) that stays mapped and
    unchanged until the reader has read it. OSError as ``write`` would raise
    it (EPIPE once the reader is gone).
    """
    n = len(view)
    if not n or _vmsplice is None:
        return
    address = ctypes.addressof(ctypes.c_char.from_buffer(view))  # the export ends with this line
    iov = _IoVec()
    done = 0
    while done < n:
        iov.iov_base, iov.iov_len = address + done, n - done
        k = _vmsplice(fd, ctypes.byref(iov), 1, 0)  # ctypes lets other threads run while it waits
        if k < 0:
            err = ctypes.get_errno()
            if err == errno.EINTR:
                continue
            raise OSError(err, os.strerror(err))
        done += k


def unread_bytes(fd: int) -> int:
    """Bytes in the pipe ``fd`` (either end) that its reader has not read yet."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    return buf[0]
