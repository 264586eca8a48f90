"""Shared-memory segments: create (env side), attach (worker side), sweep.

Rules (DESIGN.md): the env process creates every segment and alone unlinks
it while it lives; once it is dead, the worker that drained the segment
removes it on its way out, and ``sweep_orphans`` removes whatever a crash
left behind. No ``multiprocessing`` here: no resource tracker process, no
adopted segments (python/cpython#82300). Workers map the segment through a
descriptor they inherit (``map_segment``), never by name, so a worker can
map it even if its owner died, and the name was removed, before it started.

Names are ``envrec_<pid>_<hex>``: short (POSIX allows little on some
systems), recognisable, and carrying the owner's pid so that ``sweep()`` can
remove what a crashed run left behind.
"""

from __future__ import annotations

import logging
import mmap
import os
import secrets

import psutil

from .errors import SharedMemoryError

__all__ = ["SEGMENT_PREFIX", "Segment", "create_segment", "list_segments", "map_segment", "sweep_orphans", "unlink_segment"]

logger = logging.getLogger(__name__)

SEGMENT_PREFIX = "envrec_"
SHM_DIR = "/dev/shm"  # where Linux keeps POSIX shared memory; used for free-space checks and sweeps


def _new_name() -> str:
    return f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def shm_free_bytes() -> int | None:
    """Bytes free in /dev/shm, or None where there is no such folder."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class Segment:
    """A POSIX shared-memory segment this process created and owns: ``name``, ``fd``, ``buf``.

    Not ``multiprocessing.shared_memory.SharedMemory``: that registers every
    segment with the resource tracker, a helper process started with
    ``sys.executable`` (which is not Python in an embedded interpreter), and
    warns about "leaked" segments after a crash that envrec's workers and
    ``sweep_orphans`` clean up themselves.
    """

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.fd = os.open(os.path.join(SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            # Reserve the pages now: tmpfs allocates lazily, and a page it cannot
            # allocate later kills the process with SIGBUS instead of raising.
            os.posix_fallocate(self.fd, 0, size)
            self._map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            os.unlink(os.path.join(SHM_DIR, name))
            raise
        self.buf: memoryview | None = memoryview(self._map)

    def close(self) -> None:
        """Stop using the segment here (every view of ``buf`` must be released first)."""
        if self.buf is not None:
            self.buf.release()
            self.buf = None
            self._map.close()
            os.close(self.fd)

    def unlink(self) -> None:
        """Remove the name (the owner's job, once); mappings elsewhere stay valid."""
        os.unlink(os.path.join(SHM_DIR, self.name))


def create_segment(size: int) -> Segment:
    """Create a segment of ``size`` bytes whose pages are reserved up front.

    Fails with ``SharedMemoryError`` naming the size asked and the size free,
    rather than letting a later write fault with SIGBUS on a full tmpfs.
    """
    free = shm_free_bytes()
    if free is not None and size > free:
        raise SharedMemoryError(
            f"cannot create a {_format_bytes(size)} shared-memory segment: {SHM_DIR} has "
            f"{_format_bytes(free)} free. Ask for a smaller ring (ring_bytes=...) or give "
            f"{SHM_DIR} more room (e.g. docker run --shm-size=1g)."
        )
    try:
        return Segment(_new_name(), size)
    except OSError as exc:
        raise SharedMemoryError(
            f"cannot reserve {_format_bytes(size)} in {SHM_DIR} ({exc.strerror}); "
            f"{_format_bytes(shm_free_bytes() or 0)} free. Ask for a smaller ring (ring_bytes=...)."
        ) from exc


def map_segment(fd: int) -> mmap.mmap:
    """Map a segment through an inherited descriptor (a worker's way in: no name, no resource tracker)."""
    return mmap.mmap(fd, 0)


def unlink_segment(name: str) -> bool:
    """Remove a segment whose owner is gone (a worker outliving its env process); False if already gone."""
    try:
        os.unlink(os.path.join(SHM_DIR, name))
    except FileNotFoundError:
        return False
    return True


def list_segments() -> list[str]:
    """Names of every envrec segment present on this machine."""
    try:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(SEGMENT_PREFIX))
    except OSError:
        return []


def _owner_pid(name: str) -> int | None:
    try:
        return int(name[len(SEGMENT_PREFIX):].split("_", 1)[0])
    except ValueError:
        return None


def sweep_orphans() -> list[str]:
    """Unlink envrec segments whose owning process is gone; return their names."""
    swept = []
    for name in list_segments():
        pid = _owner_pid(name)
        if pid is None or psutil.pid_exists(pid):
            continue
        try:
            if not unlink_segment(name):
                continue
        except OSError as exc:
            logger.warning("could not remove orphaned shared-memory segment %s: %s", name, exc)
            continue
        swept.append(name)
    if swept:
        logger.info("removed %d shared-memory segment(s) left by dead processes: %s", len(swept), swept)
    return swept
