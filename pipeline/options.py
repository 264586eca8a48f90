"""``StreamOptions``: what every recorder's stream takes, with its defaults defined once.

Recorders and wrappers take ``options=StreamOptions(...)``, or the same
fields as keyword arguments (``ring_bytes=..., strict=True``), which they
forward by name; the two are merged, keywords winning.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["BACKPRESSURE_POLICIES", "StreamOptions"]

BACKPRESSURE_POLICIES = ("block", "drop")


@dataclass(frozen=True)
class StreamOptions:
    """How a recorder hands records to its worker, and what it does when the worker fails."""

    ring_bytes: int | None = None  # shared memory for records in flight; None: the recorder's default (traces 64 MiB, frames 128 MiB)
    backpressure: str = "block"  # ring full: "block" waits for room (nothing lost), "drop" drops and counts
    block_timeout_s: float | None = None  # with "block": give up (drop and count) after this long
    strict: bool = False  # a failed worker raises WorkerError instead of being logged
    close_timeout_s: float = 60.0  # how long close() waits for the worker to finish
    max_restarts: int = 3  # failed workers replaced before the stream is marked broken
    hang_timeout_s: float | None = 60.0  # a worker whose heartbeat stops this long is killed and replaced
    timing: bool = True  # time every call (stats call_*); 0.1-1 µs a call

    def __post_init__(self) -> None:
        if self.backpressure not in BACKPRESSURE_POLICIES:
            raise ConfigError(f"backpressure must be one of {BACKPRESSURE_POLICIES}, not {self.backpressure!r}")
        if self.ring_bytes is not None and (not isinstance(self.ring_bytes, int) or self.ring_bytes <= 0):
            raise ConfigError(f"ring_bytes must be a positive number of bytes, not {self.ring_bytes!r}")
        for name in ("block_timeout_s", "hang_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive or None, not {value!r}")
        if self.close_timeout_s <= 0:
            raise ConfigError(f"close_timeout_s must be positive, not {self.close_timeout_s!r}")
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise ConfigError(f"max_restarts must be a non-negative integer, not {self.max_restarts!r}")

    @classmethod
    def merge(cls, options: StreamOptions | None, fields: dict[str, Any]) -> StreamOptions:
        """``options`` (or the defaults) with ``fields`` (keyword arguments of the same names) applied."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; stream options are {', '.join(sorted(known))}")
        return dataclasses.replace(options or cls(), **fields)

    def ring_or(self, default: int) -> int:
        return self.ring_bytes if self.ring_bytes is not None else default
