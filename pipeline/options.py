"""``StreamOptions``: what every recorder's stream takes, with its defaults defined once.

Recorders and wrappers take ``options=StreamOptions(...)``, or the same
fields as keyword arguments (``ring_bytes=..., strict=True``), which they
forward by name; the two are merged, keywords winning.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .option_checks import (
    BOOL,
    FOLDER,
    MAPPING,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    accepts,
    check_fields,
    one_of,
    optional,
)

__all__ = ["BACKPRESSURE_POLICIES", "StreamOptions"]

BACKPRESSURE_POLICIES = ("block", "drop")


@dataclass(frozen=True)
class StreamOptions:
    """How a recorder hands records to its worker, and what it does when the worker fails.

    Every recorder and wrapper takes ``options=StreamOptions(...)`` or these
    fields as keyword arguments (keywords win).

    Args:
        ring_bytes: shared memory for records in flight, a positive integer
            (at least 4096). Default None: the recorder's own (traces 64 MiB,
            frames 128 MiB).
        backpressure: when the ring is full, ``"block"`` (default) waits for
            room, so nothing is lost; ``"drop"`` drops the record at once and
            counts it (``records_dropped``).
        block_timeout_s: with ``"block"``, give up on a record (drop and count
            it) after this many seconds. Default None: wait as long as the
            worker lives.
        strict: False (default): a failed worker is logged once, the recording
            marked broken and the env goes on. True: the next call raises
            ``WorkerError``, the worker's traceback as its cause.
        close_timeout_s: how long ``close()`` waits for the worker to finish
            its output before it is terminated. Default 60.
        max_restarts: failed workers replaced before the stream is marked
            broken, an integer >= 0. Default 3. For a trace serializer these
            are failures in a row: a successor that commits a batch it did
            not inherit (or skips a poison record) ends the row.
        hang_timeout_s: a worker whose heartbeat stops for this many seconds
            is killed (and replaced, as a failed one). Default 60; None never
            judges a worker hung.
        timing: time every call (the ``call_*`` stats; 0.1-1 µs a call).
            Default True.
        ship_to: ship what is committed to this URL (any fsspec URL:
            ``s3://bucket/run``, ``gs://``, ``az://``, ``file://``, or a
            mounted folder's path) as it goes: see docs/cluster.md. The
            recorder's prefix gets ``.HOST.PID.TIME.RAND`` appended, so every
            recorder of a job has an id of its own under the URL. Default
            None: nothing is shipped.
        storage_options: passed to fsspec for ``ship_to`` (``key``,
            ``secret``, ``endpoint_url``, ``client_kwargs``...). Default None:
            the store's environment and configuration chains
            (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``~/.aws``...).

    Raises:
        ConfigError: a field of the wrong type or out of range, naming the
            field and what it accepts, when the options are made (so when
            the recorder is built).
    """

    # shared memory for records in flight; None: the recorder's default (traces 64 MiB, frames 128 MiB)
    ring_bytes: int | None = field(default=None, metadata=accepts(optional(POSITIVE_INT)))
    # ring full: "block" waits for room (nothing lost), "drop" drops and counts
    backpressure: str = field(default="block", metadata=accepts(one_of(*BACKPRESSURE_POLICIES)))
    # with "block": give up (drop and count) after this long
    block_timeout_s: float | None = field(default=None, metadata=accepts(optional(POSITIVE_NUMBER)))
    # a failed worker raises WorkerError instead of being logged
    strict: bool = field(default=False, metadata=accepts(BOOL))
    # how long close() waits for the worker to finish
    close_timeout_s: float = field(default=60.0, metadata=accepts(POSITIVE_NUMBER))
    # failed workers replaced before the stream is marked broken
    max_restarts: int = field(default=3, metadata=accepts(NON_NEGATIVE_INT))
    # a worker whose heartbeat stops this long is killed and replaced
    hang_timeout_s: float | None = field(default=60.0, metadata=accepts(optional(POSITIVE_NUMBER)))
    # time every call (stats call_*); 0.1-1 µs a call
    timing: bool = field(default=True, metadata=accepts(BOOL))
    # ship what is committed to this URL (fsspec), as it goes
    ship_to: str | os.PathLike | None = field(default=None, metadata=accepts(optional(FOLDER)))
    # fsspec's options for ship_to (credentials, endpoint)
    storage_options: dict[str, Any] | None = field(default=None, repr=False, metadata=accepts(optional(MAPPING)))

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def merge(cls, options: StreamOptions | None, fields: dict[str, Any]) -> StreamOptions:
        """``options`` (or the defaults) with ``fields`` (keyword arguments of the same names) applied.

        ``ConfigError`` when ``options`` is not a StreamOptions, ``TypeError`` for a field of no such name.
        """
        if options is not None and not isinstance(options, StreamOptions):
            raise ConfigError(f"options must be a StreamOptions or None, not {options!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; stream options are {', '.join(sorted(known))}")
        return dataclasses.replace(options or cls(), **fields)

    def ring_or(self, default: int) -> int:
        return self.ring_bytes if self.ring_bytes is not None else default
