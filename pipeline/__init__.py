"""envrec: record what Gymnasium environments do, without slowing the loop that steps them.

The public API is re-exported here. Imports are lazy so that worker processes,
which import ``envrec.workers``, do not pay for Gymnasium.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .version import __version__

_EXPORTS = {
    "RecordTrace": ".record.wrappers",
    "RecordVideo": ".record.wrappers",
    "RecordVectorTrace": ".record.vector",
    "RecordVectorVideo": ".record.vector",
    "VideoRecorder": ".record.video",
    "VideoSettings": ".formats.ffmpeg",
    "TraceRecorder": ".record.recorder",
    "Compression": ".formats.compression",
    "StreamOptions": ".options",
    "TraceReader": ".read.reader",
    "Episode": ".read.reader",
    "TraceError": ".read.reader",
    "scan_recorded_traces": ".read.reader",
    "to_arrow": ".export",
    "EpisodeOutcome": ".record.clip_triggers",
    "Unrepresentable": ".formats.infos",
    "close_on_signals": ".supervision.signals",
    "EnvrecError": ".errors",
    "ClosedError": ".errors",
    "ConfigError": ".errors",
    "RecordError": ".errors",
    "RecordTooLargeError": ".errors",
    "SharedMemoryError": ".errors",
    "WorkerError": ".errors",
}

__all__ = ["__version__", *_EXPORTS]  # noqa: PLE0604  (the exported names are the keys above, kept once)

if TYPE_CHECKING:  # pragma: no cover  (for type checkers; at run time __getattr__ imports lazily)
    from .errors import ClosedError, ConfigError, EnvrecError, RecordError, RecordTooLargeError, SharedMemoryError, WorkerError  # noqa: F401
    from .export import to_arrow  # noqa: F401
    from .formats.compression import Compression  # noqa: F401
    from .formats.ffmpeg import VideoSettings  # noqa: F401
    from .formats.infos import Unrepresentable  # noqa: F401
    from .options import StreamOptions  # noqa: F401
    from .read.reader import Episode, TraceError, TraceReader, scan_recorded_traces  # noqa: F401
    from .record.clip_triggers import EpisodeOutcome  # noqa: F401
    from .record.recorder import TraceRecorder  # noqa: F401
    from .record.vector import RecordVectorTrace, RecordVectorVideo  # noqa: F401
    from .record.video import VideoRecorder  # noqa: F401
    from .record.wrappers import RecordTrace, RecordVideo  # noqa: F401
    from .supervision.signals import close_on_signals  # noqa: F401


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envrec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
