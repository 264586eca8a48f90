"""Opening a file that a folder's own documents name, inside that folder only.

A manifest names batch files and segments, a batch names the ``.bin`` its
arrays live in, a clip's metadata names its video, and the viewer's
``/files/`` URLs name clips: all of them come from a folder someone else may
have written. ``open_inside`` is the one way the reader, the exporters and
the viewer open such a file:

* the name must be relative, made of ``/``-separated parts none of which is
  empty, ``.`` or ``..``, with no backslash or NUL;
* each part is opened relative to the previous one (``openat``) with
  ``O_NOFOLLOW``: a symlink anywhere below the folder is refused, so is a
  folder swapped for a symlink while the name is walked (no race between a
  check and the open);
* what is opened must be a regular file (not a FIFO, a device, a folder).

The folder itself may be a symlink: it is the user's choice, not the folder's.
A missing file raises ``FileNotFoundError`` (callers say what is missing); every
other refusal raises ``TraceError`` naming the document and field at fault.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import BinaryIO

from ..errors import TraceError

__all__ = ["MAX_PREFIX_CHARS", "name_parts", "open_inside", "safe_prefix"]

_SAFE_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_PREFIX_CHARS = 200

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PART_FLAGS = _DIR_FLAGS | os.O_NOFOLLOW
# O_NONBLOCK: opening a FIFO for reading must not wait for a writer (it is refused right after, by fstat)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def name_parts(name: object, what: str) -> list[str]:
    """The parts of a relative file name, or ``TraceError`` when it could leave the folder.

    Args:
        name: the name as a document gives it (any JSON value).
        what: the document and field that gave it, for the message (``"x.manifest.json: batches[3].fn"``).
    """
    if not isinstance(name, str) or not name:
        raise TraceError(f"{what}: {name!r} is not a file name")
    if name.startswith("/") or "\\" in name or "\0" in name:
        raise TraceError(f"{what}: {name!r} is not a name inside the folder (absolute, backslash or NUL)")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise TraceError(f"{what}: {name!r} is not a name inside the folder (an empty, '.' or '..' part)")
    return parts


def open_inside(folder: str, name: object, what: str) -> BinaryIO:
    """``name`` opened for reading (binary), refusing anything outside ``folder``.

    Args:
        folder: the folder the document lies in.
        name: the relative name the document gives (checked by ``name_parts``).
        what: the document and field that gave it, for messages.

    Raises:
        FileNotFoundError: no such file.
        TraceError: the name leaves the folder, goes through a symlink, or is not a regular file.
    """
    parts = name_parts(name, what)
    try:
        dir_fd = os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        raise TraceError(f"{what}: cannot open the folder {folder}: {exc.strerror}") from exc
    try:
        for part in parts[:-1]:
            sub = os.open(part, _PART_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = sub
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise TraceError(f"{what}: {name!r} goes through a symlink or a non-folder: only files inside the folder are read") from None
        raise TraceError(f"{what}: cannot open {name!r}: {exc.strerror}") from exc
    finally:
        os.close(dir_fd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise TraceError(f"{what}: {name!r} is not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def safe_prefix(prefix: str) -> bool:
    """``prefix`` is a file prefix envrec would write (``trace_format.check_prefix``): every name built from it
    stays inside the folder."""
    return bool(_SAFE_PREFIX.match(prefix)) and ".." not in prefix and len(prefix) <= MAX_PREFIX_CHARS
