"""envrec: record what Gymnasium environments do, without slowing the loop that steps them.

The public API is re-exported here. Imports are lazy so that worker processes,
which import ``envrec.workers``, do not pay for Gymnasium.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    "RecordTrace": ".wrappers",
    "RecordVideo": ".wrappers",
    "RecordVectorTrace": ".vector",
    "RecordVectorVideo": ".vector",
    "VideoRecorder": ".video",
    "VideoSettings": ".ffmpeg",
    "TraceRecorder": ".recorder",
    "Compression": ".compression",
    "StreamOptions": ".options",
    "TraceReader": ".reader",
    "Episode": ".reader",
    "TraceError": ".reader",
    "scan_recorded_traces": ".reader",
    "to_arrow": ".export",
    "EpisodeOutcome": ".clip_triggers",
    "Unrepresentable": ".infos",
    "close_on_signals": ".signals",
    "EnvrecError": ".errors",
    "ConfigError": ".errors",
    "RecordError": ".errors",
    "RecordTooLargeError": ".errors",
    "SharedMemoryError": ".errors",
    "WorkerError": ".errors",
}

__all__ = ["__version__", *_EXPORTS]  # noqa: PLE0604  (the exported names are the keys above, kept once)

if TYPE_CHECKING:  # pragma: no cover  (for type checkers; at run time __getattr__ imports lazily)
    from .clip_triggers import EpisodeOutcome  # noqa: F401
    from .compression import Compression  # noqa: F401
    from .errors import ConfigError, EnvrecError, RecordError, RecordTooLargeError, SharedMemoryError, WorkerError  # noqa: F401
    from .export import to_arrow  # noqa: F401
    from .ffmpeg import VideoSettings  # noqa: F401
    from .infos import Unrepresentable  # noqa: F401
    from .options import StreamOptions  # noqa: F401
    from .reader import Episode, TraceError, TraceReader, scan_recorded_traces  # noqa: F401
    from .recorder import TraceRecorder  # noqa: F401
    from .signals import close_on_signals  # noqa: F401
    from .vector import RecordVectorTrace, RecordVectorVideo  # noqa: F401
    from .video import VideoRecorder  # noqa: F401
    from .wrappers import RecordTrace, RecordVideo  # noqa: F401


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envrec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
