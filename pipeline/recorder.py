"""The env-side trace recorder: encodes resets and steps into a ring, supervises its worker.

Shutdown order (``close()``):

1. Post a CLOSE record (waiting for room while the serializer is alive).
2. Wait up to ``close_timeout_s`` for the serializer to finish its batch,
   write the final manifest, report ``("done", summary)`` and exit.
3. If it has not exited: SIGTERM, then SIGKILL, and say so in the log.
4. Detach and unlink the ring (the env process owns it), close the pipe.

A serializer that dies or fails while recording is noticed within
``STATUS_CHECK_INTERVAL_S`` (or at once by a write that waits for room):
the failure is logged once with its cause (exit status named as a signal,
or the worker's traceback), the stream is marked broken, and further records
are counted as dropped while the env goes on. With ``strict=True`` the next
recorder call raises ``WorkerError`` instead, the traceback as its cause.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import signal
import time
import weakref
from typing import Any

from .atomic import remove_stale_tmp
from .errors import ConfigError, RecordError, RemoteTraceback, WorkerError
from .infos import pack_info
from .records import Kind, Status
from .packer import TracePacker
from .ring import ConsumerGone, RingWriter
from .schema import describe_space
from .shm import sweep_orphans
from .trace_format import check_prefix, default_prefix, manifest_name

__all__ = ["TraceRecorder", "DEFAULT_RING_BYTES", "BACKPRESSURE_POLICIES"]

logger = logging.getLogger(__name__)

DEFAULT_RING_BYTES = 64 << 20  # ~650 Atari-sized steps of slack: a slow disk second does not block the env
STATUS_CHECK_INTERVAL_S = 0.5  # how late a dead or failed worker may be noticed by a running recorder
BACKPRESSURE_POLICIES = ("block", "drop")


def signal_name(exitcode: int | None) -> str:
    """'SIGKILL(-9)' for a process killed by a signal, 'exit code 3' otherwise."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"{signal.Signals(-exitcode).name}({exitcode})"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def _check_folder(directory: str) -> str:
    directory = os.path.abspath(os.fspath(directory))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {directory}: {exc.strerror}") from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"the output folder {directory} is not writable by this process")
    return directory


