"""envrec: record what Gymnasium environments do, without slowing the loop that steps them.

The public API is re-exported here. Imports are lazy so that worker processes,
which import ``envrec.workers``, do not pay for Gymnasium.

Data flow (modules named relative to ``envrec``; ``docs/architecture.md`` has
a paragraph per module)::

  ENV PROCESS (the user's loop)
  RecordTrace.step            RecordVideo.step
  (record.record_trace)       (record.record_video; RecordVectorVideo:
        |                      record.vector)
        v                           v
  TraceRecorder.add_step      VideoRecorder.add_frame
  (record.recorder)           (record.video_recorder)
        |                           |
        +--------------+------------+
                       v
  Stream.send(StepRecord or FrameRecord) (supervision.stream): the record
  calls TracePacker.write_step or frame_packer(shape).write_single; the
  packer (record.packer) reserves the record in the ring (RingWriter.reserve,
  contract.ring), copies each section in place where its RecordLayout says
  (contract.records: the worker reads by the same one), and publishes it
  (RingWriter.publish). RecordVectorTrace.step (record.vector)
  sends one VSTEP record per vector step (RingWriter.write) instead.
                       |
  +====================v==========================================+
  | ring: one memfd of shared memory per stream (its layout:      |
  | contract.ring; the memfd: contract.shm): records, and the     |
  | status words (Status, contract.records) the worker keeps      |
  +====================|==========================================+
     items eventfd: the writer wakes a sleeping worker; space eventfd: the
     worker wakes a writer waiting for room (contract.wakeup)
                       |
  WORKER PROCESS, one per stream (python -m envrec.workers ROLE: workers.__main__)
                       v
  RingReader.poll, .poll_run (contract.ring_reader)
  handle_records (workers.loop): Handler.handle(record, position), then gives the
  ring back as the handler's ReleasePolicy says (contract.protocol)
        |                                   |
        v                                   v
  Serializer (workers.serializer;     Encoder (workers.encoder)
   vector: workers.vector_serializer) FRAME -> FrameFeed (workers.frame_feed)
  STEP -> the episode's fields         -> FfmpegProcess (workers.ffmpeg_process,
   (workers.episode_fields,               .pipe_splice) -> ffmpeg -> NAME.mp4
   .field_sinks, .spill; in runs:         (its command line: formats.ffmpeg)
   workers.step_runs)                 CLIP_END -> remux, NAME.meta.json
  episode end -> BatchWriter           (workers.meta_commit, formats.clip_meta;
   (workers.batch_writer)               disk budget: workers.clip_budget)
  batch full (or CLOSE) -> commit:          |
   .bin + .json, checkpoint                 |
   (workers.checkpoint),                    |
   manifest (workers.manifest_writer,       |
   formats.trace_format)                    |
        |                                   |
        +---> status words in the ring: READY, BATCHES, CLIPS, HEARTBEAT, BROKEN ...
              read back in the env process: Stream.status; record.commit_watch
              (BATCHES, then the manifest) -> on_batch_committed

  The env process's hold on its workers: supervision.launcher starts each one;
  supervision.supervisor's WorkerSupervisor sees it exit and reads its report pipe
  (("done", summary), ("error", traceback): contract.protocol); Stream.check
  hands a dead serializer's ring to a successor, which resumes from the
  checkpoint. Recordings are read back by read.reader.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .record.headless import headless_display
from .version import __version__

# At import, not only in the wrappers: a vector env's sub-processes (AsyncVectorEnv's, SB3's SubprocVecEnv's) are
# started before any envrec wrapper is made, and inherit the environment they were started with; so pygame's SDL
# draws off screen in them too, and "XDG_RUNTIME_DIR is invalid" stays out of the output (no display only).
headless_display()

_EXPORTS = {
    "RecordTrace": ".record.record_trace",
    "RecordVideo": ".record.record_video",
    "RecordVectorTrace": ".record.vector",
    "RecordVectorVideo": ".record.vector",
    "BatchedEnv": ".record.batched",
    "VideoRecorder": ".record.video_recorder",
    "VideoSettings": ".formats.ffmpeg",
    "TraceRecorder": ".record.recorder",
    "Compression": ".formats.compression",
    "StreamOptions": ".options",
    "TraceReader": ".read.reader",
    "open_dataset": ".read.dataset",
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
    from . import doctor, keep, log, replay  # noqa: F401
    from .errors import ClosedError, ConfigError, EnvrecError, RecordError, RecordTooLargeError, SharedMemoryError, WorkerError  # noqa: F401
    from .export import to_arrow  # noqa: F401
    from .formats.compression import Compression  # noqa: F401
    from .formats.ffmpeg import VideoSettings  # noqa: F401
    from .formats.infos import Unrepresentable  # noqa: F401
    from .options import StreamOptions  # noqa: F401
    from .read.dataset import open_dataset  # noqa: F401
    from .read.reader import Episode, TraceError, TraceReader, scan_recorded_traces  # noqa: F401
    from .record.batched import BatchedEnv  # noqa: F401
    from .record.clip_triggers import EpisodeOutcome  # noqa: F401
    from .record.record_trace import RecordTrace, RecordVideo  # noqa: F401
    from .record.recorder import TraceRecorder  # noqa: F401
    from .record.vector import RecordVectorTrace, RecordVectorVideo  # noqa: F401
    from .record.video_recorder import VideoRecorder  # noqa: F401
    from .supervision.signals import close_on_signals  # noqa: F401


_SUBPACKAGES = ("replay", "log", "keep", "doctor")  # ``envrec.replay.verify(...)``, ``envrec.keep.best(3)``… after ``import envrec``


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        package = importlib.import_module(f".{name}", __name__)
        globals()[name] = package
        return package
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envrec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
