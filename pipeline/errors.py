"""The errors envrec raises, by whose fault it is.

Catch the family you can act on; every error envrec raises on purpose is an
``EnvrecError``:

* ``ClosedError`` (a ``RecordError``): *your misuse* of a recorder's life: a
  call after ``close()``, a step before the first reset, a recorder used in
  a process forked from the one that made it. Nothing was recorded; fix the
  order of the calls.
* ``RecordError`` (a ``ValueError``): *a bad value* handed to a recorder: an
  observation, action, reward or frame that does not match what it was told
  to expect. ``RecordTooLargeError`` is one too big for its ring.
* ``ConfigError`` (a ``ValueError``): *a bad setting*: an option, folder,
  name prefix, budget or ring size envrec cannot honour, raised when the
  recorder (or reader) is made, before anything is recorded.
* ``WorkerError`` (a ``RuntimeError``): *the other side failed*: a worker
  process died, hung or reported an exception (raised only with
  ``strict=True``; otherwise it is logged and counted). ``__cause__`` holds
  the worker's traceback as a ``RemoteTraceback`` when it sent one.
* ``SharedMemoryError`` (an ``OSError``): *the system* refused the shared
  memory of a ring (a memfd: not enough memory available for ``ring_bytes``,
  or a sandbox that forbids ``memfd_create``; ``/dev/shm`` is not used).
* ``TraceError`` (a ``ValueError``): *a damaged folder*: what is on disk is
  missing, incomplete, damaged or not envrec's. The message names the file
  and, where one is at fault, the field.

``FfmpegError`` never reaches your code: the encoder worker raises it when
ffmpeg dies, hangs or refuses its input, and catches it to end the clip as
broken (the clip's metadata says why); ``envrec.log`` raises it when ffmpeg
cannot make a clip's GIF, and catches it to log a warning.

Each message says what was expected, what arrived, and what to do.
"""

from __future__ import annotations

__all__ = [
    "ClosedError",
    "ConfigError",
    "EnvrecError",
    "FfmpegError",
    "RecordError",
    "RecordTooLargeError",
    "RemoteTraceback",
    "SharedMemoryError",
    "TraceError",
    "WorkerError",
]


class EnvrecError(Exception):
    """Base class of every error envrec raises on purpose."""


class FfmpegError(EnvrecError):
    """ffmpeg died, hung or refused its input; the message says how and quotes its stderr (caught where raised)."""


class ConfigError(EnvrecError, ValueError):
    """A recorder or reader was configured with settings it cannot honour (raised before anything is recorded)."""


class RecordError(EnvrecError, ValueError):
    """A value handed to a recorder does not match what it was told to expect."""


class ClosedError(RecordError):
    """A recorder was used when it cannot be: after ``close()``, before the call that must come first
    (a step before any reset), or in a process forked from the one that made it; or a call in one thread
    while ``close()`` runs in another.

    A ``RecordError`` too, so ``except RecordError`` clauses written before it existed still catch it.
    """


class RecordTooLargeError(RecordError):
    """A record does not fit in its ring, however empty the ring is.

    ``record_bytes`` and ``ring_bytes``: the record's size and the ring's (0 when not known).
    """

    def __init__(self, message: str, record_bytes: int = 0, ring_bytes: int = 0) -> None:
        super().__init__(message)
        self.record_bytes, self.ring_bytes = record_bytes, ring_bytes


class SharedMemoryError(EnvrecError, OSError):
    """A ring's shared memory (a memfd) could not be created: too little memory available, or memfd refused."""


class TraceError(EnvrecError, ValueError):
    """A trace or clip on disk is missing, incomplete, damaged or not envrec's (the message names the file and field)."""


class WorkerError(EnvrecError, RuntimeError):
    """A worker process died, hung or failed; ``__cause__`` holds its traceback when known."""


class RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in a worker process.

    Args:
        tb: the traceback text, as the worker formatted it.
    """

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'