class TraceRecorder:
    """Records one environment's resets and steps into ``directory`` as trace batches.

    The calls ``add_reset`` / ``add_step`` copy each array once into a
    shared-memory ring; a serializer worker process writes the batches.
    ``backpressure`` says what happens when the ring is full: ``"block"``
    waits for room (nothing is lost; ``block_timeout_s`` bounds the wait,
    after which the record is dropped and counted), ``"drop"`` drops the
    record at once and counts it.
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
        ring_bytes: int = DEFAULT_RING_BYTES,
        backpressure: str = "block",
        block_timeout_s: float | None = None,
        strict: bool = False,
        start_method: str = "spawn",
        close_timeout_s: float = 60.0,
    ) -> None:
        if backpressure not in BACKPRESSURE_POLICIES:
            raise ConfigError(f"backpressure must be one of {BACKPRESSURE_POLICIES}, not {backpressure!r}")
        if batch_bytes <= 0:
            raise ConfigError(f"batch_bytes must be positive, not {batch_bytes}")
        self.directory = _check_folder(directory)
        self.prefix = self._choose_prefix(name_prefix)
        obs_spec, act_spec = describe_space(observation_space), describe_space(action_space)
        self._packer = TracePacker(obs_spec, act_spec)
        smallest = self._packer.min_step_bytes()
        if smallest > ring_bytes:
            raise ConfigError(
                f"one step needs {smallest} bytes of ring but ring_bytes={ring_bytes}; "
                f"use ring_bytes >= {4 * smallest}"
            )
        self.backpressure = backpressure
        self.block_timeout_s = block_timeout_s
        self.strict = strict
        self.close_timeout_s = close_timeout_s
        self.settings = {
            "batch_bytes": batch_bytes,
            "ring_bytes": ring_bytes,
            "backpressure": backpressure,
            "block_timeout_s": block_timeout_s,
            "start_method": start_method,
        }
        sweep_orphans()
        remove_stale_tmp(self.directory, self.prefix)

        from envrec.workers.entry import serializer_main
        from envrec.workers.serializer import SerializerConfig

        cfg = SerializerConfig(
            self.directory, self.prefix, obs_spec, act_spec, batch_bytes, env_id, dict(self.settings)
        )
        ctx = mp.get_context(start_method)
        self._ring = RingWriter(ring_bytes, ctx)
        self._ring.set_policy(backpressure == "block", block_timeout_s, self._worker_usable)
        try:
            self._conn, child_conn = ctx.Pipe(duplex=False)
            self._proc = ctx.Process(
                target=serializer_main,
                args=(cfg, self._ring.spec, child_conn, os.getpid()),
                name=f"envrec-serializer[{self.prefix}]",
                daemon=True,
            )
            self._proc.start()
            child_conn.close()
            self.worker_pid: int = self._proc.pid
        except BaseException:
            self._ring.close()
            raise
        self._episode = -1
        self._step = 0
        self.records_dropped = 0
        self.broken: str | None = None
        self._broken_cause: BaseException | None = None
        self._next_check = time.monotonic() + STATUS_CHECK_INTERVAL_S
        self.summary: dict | None = None
        self.closed = False
        _live.add(self)

    def _choose_prefix(self, name_prefix: str | None) -> str:
        if name_prefix is not None:
            prefix = check_prefix(name_prefix)
            if os.path.exists(os.path.join(self.directory, manifest_name(prefix))):
                raise ConfigError(
                    f"{os.path.join(self.directory, manifest_name(prefix))} exists: "
                    f"choose another name_prefix or folder so no recording is overwritten"
                )
            return prefix
        while True:
            prefix = default_prefix()
            if not os.path.exists(os.path.join(self.directory, manifest_name(prefix))):
                return prefix

    # -- recording ---------------------------------------------------------
    @property
    def manifest_path(self) -> str:
        return os.path.join(self.directory, manifest_name(self.prefix))

    def add_reset(self, observation, info: dict | None = None, *, seed: int | None = None, options: dict | None = None) -> None:
        """Start a new episode with its reset observation (ends the previous one).

        If the observation is refused (``RecordError``), the episode still
        begins: its steps are counted by the serializer as orphans, not
        attached to the previous episode.
        """
        self._check_open()
        self._episode += 1
        self._step = 0
        meta = pack_info({"seed": seed, "options": options})
        self._send(self._packer.write_reset, self._episode, observation, meta, pack_info(info) if info else b"")

    def add_step(self, action, observation, reward, terminated, truncated, info: dict | None = None) -> None:
        """Record one step of the current episode."""
        self._check_open()
        if self._episode < 0:
            raise RecordError("add_step() before any add_reset(): a trace episode starts with its reset observation")
        self._step += 1
        self._send(
            self._packer.write_step,
            self._episode,
            self._step,
            action,
            observation,
            reward,
            terminated,
            truncated,
            pack_info(info) if info else b"",
        )

    def _check_open(self) -> None:
        if self.closed:
            raise RecordError("this recorder is closed")
        if self.strict and self._broken_cause is not None:
            raise WorkerError(f"the trace stream is broken: {self.broken}") from self._broken_cause

    def _send(self, write, *args) -> None:
        """Write one record through ``write`` under the backpressure policy; count it if dropped."""
        if self.broken is None:
            try:
                ok = write(self._ring, *args)
            except ConsumerGone:
                self._check_worker()
                ok = False
            if not ok:
                self.records_dropped += 1
        else:
            self.records_dropped += 1
        if time.monotonic() >= self._next_check:
            self._check_worker()

    # -- supervision -------------------------------------------------------
    def _worker_usable(self) -> bool:
        return self._proc.exitcode is None and not self._ring.status(Status.BROKEN)

    def _check_worker(self) -> None:
        self._next_check = time.monotonic() + STATUS_CHECK_INTERVAL_S
        if self.broken is not None:
            return
        tb = self._read_messages()
        if tb is not None or self._ring.status(Status.BROKEN):
            self._mark_broken("the serializer failed", RemoteTraceback(tb) if tb else None)
        elif self._proc.exitcode is not None:
            self._mark_broken(f"the serializer process died ({signal_name(self._proc.exitcode)}){self._start_hint()}", None)
        if self.strict and self._broken_cause is not None:
            raise WorkerError(f"the trace stream is broken: {self.broken}") from self._broken_cause

    def _start_hint(self) -> str:
        if self._ring.status(Status.READY) or self.settings["start_method"] == "fork":
            return ""
        return (
            "; it never started: with the 'spawn' start method the worker re-imports your main script, "
            "so guard the script's top-level code with `if __name__ == '__main__':`"
        )

    def _read_messages(self) -> str | None:
        tb = None
        try:
            while self._conn.poll():
                what, payload = self._conn.recv()
                if what == "error":
                    tb = payload
                elif what == "done":
                    self.summary = payload
        except (EOFError, OSError):
            pass
        return tb

    def _mark_broken(self, why: str, cause: BaseException | None) -> None:
        last = f": {str(cause).strip().splitlines()[-2]}" if cause is not None and len(str(cause).strip().splitlines()) > 1 else ""
        self.broken = why + last
        self._broken_cause = cause or WorkerError(why)
        logger.error(
            "envrec: trace recording into %s is broken (%s); the environment goes on, "
            "later records are dropped and counted. Batches committed so far are intact.%s",
            self.directory,
            self.broken,
            f"\nWorker traceback:{cause}" if cause is not None else "",
        )

    # -- ending ------------------------------------------------------------
    def _worker_counters(self) -> dict[str, int]:
        if self._ring.closed:
            return self._final_counters
        status = self._ring.status
        return {
            "episodes_written": status(Status.EPISODES),
            "steps_written": status(Status.STEPS),
            "steps_committed": status(Status.STEPS_COMMITTED),
            "batches": status(Status.BATCHES),
            "bytes_committed": status(Status.BYTES),
            "records_discarded": status(Status.DISCARDED),
        }

    def stats(self) -> dict[str, Any]:
        """Counters of this recording; the keys are listed in the README ("Stats")."""
        return {
            "episodes_started": self._episode + 1,
            "records_sent": self._ring.records,
            "records_dropped": self.records_dropped,
            "blocked_s": self._ring.blocked_s,
            "ring_high_water_bytes": self._ring.high_water,
            "ring_bytes": self._ring.capacity,
            **self._worker_counters(),
            "broken": self.broken,
            "worker_pid": self.worker_pid,
        }

    def close(self) -> dict | None:
        """Flush everything, stop the worker, free the ring. Harmless when repeated."""
        if self.closed:
            return self.summary
        self.closed = True
        _live.discard(self)
        try:
            if self._proc.exitcode is None:
                try:
                    self._ring.set_policy(True, None, self._proc_alive)  # CLOSE is never dropped
                    self._ring.write(Kind.CLOSE, max(self._episode, 0), self._step, ())
                except ConsumerGone:
                    pass
                self._proc.join(self.close_timeout_s)
            self._check_worker_after_close()
        finally:
            self._stop_process()
            self._final_counters = self._worker_counters()
            self._ring.close()
            self._conn.close()
            if self.worker_exitcode != 0:
                removed = remove_stale_tmp(self.directory, self.prefix)  # what the dead worker was writing
                if removed:
                    logger.info("envrec: removed %d unfinished file(s) of the dead serializer", len(removed))
        logger.info(
            "envrec: trace of %d episode(s) in %s (%s)%s",
            self._episode + 1,
            self.manifest_path,
            ", ".join(f"{k}={v}" for k, v in (self.summary or {}).items() if k != "error"),
            f"; dropped {self.records_dropped} record(s)" if self.records_dropped else "",
        )
        return self.summary

    def _proc_alive(self) -> bool:
        return self._proc.exitcode is None

    def _check_worker_after_close(self) -> None:
        tb = self._read_messages()
        if self.broken is None and tb is not None:
            self._mark_broken("the serializer failed", RemoteTraceback(tb))
        elif self.broken is None and self.summary is None:
            self._mark_broken(
                f"the serializer ended without finishing ({signal_name(self._proc.exitcode)}){self._start_hint()}", None
            )

    def _stop_process(self) -> None:
        proc = self._proc
        if proc.exitcode is None:
            logger.warning("envrec: serializer did not finish within %.0f s; terminating it", self.close_timeout_s)
            proc.terminate()
            proc.join(2.0)
        if proc.exitcode is None:
            proc.kill()
            proc.join(2.0)
        self.worker_exitcode = proc.exitcode
        proc.close()
        self._proc = None  # it holds the ring's semaphores, which are unlinked once unreferenced

    def __enter__(self) -> "TraceRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_live: "weakref.WeakSet[TraceRecorder]" = weakref.WeakSet()


@atexit.register
def _close_live_recorders() -> None:
    """Close recorders the program forgot, before multiprocessing reaps daemonic workers."""
    for rec in list(_live):
        try:
            rec.close()
        except Exception:  # at exit, one failing recorder must not keep the others from closing
            logger.exception("envrec: closing a recorder at exit failed")
