"""The rings' shared memory, memfds: create (env side), map (worker side), list, sweep.

A ring's memory is a ``memfd``: anonymous shared memory with a name for
``/proc/<pid>/fd`` but no file in ``/dev/shm``. Workers map it through the
descriptor they inherit (``map_memfd``). The kernel frees it when the last
process holding it exits or closes it, so no crash can leak one: not an env
process killed with SIGKILL, not its workers killed with it (OOM killer, a
batch scheduler or Ray killing a whole process tree), and ``/dev/shm``'s
size (64 MiB in a default Docker container) does not limit the ring. No
``multiprocessing`` here: no resource tracker process (python/cpython#82300).

Names are ``envrec_<pid>_<hex>``, as the shared-memory files of earlier versions were in
``/dev/shm``; ``sweep_orphans`` still removes any of those a crash left.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Collection, Iterable

from ..errors import SharedMemoryError

__all__ = ["MEMFD_PREFIX", "Memfd", "create_memfd", "format_bytes", "list_memfds", "list_segments", "map_memfd", "sweep_orphans"]

logger = logging.getLogger(__name__)

MEMFD_PREFIX = "envrec_"
SHM_DIR = "/dev/shm"  # where envrec kept rings before memfds: swept for leftovers


def _new_name() -> str:
    return f"{MEMFD_PREFIX}{os.getpid()}_{os.urandom(4).hex()}"


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def memory_available() -> int:
    """Bytes of memory the kernel can give without swapping (what a memfd's pages come from)."""
    import psutil  # where used (here and below): a worker, which only maps rings, starts ~15 ms sooner

    return int(psutil.virtual_memory().available)


class Memfd:
    """A memfd this process created and mapped: ``name``, ``fd``, ``buf``.

    Not ``multiprocessing.shared_memory.SharedMemory``: that registers every
    block with the resource tracker, a helper process started with
    ``sys.executable`` (which is not Python in an embedded interpreter), and
    names it in ``/dev/shm``, where a crash of every process using it leaks it.

    Args:
        name: its name in ``/proc/<pid>/fd``.
        size: its bytes, all mapped.
        reserved: how many of them, from the start, have their pages reserved now (default: all); the rest
            are reserved by ``reserve`` before anything touches them.
    """

    def __init__(self, name: str, size: int, reserved: int | None = None) -> None:
        self.name = name
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.reserve(0, size if reserved is None else min(reserved, size))
            self._map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.buf: memoryview | None = memoryview(self._map)

    def reserve(self, offset: int, length: int) -> None:
        """Reserve the pages of ``length`` bytes at ``offset``: shmem allocates lazily, and a page it cannot
        allocate when it is touched kills the process with SIGBUS instead of raising (``OSError`` here)."""
        os.posix_fallocate(self.fd, offset, length)

    def close(self) -> None:
        """Stop using the memfd here (every view of ``buf`` must be released first)."""
        if self.buf is not None:
            self.buf.release()
            self.buf = None
            self._map.close()
            os.close(self.fd)


def create_memfd(size: int, reserved: int | None = None) -> Memfd:
    """Create a memfd of ``size`` bytes whose first ``reserved`` bytes (default: all) have their pages
    reserved up front (``Memfd.reserve`` for the rest).

    Fails with ``SharedMemoryError`` naming the size asked and the memory
    available, rather than letting a later write fault with SIGBUS.
    """
    available = memory_available()
    if size > available:
        raise SharedMemoryError(
            f"cannot create a {format_bytes(size)} shared-memory ring: only {format_bytes(available)} "
            "of memory is available. Ask for a smaller ring (ring_bytes=...)."
        )
    try:
        return Memfd(_new_name(), size, reserved)
    except OSError as exc:
        raise SharedMemoryError(
            f"cannot reserve {format_bytes(size)} of shared memory ({exc.strerror}); "
            f"{format_bytes(memory_available())} available. Ask for a smaller ring (ring_bytes=...)."
        ) from exc


def map_memfd(fd: int) -> mmap.mmap:
    """Map a memfd through an inherited descriptor (a worker's way in: no name, no resource tracker)."""
    return mmap.mmap(fd, 0)


_MEMFD = "/memfd:" + MEMFD_PREFIX


def _held_memfds(pids: Iterable[int] | None = None) -> set[str]:
    """Names of envrec memfds held by ``pids`` (default: any process on this machine), those still using memory."""
    import psutil

    names = set()
    for pid in psutil.pids() if pids is None else pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target.startswith(_MEMFD):
                names.add(target[len("/memfd:"):].split(" ", 1)[0])
    return names


def _legacy_files() -> list[str]:
    try:
        return [n for n in os.listdir(SHM_DIR) if n.startswith(MEMFD_PREFIX)]
    except OSError:
        return []


def list_memfds(pids: Collection[int] | None = None) -> list[str]:
    """Names of every envrec memfd alive on this machine (or shared-memory file of an older version left in /dev/shm).

    ``pids``: only those held by these processes, or left in /dev/shm by one of them.
    """
    legacy = [n for n in _legacy_files() if pids is None or _owner_pid(n) in pids]
    return sorted(_held_memfds(pids).union(legacy))


def _owner_pid(name: str) -> int | None:
    try:
        return int(name[len(MEMFD_PREFIX):].split("_", 1)[0])
    except ValueError:
        return None


def sweep_orphans() -> list[str]:
    """Remove the ``/dev/shm`` files earlier versions left when their owner died; return their names."""
    import psutil

    swept = []
    for name in _legacy_files():
        pid = _owner_pid(name)
        if pid is None or psutil.pid_exists(pid):
            continue
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except FileNotFoundError:
            continue
        except OSError as exc:
            logger.warning("could not remove orphaned shared-memory file /dev/shm/%s: %s", name, exc)
            continue
        swept.append(name)
    if swept:
        logger.info("removed %d shared-memory file(s) older versions left in /dev/shm: %s", len(swept), swept)
    return swept


list_segments = list_memfds  # the old name (tests/conftest.py's leak check uses it), kept for one release
