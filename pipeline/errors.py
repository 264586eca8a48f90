"""The errors envrec raises.

Two families, kept apart so callers can tell them apart:

* ``RecordError`` (a ``ValueError``) and ``ConfigError``: *you* handed envrec
  something it cannot record or configure. The message says what was
  expected, what arrived, and what to do.
* ``WorkerError``: the *other side* failed: a worker process died or reported
  an exception. It carries the worker's traceback text as ``__cause__``.
* ``TraceError`` (a ``ValueError``): what is on disk is missing, damaged or
  not a trace. The message names the file and, where one is at fault, the
  field.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EnvrecError",
    "RecordError",
    "RecordTooLargeError",
    "RemoteTraceback",
    "SharedMemoryError",
    "TraceError",
    "WorkerError",
]


class EnvrecError(Exception):
    """Base class of every error envrec raises on purpose."""


class ConfigError(EnvrecError, ValueError):
    """A recorder was configured with settings it cannot honour."""


class RecordError(EnvrecError, ValueError):
    """A value handed to a recorder does not match what it was told to expect."""


class RecordTooLargeError(RecordError):
    """A record does not fit in its ring, however empty the ring is."""


class SharedMemoryError(EnvrecError, OSError):
    """A shared-memory segment could not be created (most often: /dev/shm is too small)."""


class TraceError(EnvrecError, ValueError):
    """A trace or clip on disk is missing, incomplete, damaged or not envrec's (the message names the file and field)."""


class WorkerError(EnvrecError, RuntimeError):
    """A worker process died or failed; ``__cause__`` holds its traceback when known."""


class RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in a worker process."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'
