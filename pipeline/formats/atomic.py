"""Files a reader may see are replaced atomically, or not at all.

The recipe: write a temporary file in the same folder, flush, fsync,
``os.replace`` it over the final name, then fsync the folder so the rename
itself survives a power cut. Temporary files are named ``.<final>.<pid>.tmp``
so that a later run can recognise and remove what a crash left behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Collection
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ownfolder import OwnFolder

try:  # ISA-L's CRC-32: the same values as zlib's, ~4x as fast (measured: 7 vs 1.8 GB/s)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - a platform without an isal wheel
    from zlib import crc32

__all__ = ["TMP_SUFFIX", "commit_file", "discard_file", "file_crc32", "fsync_dir", "open_new", "process_alive", "remove_stale_tmp", "stream_crc32", "tmp_path_for", "write_atomic"]

TMP_SUFFIX = ".tmp"


def tmp_path_for(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{os.getpid()}{TMP_SUFFIX}")


def fsync_dir(folder: str) -> None:
    fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_file(f: IO[Any], tmp: str, final: str, *, sync_dir: bool = True) -> None:
    """Flush and fsync the open temporary file ``f``, close it and move it to ``final``."""
    f.flush()
    os.fsync(f.fileno())
    f.close()
    os.replace(tmp, final)
    if sync_dir:
        fsync_dir(os.path.dirname(final))


def discard_file(f, path: str) -> None:
    """Close ``f`` and remove ``path``, whatever state either is in (for temporary files given up on)."""
    with contextlib.suppress(OSError):
        f.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def open_new(path: str, mode: str = "wb", buffering: int = -1) -> IO[Any]:
    """Create and open this process's temporary file ``path`` (``"wb"`` or ``"w+b"``): whatever is planted at its
    name (a symlink, a file of a dead process of the same pid) is removed first, and the file is created with
    ``O_EXCL|O_NOFOLLOW``, so nothing is ever written through a link."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(path)
    access = os.O_RDWR if "+" in mode else os.O_WRONLY
    fd = os.open(path, access | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        return open(fd, mode, buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring)."""
    tmp = tmp_path_for(path)
    f = open_new(tmp)
    try:
        f.write(data)
        commit_file(f, tmp, path)
    except BaseException:
        discard_file(f, tmp)
        raise


def file_crc32(path: str, chunk_bytes: int = 1 << 20) -> int:
    """CRC-32 of a file's bytes (zlib's polynomial), read in chunks into one reused buffer."""
    with open(path, "rb", buffering=0) as f:
        return stream_crc32(f, chunk_bytes)


def stream_crc32(f: IO[bytes], chunk_bytes: int = 1 << 20) -> int:
    """CRC-32 of what is left to read of the open file ``f`` (see ``file_crc32``)."""
    crc = 0
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    while n := f.readinto(buf):  # type: ignore[attr-defined]  # a binary file
        crc = crc32(view[:n], crc)
    return crc


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a zombie, dead but not yet reaped, does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.Error:
        return True  # there, but not ours to look at: alive


def remove_stale_tmp(folder: str, prefix: str = "", finished: Collection[int] = (),
                     finals: Collection[str] | None = None, own: OwnFolder | None = None) -> list[str]:
    """Remove temporary files of ours whose writing process is gone (or in ``finished``: known to write no
    more, e.g. a failed worker still exiting); return their names.

    Only files of our own making go: named ``.<prefix>...<pid>.tmp`` (with ``finals``, the final name must
    end with one of them), a regular file (not a symlink, a FIFO or a folder) owned by this user; anything
    else is left alone. Removed relative to the folder opened once (``OwnFolder``): ``own``, the recorder's
    (left open; ``folder`` is then not opened again), or ``folder`` opened for this call.
    """
    from .ownfolder import OwnFolder

    removed: list[str] = []
    if own is None:
        try:
            opened = OwnFolder(folder)
        except OSError:
            return removed
    with opened if own is None else contextlib.nullcontext(own) as at:
        for name in at.listdir():
            if not (name.startswith(f".{prefix}." if prefix else ".") and name.endswith(TMP_SUFFIX)):
                continue
            final, _, pid_text = name[1 : -len(TMP_SUFFIX)].rpartition(".")
            if not final or not pid_text.isdigit() or (finals is not None and not final.endswith(tuple(finals))):
                continue
            pid = int(pid_text)
            if pid not in finished and (pid == os.getpid() or process_alive(pid)):  # ours, or a live writer's
                continue
            try:
                st = at.lstat(name)
                if st is None or not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    continue
                if at.unlink(name):
                    removed.append(name)
            except OSError:
                pass
    return removed
