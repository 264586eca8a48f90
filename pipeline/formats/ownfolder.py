"""Touch only what you wrote: every write and unlink in a recording folder, relative to the folder opened once.

A recording folder may be shared with the user's own files, or come from
elsewhere (``envrec render`` writes into ``videos/`` of a recording anyone
may have made). A path walked again at each write can be changed between two
writes: a subfolder swapped for a symlink after it was checked sends the next
write elsewhere. ``OwnFolder`` opens the folder once and does everything
relative to that descriptor (``openat``, ``unlinkat``, ``renameat``, the
folder's ``fsync``):

* a name must be plain (no ``/``, not ``.`` or ``..``, no NUL) and pass the
  owner's test of its own naming (``owns``); anything else is a
  ``RecordError``, never followed;
* files are created with ``O_NOFOLLOW`` (and ``O_EXCL`` for temporary files):
  a symlink planted at a name is refused, not written through;
* ``identity`` (the folder's device and inode) lets another process that
  opens the same path check it opened the same folder (``expect=``): a
  folder swapped since is an error, nothing is written into the new one.

The folder path itself may be a symlink when it is opened (the user's
choice), unless ``follow=False``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from typing import IO, Any, Self

from ..errors import RecordError

__all__ = ["FolderChanged", "OwnFolder", "folder_identity", "plain_name"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FLAGS = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class FolderChanged(RecordError):
    """The folder at a path is no longer the one opened (swapped for another folder or a symlink)."""


def plain_name(name: object) -> bool:
    """Whether ``name`` is a plain file name of a folder: no ``/``, not ``.`` or ``..``, no NUL, not empty."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def folder_identity(path: str) -> tuple[int, int]:
    """The ``identity`` of the folder at ``path`` (followed if a symlink), for another process's ``expect=``."""
    with OwnFolder(path) as own:
        return own.identity


def _untmp(name: str) -> str:
    """The final name a temporary ``.NAME.PID.tmp`` stands for (``name`` itself when it is not one)."""
    if name.startswith(".") and name.endswith(".tmp"):
        inner, _, pid = name[1:-4].rpartition(".")
        if inner and pid.isdigit():
            return inner
    return name


