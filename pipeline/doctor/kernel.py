"""What envrec asks of the kernel: memfds (the rings' memory: ``envrec.contract.shm``), eventfd wake-ups
(``envrec.contract.wakeup``), and enough file descriptors (``RLIMIT_NOFILE``).

The rings are memfds, not files in ``/dev/shm``: its size (64 MiB in a default Docker container) does not
bound them, only memory does. Each check uses envrec's own calls: a memfd created with its pages reserved,
written through its view and read back through a second mapping of its descriptor (the worker's way in); a
wake-up posted, waited for and cleared.
"""

from __future__ import annotations

import os
import resource

from ..contract.shm import create_memfd, map_memfd, memory_available
from ..contract.wakeup import Wakeup
from ..errors import SharedMemoryError
from .result import CheckStatus, Result

__all__ = ["FDS_PER_RECORDER", "FDS_PER_VECTOR_SUB_ENV", "NOFILE_WARN_BELOW", "eventfd_result", "memfd_result", "nofile_result"]

MEMFD_BYTES = 1 << 20  # a small ring: the default ring is larger, but the calls are the same
# Measured on CartPole: a RecordTrace and a RecordVideo held 12 descriptors in the env process (the
# ring's memfd, two eventfds, the report and output pipes of each worker); a RecordVectorTrace's worker held 15
# with one sub-env and 120 with 16 (batch files, checkpoints and a spill file per field of each sub-env).
FDS_PER_RECORDER = 6
FDS_PER_VECTOR_SUB_ENV = 7
NOFILE_WARN_BELOW = 1024  # below it, a vector trace of ~140 sub-envs already runs out


def memfd_result() -> Result:
    """A memfd made, written, mapped again through its descriptor, read back, closed."""
    if not hasattr(os, "memfd_create") or not hasattr(os, "eventfd"):
        return Result("memfd", CheckStatus.FAIL, "this Python has no os.memfd_create/os.eventfd (Linux 3.17+ and Python 3.10+)",
                      "run envrec on Linux with Python 3.11 or newer")
    try:
        memfd = create_memfd(MEMFD_BYTES)
    except SharedMemoryError as exc:
        return Result("memfd", CheckStatus.FAIL, str(exc), "free some memory, or ask for a smaller ring (ring_bytes=...)")
    try:
        assert memfd.buf is not None
        pattern = os.urandom(4096)
        memfd.buf[-len(pattern):] = pattern
        with map_memfd(memfd.fd) as second:
            seen = second[MEMFD_BYTES - len(pattern):]
    except OSError as exc:
        return Result("memfd", CheckStatus.FAIL, f"a memfd cannot be mapped: {exc}",
                      "envrec needs mmap of memfds (a seccomp profile or sandbox may forbid it): allow memfd_create and mmap")
    finally:
        memfd.close()
    if seen != pattern:
        return Result("memfd", CheckStatus.FAIL, "what was written into a memfd reads back different through a second mapping",
                      "this kernel's shared memory is broken: report it with `uname -a`")
    available = memory_available()
    return Result("memfd", CheckStatus.PASS, f"a {MEMFD_BYTES >> 20} MiB memfd made, written, mapped again and read back "
                  f"({available / (1 << 30):.1f} GiB of memory available for rings; /dev/shm is not used)",
                  facts={"memory_available": available})


def eventfd_result() -> Result:
    """A wake-up posted, waited for (it wakes), cleared (the next wait times out), closed."""
    try:
        wakeup = Wakeup()
    except OSError as exc:
        return Result("eventfd", CheckStatus.FAIL, f"cannot create an eventfd: {exc}",
                      "envrec needs eventfd (a seccomp profile or sandbox may forbid it): allow eventfd2")
    try:
        wakeup.post()
        woke = wakeup.wait(1.0)
        wakeup.post()
        wakeup.clear()
        stayed = not wakeup.wait(0.01)
    finally:
        wakeup.close()
    if not (woke and stayed):
        return Result("eventfd", CheckStatus.FAIL, f"an eventfd wake-up did not behave (woke: {woke}, cleared: {stayed})",
                      "this kernel's eventfd is broken: report it with `uname -a`")
    return Result("eventfd", CheckStatus.PASS, "a wake-up posted, waited for and cleared")


def nofile_result() -> Result:
    """The open-files limit against what envrec holds: descriptors per recorder and per vector sub-env."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    facts = {"soft": soft, "hard": hard}
    sub_envs = (soft - 2 * FDS_PER_VECTOR_SUB_ENV) // FDS_PER_VECTOR_SUB_ENV if soft != resource.RLIM_INFINITY else None
    room = f"a vector trace's worker holds ~{FDS_PER_VECTOR_SUB_ENV} per sub-env (room for ~{sub_envs}), " \
           f"your process ~{FDS_PER_RECORDER} per recorder" if sub_envs is not None else "no limit"
    if soft != resource.RLIM_INFINITY and soft < NOFILE_WARN_BELOW:
        raise_to = hard if hard == resource.RLIM_INFINITY or hard >= NOFILE_WARN_BELOW else NOFILE_WARN_BELOW
        return Result("open files limit", CheckStatus.WARN, f"RLIMIT_NOFILE {shown} (hard {hard}): {room}",
                      f"ulimit -n {'unlimited' if raise_to == resource.RLIM_INFINITY else raise_to} before running, or in "
                      "Python: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))", facts=facts)
    return Result("open files limit", CheckStatus.PASS, f"RLIMIT_NOFILE {shown}: {room}", facts=facts)
