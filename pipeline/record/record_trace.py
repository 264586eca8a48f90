"""``RecordTrace``: the Gymnasium wrapper that records an env's trace through a serializer worker (``RecordVideo`` is re-exported from ``record_video``)."""

from __future__ import annotations

import logging
import os
from typing import Any, SupportsFloat

import gymnasium as gym

from ..formats.compression import Compression
from ..options import StreamOptions
from ..supervision.stream import warn_start_method
from .commit_watch import BatchCallback
from .headless import headless_display
from .record_video import RECORD_VIDEO_OPTIONS, RecordVideo
from .recorder import TraceRecorder
from .replay_capture import ReplayCapture
from .snapshots import Snapshot

__all__ = ["RECORD_VIDEO_OPTIONS", "RecordTrace", "RecordVideo"]

logger = logging.getLogger(__name__)


class RecordTrace(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Records every reset and step of ``env`` as trace batches in ``directory``.

    The successor of gym-recording's ``TraceRecordingWrapper`` (which ignored
    its directory). For an episode of N steps the trace holds N+1 observations
    (the reset's first), N actions, rewards, terminations and truncations, and
    N+1 infos; ``TraceReader(directory)`` reads them back. Each array is copied
    once into shared memory; a serializer worker process writes the files.

    ``close()`` flushes everything, waits for the serializer and frees the
    shared memory; it then closes ``env`` as every Gymnasium wrapper does.

    Args:
        env: the environment to record.
        directory: the output folder, created if needed. Exactly one of
            ``directory`` and ``recorder`` is given.
        name_prefix: the recording's file prefix (letters, digits, ``.``,
            ``_``, ``-``). Default None: ``openaigym.trace.<n>.<pid>``, so
            gym-recording's playback reads the files as they are.
        batch_bytes: about how many bytes of records make one batch (one
            commit). Default 5,000,000.
        compression: ``"auto"`` (the default: image-like arrays, integer
            with at least two dimensions and rows of at least 1 KiB, zstd-3
            with the delta filter, the others raw, so CartPole-like recordings
            stay readable by gym-recording), ``"zstd"``, ``"zstd:LEVEL"``,
            ``"lz4"``, a ``Compression`` (every array), or None (all raw).
            Compressed in the worker; then the batch JSON is too (``.json.zst``).
        max_bytes: a disk budget for this recording's batches: beyond it the
            oldest whole batches are evicted (``batches_evicted`` in
            ``stats()``); at least two batches. Default None: no budget.
        commit_interval: seconds a step may stay uncommitted (invisible to
            readers, lost to a crash of the machine): the open batch is
            committed once it has held data this long, an episode still
            running cut there into parts (docs/format.md). Default 5.0;
            None: batches are committed by size only.
        snapshot: a simulator's state to record for replay (``envrec verify``,
            ``envrec render``, docs/replay.md) where ``np_random`` does not hold
            it all: ``"ale"`` (the emulator with its RNG: sticky actions),
            ``"mujoco"`` (the full physics state), or a ``Snapshot`` of your
            own; taken before every reset. Default None: the spec, versions,
            seeds and ``np_random``'s state before each unseeded reset only.
        snapshot_every: also take the snapshot after every this many steps, so
            an episode whose start was evicted (``max_bytes``) still replays.
            Default None.
        on_batch_committed: ``callback(json_path, entry)``, called in this
            process from the next ``step()``/``reset()``/``close()`` after
            the serializer commits a batch (never blocking on it), once per
            batch, oldest first. Default None.
        recorder: a ``TraceRecorder`` of the caller's, instead of
            ``directory``; it is the caller's to close.
        options: a ``StreamOptions`` (ring size, backpressure, strict,
            restarts, timeouts, timing); its fields may also come as keyword
            arguments (``**stream_options``), which win.
        start_method: deprecated and ignored (a ``DeprecationWarning``).

    Raises:
        ConfigError: a bad option (naming it and what it accepts), a folder
            that cannot be written, a name prefix already used there.
        TypeError: both or neither of ``directory`` and ``recorder``, or an
            unknown keyword argument.
        RecordError: from ``step()``/``reset()``, after the env has stepped: a
            value that does not match the spaces (an observation of another
            shape, a non-numeric reward); nothing recorded before is lost.
        ClosedError: ``step()`` before any ``reset()``, or any call after
            ``close()``.
        WorkerError: only with ``strict=True``: the serializer failed. Without
            it a failure is logged once and the recording marked broken.
    """

    def __init__(
        self,
        env: gym.Env,
        directory: str | os.PathLike | None = None,
        *,
        name_prefix: str | None = None,
        batch_bytes: int = 5_000_000,
        compression: str | Compression | None = "auto",
        max_bytes: int | None = None,
        on_batch_committed: BatchCallback | None = None,
        commit_interval: float | None = 5.0,
        snapshot: str | Snapshot | None = None,
        snapshot_every: int | None = None,
        recorder: TraceRecorder | None = None,
        options: StreamOptions | None = None,
        start_method: str | None = None,
        **stream_options: Any,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            directory=None if directory is None else os.fspath(directory),
            name_prefix=name_prefix,
            batch_bytes=batch_bytes,
            compression=compression,
            max_bytes=max_bytes,
            commit_interval=commit_interval,
            snapshot=snapshot,
            snapshot_every=snapshot_every,
            options=options,
            **stream_options,
        )
        warn_start_method(start_method)
        headless_display()  # a wrapper below may render (RecordVideo, the user's own): no window, no SDL complaint
        gym.Wrapper.__init__(self, env)
        if (directory is None) == (recorder is None):
            raise TypeError("RecordTrace needs exactly one of directory= or recorder=")
        self._owns_recorder = recorder is None
        self._capture = ReplayCapture(env, snapshot, snapshot_every)
        self._ended = False  # the last step ended the episode: the next call should be reset()
        self.steps_after_end = 0  # steps taken after an episode ended without a reset (warned once)
        self._every = self._capture.every
        self._step_in_episode = 0
        if recorder is None:
            assert directory is not None  # exactly one of the two (checked above)
            recorder = TraceRecorder(
                directory,
                env.observation_space,
                env.action_space,
                name_prefix=name_prefix,
                env_id=env.spec.id if env.spec is not None else None,
                batch_bytes=batch_bytes,
                compression=compression,
                max_bytes=max_bytes,
                on_batch_committed=on_batch_committed,
                commit_interval=commit_interval,
                env_description=self._capture.describe(),
                options=options,
                **stream_options,
            )
        elif on_batch_committed is not None:
            raise TypeError("on_batch_committed belongs to the recorder: pass it to TraceRecorder(...) with recorder=")
        self.recorder = recorder

    @property
    def directory(self) -> str:
        return self.recorder.directory

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        replay = self._capture.before_reset(seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self._step_in_episode = 0
        self._ended = False
        self.recorder.add_reset(obs, info, seed=seed, options=options, replay=replay)
        return obs, info

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._ended:
            self._stepped_after_end()
        self._ended = terminated or truncated
        if self._every is None:
            self.recorder.add_step(action, obs, reward, terminated, truncated, info)
        else:
            self._step_in_episode += 1
            snapshot = self._capture.after_step(self._step_in_episode)
            self.recorder.add_step(action, obs, reward, terminated, truncated, info, snapshot=snapshot)
        return obs, reward, terminated, truncated, info

    def _stepped_after_end(self) -> None:
        """Gymnasium's API asks for reset() after terminated or truncated: a step without one is recorded in the
        ended episode, as the env returned it, and said once."""
        self.steps_after_end += 1
        if self.steps_after_end == 1:
            logger.warning("envrec: step() after the episode ended (terminated or truncated) without reset(): the "
                           "step is recorded in the ended episode; call reset() first (steps_after_end counts them)")

    def stats(self) -> dict[str, Any]:
        """The recorder's counters (see ``TraceRecorder.stats``)."""
        return self.recorder.stats() | {"steps_after_end": self.steps_after_end}

    def close(self) -> None:
        try:
            if self._owns_recorder:
                self.recorder.close()
        finally:
            super().close()
