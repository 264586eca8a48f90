"""The output folder: it exists or can be made, envrec's atomic write works in it (a probe file written,
fsynced, renamed into place, the folder fsynced, memory-mapped back, removed), its free space, and what
filesystem it is on (read from ``/proc/self/mountinfo``). Folders the check made for this are removed after.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os

import psutil

from ..formats.atomic import write_atomic
from .result import CheckStatus, Result

__all__ = ["FREE_FAIL_BYTES", "FREE_WARN_BYTES", "filesystem_of", "folder_results"]

FREE_WARN_BYTES = 1 << 30  # 1 GiB: a few minutes of ALE frames as traces, or a few hundred clips
FREE_FAIL_BYTES = 16 << 20  # below one default trace batch (5 MB) and its manifest: nothing would commit
# Filesystems where fsync, rename or mmap are not what envrec's commits rely on, or not where recordings should live.
CAUTION = {
    "tmpfs": "in memory: gone at reboot, and counts against RAM",
    "ramfs": "in memory, unbounded: gone at reboot",
    "nfs": "a network filesystem: fsync and rename are slower, and a crash of the server can lose commits",
    "nfs4": "a network filesystem: fsync and rename are slower, and a crash of the server can lose commits",
    "cifs": "a network filesystem (SMB): rename over an open file and mmap may fail",
    "smb3": "a network filesystem (SMB): rename over an open file and mmap may fail",
    "9p": "a virtual machine's shared folder (9p): slow fsync, mmap may not be coherent",
    "vboxsf": "VirtualBox's shared folder: mmap and fsync are unreliable",
    "overlay": "a container's overlay layer: fine, but gone with the container; mount a volume to keep recordings",
}
PROBE_BYTES = 4096


def filesystem_of(path: str) -> tuple[str, str]:
    """``(type, mount point)`` of the filesystem holding ``path`` (which must exist); ``("", "")`` if unknown."""
    real, best = os.path.realpath(path), ("", "")
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            if " - " not in line or len(fields) < 5:
                continue
            point = fields[4].replace("\\040", " ")
            fstype = line.split(" - ", 1)[1].split()[0]
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[1]):
                best = (fstype, point)
    return best


CHOOSE = "choose a folder you can write (envrec record --out DIR, RecordTrace(env, DIR))"


def _read_only_fix(mount: str) -> str:
    return ("choose a folder on a writable file system (envrec record --out DIR, RecordTrace(env, DIR)), or remount "
            f"it read-write: mount -o remount,rw {mount}")


def _read_only(folder: str) -> str:
    """'' when ``folder``'s file system is mounted read-write (or cannot be told); else its mount point."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return filesystem_of(folder)[1] or folder
    except OSError:
        pass
    return ""


def _make(folder: str) -> tuple[list[str], str, str]:
    """Make ``folder`` and its missing parents: the folders made (deepest last), and why it cannot be made and
    what to do ('' and '' when it can)."""
    missing, here = [], os.path.abspath(folder)
    while not os.path.lexists(here):
        missing.append(here)
        here = os.path.dirname(here)
    if not os.path.isdir(here):
        return [], f"{here} is a file, not a folder", f"remove or rename the file {here}, or {CHOOSE}"
    made: list[str] = []
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except OSError as exc:
            if exc.errno == errno.EROFS:
                mount = _read_only(here) or here
                return made, (f"cannot make {path}: {here} is on a read-only file system (mounted read-only at "
                              f"{mount})"), _read_only_fix(mount)
            return made, f"cannot make {path}: {exc.strerror or exc}", f"{CHOOSE}, or make this one: mkdir -p {folder}"
        made.append(path)
    return made, "", ""


def _write_probe(folder: str) -> str:
    """'' when envrec's atomic write, a folder fsync and an mmap of the file work in ``folder``; else why not."""
    path = os.path.join(folder, f".envrec-doctor.{os.getpid()}.probe")
    data = os.urandom(PROBE_BYTES)
    try:
        write_atomic(path, data)
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[:] != data:
                return "the probe file read back differs from what was written"
    except OSError as exc:
        return f"{exc.strerror or exc} ({exc.filename or path})"
    finally:
        with contextlib.suppress(OSError):  # missing, or a read-only file system (whose unlink says EROFS first)
            os.unlink(path)
    return ""


def _unwritable(folder: str, state: str, failed: str) -> Result:
    """The FAIL of a folder envrec cannot write in: a read-only file system says so, with its own fix."""
    mount = _read_only(folder)
    if mount:
        return Result("folder", CheckStatus.FAIL, f"{folder} is on a read-only file system (mounted read-only at {mount})",
                      _read_only_fix(mount), facts={"folder": folder, "read_only": True, "mount_point": mount})
    return Result("folder", CheckStatus.FAIL, f"{folder} {state} but envrec cannot write in it: {failed}",
                  f"make it writable (chmod u+w {folder}, or ask its owner), or {CHOOSE}", facts={"folder": folder})


def _space(folder: str) -> Result:
    free = psutil.disk_usage(folder).free
    shown = f"{free / (1 << 30):.1f} GiB free"
    if free < FREE_FAIL_BYTES:
        return Result("folder space", CheckStatus.FAIL, f"{shown}: not enough for one trace batch",
                      "free some space, or record elsewhere (envrec record --out DIR)", facts={"free_bytes": free})
    if free < FREE_WARN_BYTES:
        return Result("folder space", CheckStatus.WARN, f"{shown} (under {FREE_WARN_BYTES >> 30} GiB)",
                      "set a disk budget (RecordTrace(max_bytes=...), envrec record --max-bytes 500M) or record elsewhere",
                      facts={"free_bytes": free})
    return Result("folder space", CheckStatus.PASS, shown, facts={"free_bytes": free})


def _filesystem(folder: str) -> Result:
    fstype, point = filesystem_of(folder)
    facts = {"filesystem": fstype or None, "mount_point": point or None}
    if fstype in CAUTION or fstype.startswith("fuse"):
        why = CAUTION.get(fstype, "a FUSE filesystem: fsync, rename and mmap are whatever its driver makes them")
        return Result("folder filesystem", CheckStatus.WARN, f"{fstype} at {point}: {why}",
                      "record to a local disk (envrec record --out DIR) and copy the recordings after", facts=facts)
    if not fstype:
        return Result("folder filesystem", CheckStatus.SKIP, "cannot tell (no /proc/self/mountinfo)", facts=facts)
    return Result("folder filesystem", CheckStatus.PASS, f"{fstype} at {point}", facts=facts)


def folder_results(folder: str) -> list[Result]:
    """The output folder's checks: made or found, written as envrec writes, free space, filesystem.

    Args:
        folder: the folder recordings would go to (made for the check and removed after, if missing).
    """
    made, why, fix = _make(folder)
    try:
        if why:
            return [Result("folder", CheckStatus.FAIL, f"{folder}: {why}", fix, facts={"folder": folder})]
        failed = _write_probe(folder)
        state = "can be made" if made else "exists"
        if failed:
            return [_unwritable(folder, state, failed)]
        written = Result("folder", CheckStatus.PASS, f"{os.path.abspath(folder)} {state}, writable (atomic write, fsync, mmap)",
                         facts={"folder": os.path.abspath(folder), "made": bool(made)})
        return [written, _space(folder), _filesystem(folder)]
    finally:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(path)
