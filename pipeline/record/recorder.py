"""The env-side trace recorder: encodes resets and steps into a ring drained by a serializer.

Failure handling and shutdown are the stream's (see ``stream`` and
``supervisor``): a dead serializer is logged once and marks the recording
broken while the env goes on; ``close()`` posts CLOSE, waits for the final
manifest and frees the shared memory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from time import perf_counter_ns
from typing import Any, Self

from ..contract.faults import NO_FAULT, FaultSpec, from_env
from ..contract.protocol import SerializerConfig, Status
from ..errors import ClosedError, ConfigError, RecordError, RecordTooLargeError
from ..formats.atomic import remove_stale_tmp
from ..formats.compression import Compression, parse_compression
from ..formats.infos import pack_info
from ..formats.ownfolder import OwnFolder
from ..formats.replay_fields import SNAPSHOT_INFO_KEY
from ..formats.schema import describe_space, reward_value
from ..formats.ship_ledger import ledger_name
from ..formats.shipped import unique_suffix
from ..formats.store import store_url
from ..formats.trace_format import (
    PREFIX,
    check_prefix,
    default_prefix,
    manifest_document,
    manifest_name,
    read_manifest,
    read_manifest_in,
    trace_file_names,
    write_manifest_into,
)
from ..option_checks import CALLABLE, FOLDER, POSITIVE_INT, POSITIVE_NUMBER, STR, check_options, optional
from ..options import StreamOptions
from ..supervision.closers import register_closer, unregister_closer
from ..supervision.restarts import RestartPolicy
from ..supervision.shipper import ShipTargets, shipper_for
from ..supervision.stats import CallTimes, summary_line
from ..supervision.stream import Stream, warn_start_method
from .call_lock import close_once
from .commit_watch import BatchCallback, CommitWatcher
from .leftovers import remove_checkpoints, remove_dead_recordings, remove_leftovers
from .oversized import info_that_fits
from .packer import ResetRecord, StepRecord, TracePacker

__all__ = ["DEFAULT_RING_BYTES", "TRACE_OPTIONS", "TraceRecorder", "check_folder", "check_max_bytes", "record_failure_in_manifest"]

logger = logging.getLogger(__name__)

DEFAULT_RING_BYTES = 64 << 20  # ~650 Atari-sized steps of slack: a slow disk second does not block the env


def check_folder(directory: str | os.PathLike) -> str:
    """The absolute path of an output folder, created if needed; ConfigError if it cannot be written."""
    directory = os.path.abspath(os.fspath(directory))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {directory}: {exc.strerror}") from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"the output folder {directory} is not writable by this process")
    return directory


# What the trace recorders' own options accept (the stream's are StreamOptions'; compression is parse_compression's).
TRACE_OPTIONS = {
    "directory": FOLDER,
    "name_prefix": optional(PREFIX),
    "env_id": optional(STR),
    "batch_bytes": POSITIVE_INT,
    "max_bytes": optional(POSITIVE_INT),
    "on_batch_committed": optional(CALLABLE),
    "commit_interval": optional(POSITIVE_NUMBER),
}


def check_max_bytes(max_bytes: int | None, unit_bytes: int, unit: str = "batch_bytes") -> None:
    """A disk budget (checked a positive integer or None) must hold two batches: the newest is never evicted."""
    if max_bytes is not None and max_bytes < 2 * unit_bytes:
        raise ConfigError(
            f"max_bytes={max_bytes} cannot hold two batches of {unit}={unit_bytes}: the budget keeps the newest "
            f"whole and evicts older ones; raise max_bytes or lower {unit}"
        )


def record_failure_in_manifest(path: str, reason: str, *, only_if_missing: bool = False, own: OwnFolder | None = None,
                               folder_id: tuple[int, int] | None = None, **document: Any) -> None:
    """Say in a manifest why its recording stopped (its batches stay as the last worker committed them).

    When no serializer ever wrote the manifest, the env process writes one
    with no batches (``document``: the fields of ``manifest_document``) and
    the reason, which ``TraceReader`` quotes. ``only_if_missing``: leave an
    existing manifest to its worker (while one may still write it). The
    manifest is read and written relative to its folder opened once
    (``envrec.formats.ownfolder``): ``own``, the recorder's (left open), or the
    folder of ``path`` opened here, which must be ``folder_id`` when given
    (nothing is written into another folder found at the path). Never raises:
    it is logged.
    """
    folder, name = os.path.split(path)
    try:
        opened = own or OwnFolder(folder or ".", lambda n: n == name, expect=folder_id)
        try:
            try:
                if only_if_missing and opened.lstat(name) is not None:
                    return
                manifest = read_manifest_in(opened, name)
            except FileNotFoundError:
                manifest = manifest_document(**document)
            if manifest.get("error"):
                return
            manifest["error"] = reason
            write_manifest_into(opened, name, manifest)
        finally:
            if own is None:
                opened.close()
    except (OSError, ValueError, RecordError) as exc:
        logger.error("envrec: could not record the failure in %s: %s", path, exc)


def _settings(opts: StreamOptions, batch_bytes: int, ring_bytes: int, compression: Compression | None,
              max_bytes: int | None, commit_interval: float | None) -> dict[str, Any]:
    """The manifest's ``settings`` of a trace recording."""
    return {
        "batch_bytes": batch_bytes,
        "ring_bytes": ring_bytes,
        "backpressure": opts.backpressure,
        "block_timeout_s": opts.block_timeout_s,
        "compression": compression.describe() if compression is not None else None,
        "max_bytes": max_bytes,
        "commit_interval": commit_interval,
    }