class OwnFolder:
    """A folder opened once; the files of its owner's naming written, moved and removed relative to it.

    Args:
        path: the folder.
        owns: the owner's test of its own names (``prefix``-based, a clip's names); plain names only when None.
        follow: whether ``path`` may itself be a symlink (False: refused, ``O_NOFOLLOW``).
        expect: ``(st_dev, st_ino)`` the folder must have (another process's ``identity``); FolderChanged if not.
        create: make the folder (and its parents) first when it is missing.

    Raises:
        FolderChanged: ``expect`` given and another folder (or a symlink, with ``follow=False``) is at ``path``.
        OSError: the folder cannot be opened.
    """

    def __init__(self, path: str, owns: Callable[[str], bool] | None = None, *, follow: bool = True,
                 expect: tuple[int, int] | None = None, create: bool = False) -> None:
        self.path = path
        self.owns = owns
        if create:
            os.makedirs(path, exist_ok=True)
        try:
            self.fd = os.open(path, _DIR_FLAGS | (0 if follow else os.O_NOFOLLOW))
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and not follow:
                raise FolderChanged(f"{path} is a symbolic link or not a folder: it is not followed") from None
            raise
        st = os.fstat(self.fd)
        self.identity = (st.st_dev, st.st_ino)
        if expect is not None and tuple(expect) != self.identity:
            os.close(self.fd)
            raise FolderChanged(f"{path} is no longer the folder the recorder opened (swapped for another folder "
                                "or a symbolic link): nothing is written into it")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def name(self, name: str) -> str:
        """``name``, checked: plain and of the owner's naming; RecordError otherwise (never followed)."""
        if not plain_name(name) or (self.owns is not None and not self.owns(_untmp(name))):
            raise RecordError(f"{name!r} is not a file this recorder writes in {self.path}: it is left alone")
        return name

    def name_of(self, path: str) -> str:
        """The name of ``path``, a file of this folder given by its path (``os.path.join(path_of_folder, name)``,
        as a checkpoint records it), checked as ``name``; RecordError for a path in any other folder."""
        folder, name = os.path.split(path)
        if folder not in ("", self.path):
            raise RecordError(f"{path!r} is not in {self.path}: it is left alone")
        return self.name(name)

    def proc_path(self, name: str) -> str:
        """A path to ``name`` through this folder's descriptor, for a child process given ``pass_fds=(fd,)``
        (ffmpeg): it names the opened folder, whatever is at ``path`` by then."""
        return f"/proc/self/fd/{self.fd}/{self.name(name)}"

    def lstat(self, name: str) -> os.stat_result | None:
        """``name``'s own status (a symlink's, not its target's); None when missing."""
        try:
            return os.stat(self.name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def is_regular(self, name: str) -> bool:
        st = self.lstat(name)
        return st is not None and stat.S_ISREG(st.st_mode)

    def listdir(self) -> list[str]:
        return os.listdir(self.fd)

    def open_new(self, name: str, mode: str = "wb", buffering: int = -1) -> IO[Any]:
        """Create ``name`` (it must not exist: ``O_EXCL|O_NOFOLLOW``) and open it (``"wb"``, ``"w+b"``, ``"w"``)."""
        access = os.O_RDWR if "+" in mode else os.O_WRONLY
        fd = os.open(self.name(name), access | _NEW_FLAGS, 0o644, dir_fd=self.fd)
        try:
            return open(fd, mode, buffering=buffering, encoding=None if "b" in mode else "utf-8")
        except BaseException:
            os.close(fd)
            raise

    def open_fd(self, name: str, flags: int, mode: int = 0o644) -> int:
        """A raw descriptor of ``name`` opened with ``flags`` (``O_NOFOLLOW|O_CLOEXEC`` added: a symlink at the
        name is refused) relative to the folder; one that is not a regular file is refused too."""
        fd = os.open(self.name(name), flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=self.fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RecordError(f"{name} in {self.path} is not a regular file: it is not written")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_existing(self, name: str, mode: str = "r+b", buffering: int = -1) -> IO[bytes]:
        """``name``, a regular file already there, opened for reading and writing (not through a symlink)."""
        fd = self.open_fd(name, os.O_RDWR)
        try:
            return open(fd, mode, buffering=buffering)
        except BaseException:
            os.close(fd)
            raise

    def open_read(self, name: str) -> IO[bytes]:
        """``name`` opened for reading, a regular file only (not through a symlink, not a FIFO)."""
        fd = os.open(self.name(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=self.fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RecordError(f"{name} in {self.path} is not a regular file")
        os.set_blocking(fd, True)
        return open(fd, "rb")

    def replace(self, src: str, dst: str) -> None:
        """Move ``src`` over ``dst`` (a symlink at ``dst`` is replaced, never followed)."""
        os.replace(self.name(src), self.name(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> bool:
        """Remove ``name`` (a symlink itself, never its target); False when it was missing."""
        try:
            os.unlink(self.name(name), dir_fd=self.fd)
            return True
        except FileNotFoundError:
            return False

    def fsync(self) -> None:
        os.fsync(self.fd)

    def tmp_name(self, name: str) -> str:
        """The temporary name of ``name`` written by this process: ``.NAME.PID.tmp`` (see ``atomic``)."""
        return f".{name}.{os.getpid()}.tmp"

    def commit(self, f: IO[Any], tmp: str, final: str, *, sync_dir: bool = True) -> None:
        """Flush and fsync the open temporary ``f``, close it and move ``tmp`` over ``final``."""
        f.flush()
        os.fsync(f.fileno())
        f.close()
        self.replace(tmp, final)
        if sync_dir:
            self.fsync()

    def discard(self, f: IO[Any] | None, tmp: str) -> None:
        """Close ``f`` and remove ``tmp``, whatever state either is in (a temporary file given up on)."""
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
        with contextlib.suppress(OSError):
            self.unlink(tmp)

    def write_atomic(self, name: str, data: bytes) -> None:
        """Replace ``name`` with ``data`` atomically: a temporary file, fsynced, moved over it, the folder fsynced."""
        tmp = self.tmp_name(name)
        with contextlib.suppress(FileNotFoundError):
            self.unlink(tmp)  # a file of this pid's name left by an earlier process of the same pid
        f = self.open_new(tmp)
        try:
            f.write(data)
            self.commit(f, tmp, name)
        except BaseException:
            self.discard(f, tmp)
            raise
