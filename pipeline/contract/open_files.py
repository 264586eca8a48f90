"""Open files: how many a vector trace's worker needs, and how many a process may have.

The vector serializer keeps about ``FILES_PER_SUB_ENV_TRACE`` descriptors open per recorded sub-env (its batch,
index and spill files). The env side refuses, with a ``ConfigError`` naming ``sub_envs=``, a recording whose worker
could not open them all (``envrec.record.vector``); the worker raises its own soft limit to the hard one first
(``raise_soft_limit``), as the hard limit is what any process of the user may reach.
"""

from __future__ import annotations

import resource

__all__ = ["FILES_PER_SUB_ENV_TRACE", "FILES_SPARE", "open_files_limit", "raise_soft_limit"]

FILES_PER_SUB_ENV_TRACE = 8  # measured: 520 descriptors for 64 sub-env traces
FILES_SPARE = 64  # the worker's own: its ring, pipes, the interpreter's


def open_files_limit() -> int:
    """How many descriptors a process of this user may have open: the hard limit (``ulimit -Hn``)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if hard == resource.RLIM_INFINITY else max(soft, hard)


def raise_soft_limit() -> None:
    """Raise this process's soft open-files limit to the hard one (a worker that keeps many files open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # the files it opens say so if they run out