class TraceRecorder:
    """Records one environment's resets and steps into ``directory`` as trace batches.

    ``add_reset`` / ``add_step`` copy each array once into a shared-memory
    ring; a serializer worker process writes the batches. The recorder under
    ``RecordTrace``, for loops that do not step a ``gymnasium.Env``; use it
    as a context manager or call ``close()``. Several threads may call it:
    each record is whole, in the order the calls took its lock
    (``envrec.record.call_lock``).

    Args:
        directory: the output folder, created if needed.
        observation_space: the space every observation must fit.
        action_space: the space every action must fit.
        name_prefix: the recording's file prefix; default None:
            gym-recording's ``openaigym.trace.<n>.<pid>``.
        env_id: the env's id, written into the manifest. Default None.
        batch_bytes: about how many bytes of records make one batch. Default 5,000,000.
        compression, max_bytes, commit_interval, on_batch_committed: as for ``RecordTrace``.
        env_description: the manifest's ``env``, what replay needs to recreate the env
            (``envrec.record.replay_capture.describe_env``; ``RecordTrace`` passes it). Default None.
        options: a ``StreamOptions``; its fields may also come as keyword
            arguments (``**stream_options``), which win. ``backpressure``
            says what happens when the ring is full: ``"block"`` waits for
            room (nothing is lost; ``block_timeout_s`` bounds the wait),
            ``"drop"`` drops the record at once and counts it.
        faults: a fault to inject into the serializer (tests). Default None:
            ``$ENVREC_FAULTS``, or none.
        start_method: deprecated and ignored (a ``DeprecationWarning``).

    Raises:
        ConfigError: a bad option, a folder that cannot be written, a name
            prefix already used there, a ring too small for one step, a
            budget smaller than two batches.
        RecordError: ``add_reset``/``add_step`` given a value that does not fit the spaces.
        ClosedError: ``add_step`` before any ``add_reset``, or any call after ``close()`` (or
            while it runs in another thread).
        WorkerError: only with ``strict=True``: the serializer failed.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        observation_space,
        action_space,
        *,
        name_prefix: str | None = None,
        env_id: str | None = None,
        batch_bytes: int = 5_000_000,
        compression: str | Compression | None = "auto",
        max_bytes: int | None = None,
        on_batch_committed: BatchCallback | None = None,
        commit_interval: float | None = 5.0,
        env_description: dict | None = None,
        options: StreamOptions | None = None,
        faults: FaultSpec | None = None,
        start_method: str | None = None,
        **stream_options: Any,
    ) -> None:
        warn_start_method(start_method)
        check_options("TraceRecorder", TRACE_OPTIONS, locals())
        opts = StreamOptions.merge(options, stream_options)
        ring_bytes = opts.ring_or(DEFAULT_RING_BYTES)
        check_max_bytes(max_bytes, batch_bytes)
        compression = parse_compression(compression)
        self.directory = check_folder(directory)
        self.prefix = self._choose_prefix(name_prefix, opts.ship_to is not None)
        obs_spec, act_spec = describe_space(observation_space), describe_space(action_space)
        self._packer = TracePacker(obs_spec, act_spec)
        # the common STEP (one leaf each, no Text): written by this method of the packer straight, per step
        self._write_one_each = self._packer.step.write_one_each if self._packer.single_leaves else None
        smallest = self._packer.min_step_bytes()
        if smallest > ring_bytes:
            raise ConfigError(
                f"one step needs {smallest} bytes of ring but ring_bytes={ring_bytes}; use ring_bytes >= {4 * smallest}"
            )
        self.settings = _settings(opts, batch_bytes, ring_bytes, compression, max_bytes, commit_interval)
        remove_stale_tmp(self.directory, self.prefix)
        remove_dead_recordings(self.directory, keep=self.prefix)  # of recordings killed with their workers
        self._own = OwnFolder(self.directory, trace_file_names(self.prefix))  # opened once: see _record_failure_in_manifest
        self._folder_id = self._own.identity

        self._cfg = cfg = SerializerConfig(
            self.directory, self.prefix, obs_spec, act_spec, batch_bytes, env_id, dict(self.settings),
            faults=faults or from_env() or NO_FAULT, compression=compression, max_bytes=max_bytes,
            commit_interval=commit_interval, env=env_description, folder_id=self._folder_id,
            ship_ledger=ledger_name(self.prefix, store_url(opts.ship_to)) if opts.ship_to is not None else None,
        )
        self._shipper = shipper_for(opts, self.directory, self._folder_id, ShipTargets(prefixes=(self.prefix,), clip_recorders=()))
        self._stream = Stream(
            "serializer",
            cfg,
            opts,
            ring_bytes=ring_bytes,
            restart=RestartPolicy.hand_over(dataclasses.replace(cfg, resume=True, faults=NO_FAULT)),  # a fault fires once
            where=self.directory,
            on_broken=self._on_broken,
        )
        self.times = CallTimes() if opts.timing else None
        self._episode = -1
        self._step = 0
        self._lock = threading.RLock()  # one record at a time, whole (envrec.record.call_lock)
        self._closing = False
        self.infos_too_large = 0  # steps recorded with their info marked (envrec.record.oversized)
        self._commits = CommitWatcher(self.directory, self.manifest_path, on_batch_committed) if on_batch_committed else None
        self._held_warned = False
        if self._shipper is not None:
            self._wait_for_shipper()
        register_closer(self)

    def _wait_for_shipper(self) -> None:
        """The shipper's check of the store; a ConfigError closes what was started (nothing was recorded)."""
        assert self._shipper is not None
        try:
            self._shipper.wait_ready()
        except ConfigError:
            self._stream.close()
            self._own.close()
            raise

    def _choose_prefix(self, name_prefix: str | None, shipping: bool = False) -> str:
        if name_prefix is not None:
            prefix = check_prefix(f"{name_prefix}.{unique_suffix()}" if shipping else name_prefix)
            path = os.path.join(self.directory, manifest_name(prefix))
            if os.path.exists(path):
                raise ConfigError(f"{path} exists: choose another name_prefix or folder so no recording is overwritten")
            return prefix
        while True:
            prefix = f"{default_prefix()}.{unique_suffix()}" if shipping else default_prefix()
            if not os.path.exists(os.path.join(self.directory, manifest_name(prefix))):
                return prefix

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.directory, manifest_name(self.prefix))

    @property
    def closed(self) -> bool:
        return self._stream.closed

    @property
    def backlog_bytes(self) -> int:
        """Bytes of records sent that the serializer has not taken yet: 0 when it has caught up."""
        return self._stream.backlog_bytes

    @property
    def worker_pid(self) -> int:
        """The serializer's pid (a successor's after a hand-over)."""
        return self._stream.worker_pid

    @property
    def broken(self) -> str | None:
        return self._stream.broken

    # -- recording ---------------------------------------------------------
    def add_reset(
        self, observation, info: dict | None = None, *, seed: int | None = None, options: dict | None = None,
        replay: dict | None = None,
    ) -> None:
        """Start a new episode with its reset observation (ends the previous one).

        If the observation is refused (``RecordError``), the episode still
        begins: its steps are counted by the serializer as orphans, not
        attached to the previous episode. ``replay``: the reset's ``rng`` and
        ``reset_snapshot`` (``envrec.record.replay_capture``), or None.
        """
        t0 = perf_counter_ns()
        with self._lock:
            self._check_open()
            if self._commits is not None:
                self.poll()
            self._episode += 1
            self._step = 0
            if seed is None and options is None and not replay:
                meta = b""  # the common case: nothing to say
            else:
                meta = pack_info({"seed": seed, "options": options, **(replay or {})})
            packed = pack_info(info) if info else b""
            try:
                self._stream.send(ResetRecord(self._packer, self._episode, observation, meta, packed))
            except RecordTooLargeError as exc:
                smaller = self._info_that_fits(info, packed, exc)
                self._stream.send(ResetRecord(self._packer, self._episode, observation, meta, smaller))
        if self.times is not None:
            self.times.add(perf_counter_ns() - t0)

    def add_step(
        self, action, observation, reward, terminated, truncated, info: dict | None = None, snapshot: dict | None = None
    ) -> None:
        """Record one step of the current episode; ``snapshot``: the env's state after it
        (``envrec.record.replay_capture``), or None."""
        t0 = perf_counter_ns()
        with self._lock:
            if self._closing:
                self._refuse_while_closing()
            self._stream.check_open()
            if self._commits is not None:
                self.poll()
            if self._episode < 0:
                raise ClosedError("add_step() before any add_reset(): a trace episode starts with its reset observation")
            self._step += 1
            if snapshot is not None:
                info = {**(info or {}), SNAPSHOT_INFO_KEY: snapshot}  # taken out again by the serializer
            packed = pack_info(info) if info else b""
            episode, step = self._episode, self._step
            try:
                write_one_each = self._write_one_each
                if write_one_each is not None:
                    lead = (reward if type(reward) is float else reward_value(reward), terminated, truncated)
                    self._stream.send_call(write_one_each, episode, step, action, observation, packed, lead)
                else:
                    self._stream.send(StepRecord(self._packer, episode, step, action, observation, reward, terminated, truncated, packed))
            except RecordTooLargeError as exc:
                smaller = self._info_that_fits(info, packed, exc)
                self._stream.send(StepRecord(self._packer, episode, step, action, observation, reward, terminated, truncated, smaller))
        if self.times is not None:
            self.times.add(perf_counter_ns() - t0)

    def _info_that_fits(self, info: Any, packed: bytes, exc: RecordTooLargeError) -> bytes:
        """The info to record instead of one that makes its record too large for the ring (counted, the first
        one logged); ``exc`` again when the info is not to blame (a Text observation too large)."""
        budget = ((len(packed) + 7) & -8) - (exc.record_bytes - exc.ring_bytes)
        if not packed or budget < 0 or not exc.ring_bytes:
            raise exc
        self.infos_too_large += 1
        if self.infos_too_large == 1:
            logger.warning(
                "envrec: an info of %d bytes makes its record larger than the ring (ring_bytes=%d): the step is "
                "recorded with the info's largest values replaced by markers (counted in infos_too_large); raise "
                "ring_bytes to keep such infos whole", len(packed), exc.ring_bytes,
            )
        return info_that_fits(info, packed, budget, exc.ring_bytes)

    def poll(self) -> None:
        """Call ``on_batch_committed`` for the batches committed since the last look (every add_* does)."""
        if self._commits is not None:
            with self._lock:
                self._commits.poll(self._stream.status(Status.BATCHES))

    def _check_open(self) -> None:
        if self._closing:
            self._refuse_while_closing()
        self._stream.check_open()

    def _refuse_while_closing(self) -> None:
        self._stream.check_open()  # closed already: its usual words
        raise ClosedError("this recorder is being closed (close() was called in another thread): nothing more is recorded")

    # -- counters and ending -----------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters of this recording; every key is in docs/reference.md ("Stats")."""
        s = self._stream
        out = {
            "episodes_started": self._episode + 1,
            "infos_too_large": self.infos_too_large,
            **s.stats(),
            **(self.times.summary() if self.times is not None else {}),
            "episodes_written": s.status(Status.EPISODES),
            "steps_written": s.status(Status.STEPS),
            "steps_committed": s.status(Status.STEPS_COMMITTED),
            "batches": s.status(Status.BATCHES),
            "bytes_committed": s.status(Status.BYTES),
            "records_discarded": s.status(Status.DISCARDED),
            "records_poisoned": s.status(Status.POISONED),
            "batches_evicted": s.status(Status.EVICTED),
            "bytes_evicted": s.status(Status.BYTES_EVICTED),
            "commits": s.status(Status.COMMITS),
            "commit_us_total": s.status(Status.COMMIT_US),
        }
        if self._shipper is not None:
            out |= self._shipper.stats() | {"bytes_held_for_shipping": self._held_for_shipping()}
        if s.closed and s.broken is not None:
            out.update(self._committed_from_manifest())  # the last worker's words may not be the last commit's
        return out

    def _held_for_shipping(self) -> int:
        """Bytes over ``max_bytes`` the budget keeps for the shipper (warned once: shipping falls behind)."""
        held = self._stream.status(Status.HELD_FOR_SHIPPING)
        if held and not self._held_warned:
            self._held_warned = True
            logger.warning("envrec: shipping falls behind the disk budget: %d bytes over max_bytes wait in %s until "
                           "they are shipped (bytes_held_for_shipping)", held, self.directory)
        return held

    def _committed_from_manifest(self) -> dict[str, int]:
        """A broken recording's figures, from its manifest: what was committed, and the records lost.

        Lost are the records sent that no batch holds and that were not poisoned, discarded or orphan
        steps: those left in the ring and those the failed serializer had taken into its open batch
        (released from the ring by a checkpoint, for a successor that did not come) alike.
        """
        try:
            manifest = read_manifest(self.manifest_path)
            named, evicted = manifest["counters"], manifest.get("evicted") or {}
            out = {
                "batches": named["batches"] + evicted.get("batches", 0),
                "episodes_written": named["episodes"] + evicted.get("episodes", 0),
                "steps_committed": named["steps"] + evicted.get("steps", 0),
                "bytes_committed": named["bytes"] + evicted.get("bytes", 0),
                "batches_evicted": evicted.get("batches", 0),
                "bytes_evicted": evicted.get("bytes", 0),
                "records_poisoned": named.get("records_poisoned", 0),
            }
            kept = out["episodes_written"] + out["steps_committed"] + named.get("orphan_steps", 0)  # a reset per episode
            handled = kept + out["records_poisoned"] + self._stream.status(Status.DISCARDED)
            out["records_lost"] = self._stream.records_sent - handled
            return out
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def close(self) -> dict | None:
        """Flush everything, stop the worker, free the ring. Harmless when repeated, and in a forked child.

        From another thread: a call in progress is finished first, later ones raise ``ClosedError``
        (``envrec.record.call_lock``).
        """
        return close_once(self, self._stream, self._close)

    def _close(self) -> dict | None:
        unregister_closer(self)
        try:
            summary = self._stream.close(final_stats=self._env_stats())
        finally:
            if self._stream.worker.exitcode != 0 or self._stream.broken is not None:
                self._remove_leftovers()
            remove_checkpoints(self.directory, self.prefix, self._own)  # the last serializer is gone: no successor will need it
            if self._stream.broken is not None:
                self._record_failure_in_manifest(self._stream.broken)
            self._own.close()
            if self._shipper is not None:
                self._shipper.finish()  # everything committed is in the manifest now: shipped within the deadline
        if self._commits is not None:
            self._commits.poll(self.stats()["batches"])  # the last batches, committed by close
        logger.info("envrec: trace of %d episode(s) in %s: %s", self._episode + 1, self.manifest_path, summary_line(self.stats()))
        return summary

    def _on_broken(self, reason: str) -> None:
        """No serializer will come: the reason goes into the folder, the last one's unfinished files go."""
        self._record_failure_in_manifest(reason, only_if_missing=True)
        self._remove_leftovers(finished=(self._stream.worker_pid,))

    def _remove_leftovers(self, finished: tuple[int, ...] = ()) -> None:
        """What dead serializers left and no successor will use (``finished``: a failed one still exiting)."""
        removed = remove_leftovers(self.directory, self.prefix, finished, self._own)
        if removed:
            logger.info("envrec: removed %d unfinished file(s) of the failed serializer: %s", len(removed), ", ".join(removed))

    def _record_failure_in_manifest(self, reason: str, only_if_missing: bool = False) -> None:
        """The reason in the manifest; ``only_if_missing`` when the stream breaks (a serializer that never
        started wrote none), always at close. The recorder's folder is opened once (``_own``): the serializers
        check they open the same one (``folder_id``), and what the env process writes and removes there (this
        manifest, leftovers, checkpoints) goes into it, whatever is at its path by then."""
        cfg = self._cfg
        record_failure_in_manifest(
            self.manifest_path, reason, only_if_missing=only_if_missing, prefix=cfg.prefix, env_id=cfg.env_id,
            observation_space=cfg.observation_space, action_space=cfg.action_space, settings=cfg.settings, env=cfg.env,
            own=self._own,
        )

    def _env_stats(self) -> dict[str, Any]:
        """What only the env process knows, for the final manifest."""
        env_keys = ("episodes_started", "infos_too_large", "records_sent", "records_dropped", "records_lost", "blocked_s", "ring_high_water_bytes")
        stats = self.stats()
        return {k: stats[k] for k in env_keys if k in stats} | {k: v for k, v in stats.items() if k.startswith("call")}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
