"""The serializer: turns the records of a trace ring into trace batches.

It keeps one episode open at a time (see ``batch_writer`` for how its fields
stream to disk), closes a batch once it reaches the target size, and after
each batch rewrites the manifest atomically so that a reader only ever sees
complete batches.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

import numpy as np

from envrec.contract.protocol import CheckpointingHandler, Kind, SerializerConfig, Status, StatusSink
from envrec.contract.records import TraceLayout
from envrec.contract.ring_reader import RUN, RecordRun
from envrec.formats.atomic import remove_stale_tmp
from envrec.formats.infos import encode_json, unpack_info
from envrec.formats.schema import decode_reward
from envrec.formats.trace_format import BatchEntry, manifest_document, manifest_name, read_manifest, write_manifest

from .batch_writer import BatchWriter
from .checkpoint import Checkpoint, CheckpointFile, read_checkpoint
from .episode_fields import EpisodeFields
from .field_sinks import ArrayField
from .manifest_writer import ManifestWriter
from .resources import resources
from .step_runs import EMPTY_INFO_JSON, StepRunWriter

__all__ = ["Serializer"]

logger = logging.getLogger(__name__)

CHECKPOINT_RECORDS = 256  # records that may wait in the ring between checkpoints (or a quarter of the ring)
# An idle serializer checkpoints what it handled so the ring is free again, but at most this often: with
# short episodes the ring runs dry every few milliseconds, and a checkpoint per dry spell (and another at
# the end of each episode it fell in) was a quarter of the serializer's CPU on CartPole (py-spy).
IDLE_CHECKPOINT_S = 0.05


class Serializer(CheckpointingHandler):
    """Consumes trace records (``handle``) and writes batches and the manifest; on a failure a successor
    takes over its ring from its last checkpoint (see ``envrec.workers.checkpoint``). Args: see ``Handler``."""

    cfg: SerializerConfig

    def __init__(self, cfg: SerializerConfig, status: StatusSink | None = None) -> None:
        super().__init__(cfg, status)
        self.layout = TraceLayout.from_specs(cfg.observation_space, cfg.action_space)
        self.manifest_path = os.path.join(cfg.folder, manifest_name(cfg.prefix))
        self.fields = EpisodeFields(cfg.folder, cfg.prefix, self.layout, cfg.observation_space, cfg.action_space, cfg.compression)
        self._wire_handlers()
        self._runs = StepRunWriter.for_layout(self.layout, self.fields, cfg.faults)
        self.batch: BatchWriter | None = None
        self.faults = cfg.faults.injector()
        self.manifest = ManifestWriter(cfg.folder, cfg.prefix, self.faults.point)
        self.commits = self.commit_us = 0  # batch commits, and microseconds spent in them
        self.episode_open = False
        self.episodes_written = self.steps_total = self.records = self.orphan_steps = 0
        self.env_stats: dict = {}
        self._ep: dict = {}
        self.error: str | None = None
        self._since_checkpoint = 0
        self._checkpoint_at = 0.0
        self._cp_file = CheckpointFile(cfg.folder, cfg.prefix)
        self.position = 0  # ring position where the record being handled starts
        self._cp_in_episode = False  # the last checkpoint needs the open episode's spill data
        self.suspect = cfg.suspect  # the record its predecessor failed on (see envrec.contract.protocol.Suspect)
        if cfg.resume:
            self._resume()
        self.write_manifest(complete=False)

    # -- checkpoints (see envrec.workers.checkpoint) -------------------------
    def checkpoint_due(self, held_bytes: int, capacity: int) -> bool:
        return self._since_checkpoint >= CHECKPOINT_RECORDS or held_bytes > capacity // 4

    def idle_checkpoint_in(self) -> float:
        return self._checkpoint_at + IDLE_CHECKPOINT_S - time.monotonic()

    def checkpoint(self, cursor: int, pending: BatchEntry | None = None) -> None:
        """Flush every file and record where they stand; records before ``cursor`` may then be released."""
        if not self.cfg.checkpoints:
            return
        if self.episode_open:
            for af in self.fields.arrays:
                af.flush_chunk(self.batch)  # rows waiting to be compressed are in no file yet
        self.fields.flush()
        self._cp_file.write(
            Checkpoint(
                cursor=cursor,
                records=self.records,
                steps_total=self.steps_total,
                orphan_steps=self.orphan_steps,
                episodes_written=self.episodes_written,
                pending=pending,
                batch=self.batch.state() if self.batch is not None else None,
                episode_open=self.episode_open,
                ep=self._ep,
                arrays=[[f.rows, f.offset, f.stored] for f in self.fields.arrays],
                jsons=[jf.items for jf in self.fields.jsons],
                spills=[[path, f.tell() if self.episode_open else 0] for f, path in self.fields.spills],
                filters=[f.packer.filter if f.packer is not None else None for f in self.fields.arrays],
            )
        )
        self._since_checkpoint = 0
        self._checkpoint_at = time.monotonic()
        self.checkpointed = cursor
        self._cp_in_episode = self.episode_open

    def _resume(self) -> None:
        """Take over from the serializer this one replaces: its manifest, then its last checkpoint."""
        try:
            self.manifest.load(read_manifest(self.manifest_path))
        except FileNotFoundError:
            pass
        found = read_checkpoint(self.cfg.folder, self.cfg.prefix)
        if found is not None:
            cp = found.checkpoint
            self._cp_file.continue_after(found)  # its newest checkpoint stays until ours is whole
            pending = cp.pending
            if pending is not None and not self.manifest.names(pending["fn"]):
                self.manifest.add(pending)  # it died between a batch commit and the manifest
            self.records, self.steps_total = cp.records, cp.steps_total
            self.orphan_steps, self.episodes_written = cp.orphan_steps, cp.episodes_written
            if cp.batch is not None:
                self.batch = BatchWriter.reopen(self.cfg.folder, self.cfg.prefix, cp.batch)
            self.episode_open, self._ep = cp.episode_open, cp.ep
            for af, (rows, offset, stored) in zip(self.fields.arrays, cp.arrays, strict=True):
                af.rows, af.offset, af.stored = rows, offset, stored
            for jf, items in zip(self.fields.jsons, cp.jsons, strict=True):
                jf.items = items
            for af, choice in zip(self.fields.arrays, cp.filters, strict=False):  # the recording's delta filters
                if af.packer is not None:
                    af.packer.choose(choice)
            for (f, _), (old_path, size) in zip(self.fields.spills, cp.spills, strict=True):
                f.take_over(old_path, size)
            self.resume_cursor = cp.cursor
            # From here on this worker's own files are the ones to resume from: say so before
            # dropping the predecessor's spills (a successor of ours may need them until then).
            self.checkpoint(self.resume_cursor, pending=pending)  # still pending until our manifest is written
            for old_path, _ in cp.spills:
                os.unlink(old_path)
        else:
            self.episodes_written = self.manifest.named.episodes + self.manifest.evicted.episodes
        remove_stale_tmp(self.cfg.folder, self.cfg.prefix)  # what the dead worker left and nothing needs
        if self.cfg.max_bytes is not None:
            self.manifest.sweep_evicted(keep=set())  # what an interrupted eviction left
        self._status(Status.RECORDS, self.records)
        self._status(Status.STEPS, self.steps_total)
        self._status(Status.EPISODES, self.episodes_written)
        self._publish_commits()

    # -- fields ----------------------------------------------------------
    def _wire_handlers(self) -> None:
        """One function per record part, in the order of the parts (see ``TraceLayout``)."""
        special = {
            ("rst",): self._on_rst,
            ("infos",): self._on_info,
            ("meta",): self._on_meta,
        }
        sinks = self.fields.sinks
        handler = lambda key: special.get(key) or self._leaf_handler(sinks[key])
        self._step_handlers = [handler(k) for k in self.layout.step_parts()]
        self._reset_handlers = [handler(k) for k in self.layout.reset_parts()]

    @property
    def run_template(self) -> np.ndarray | None:
        """The header of the steps the worker loop may hand over in runs (see ``StepRunWriter``), or None."""
        return self._runs.template if self._runs is not None and self.takes_runs else None

    def _leaf_handler(self, sink):
        if isinstance(sink, ArrayField):
            return lambda mv: sink.write(mv, self.batch)
        return lambda mv: sink.write(bytes(mv).decode("utf-8", "surrogatepass"))

    # -- records ---------------------------------------------------------
    def handle(self, rec, position: int) -> bool:
        """Consume one record; True once the recording is over (CLOSE)."""
        self.position = position
        try:
            return self._handle(rec)
        except OSError as exc:
            if exc.filename is None:  # a write error names no file: name the folder, so the error says where
                raise OSError(exc.errno, exc.strerror, self.cfg.folder) from exc
            raise

    def quarantine(self, rec, reason: str) -> None:
        """Skip a record that made the serializers before this one fail every time (see ``Suspect``)."""
        self.records += rec.count
        self.manifest.poisoned.add(rec, reason)
        self._publish_commits()
        self.write_manifest(complete=False)  # said at once: a later failure must not hide it

    def discard_checkpoint(self) -> None:
        self._cp_file.discard()

    def _handle(self, rec) -> bool:
        self.faults.point("record")
        self.records += 1
        self._since_checkpoint += 1
        kind = rec.kind
        if kind == Kind.STEP:
            self._on_step(rec)
        elif kind == RUN:
            self._on_step_run(rec)
        elif kind == Kind.RESET:
            self._on_reset(rec)
        elif kind == Kind.CLOSE:
            if rec.parts and len(rec.parts[0]):
                self.env_stats = json.loads(bytes(rec.parts[0]))
            self.finish(clean=True)
            return True
        else:
            raise ValueError(f"unknown record kind {kind} in the trace ring")
        self._status(Status.RECORDS, self.records)
        return False

    def _on_reset(self, rec) -> None:
        if self.episode_open:
            self._end_episode("reset")
        if self.batch is None:
            self.batch = BatchWriter(self.cfg.folder, self.cfg.prefix, self.episodes_written, compress_json=self.fields.compressed)
        self.batch.pad_bin()
        for f in self.fields.arrays:
            f.start_episode(self.batch.bin_size)
        for jf in self.fields.jsons:
            jf.items = 0
        self._ep = {"episode_id": rec.episode, "return": 0.0, "terminated": False, "truncated": False}
        for h, mv in zip(self._reset_handlers, rec.parts, strict=True):
            h(mv)
        self.episode_open = True

    def _on_meta(self, mv) -> None:
        meta = unpack_info(mv)
        self._ep["seed"] = meta.get("seed")
        self._ep["options"] = encode_json(meta.get("options"))

    def _on_info(self, mv) -> None:
        if not len(mv):  # the common case, an empty info: its JSON is known
            self.fields.infos.write_json_text(EMPTY_INFO_JSON)
            return
        try:
            info = unpack_info(mv)
        except Exception as exc:  # noqa: BLE001  (never let a strange info stop the recording)
            info = {"__envrec_error__": f"info could not be read: {exc!r}"}
        self.fields.infos.write(encode_json(info))

    def _on_rst(self, mv) -> None:
        batch, ep = self.batch, self._ep
        self.fields.rewards.write(mv[0:8], batch)
        self.fields.terms.write(mv[8:9], batch)
        self.fields.truncs.write(mv[9:10], batch)
        ep["return"] += decode_reward(mv[0:8])
        ep["terminated"] = mv[8] != 0
        ep["truncated"] = mv[9] != 0

    def _on_step(self, rec) -> None:
        if not self.episode_open or rec.episode != self._ep["episode_id"]:
            self.orphan_steps += 1  # its episode's reset was refused or dropped: nothing to attach it to
            return
        for h, mv in zip(self._step_handlers, rec.parts, strict=True):
            h(mv)
        self.steps_total += 1
        self.batch.steps += 1  # type: ignore[union-attr]  # an open episode has its batch
        self._status(Status.STEPS, self.steps_total)

    def _on_step_run(self, run: RecordRun) -> None:
        """Steps of one episode at once (see ``StepRunWriter``)."""
        n = run.count
        self.records += n - 1  # _handle counted one
        self._since_checkpoint += n - 1
        if not self.episode_open or run.episode != self._ep["episode_id"]:
            self.orphan_steps += n
            return
        assert self._runs is not None and self.batch is not None  # runs come only with a template; an open episode has its batch
        self._runs.write(run.rows, self.batch, self._ep)
        self.steps_total += n
        self.batch.steps += n
        self._status(Status.STEPS, self.steps_total)

    def _end_episode(self, cause: str) -> None:
        ep = self._ep
        ended = "terminated" if ep["terminated"] else "truncated" if ep["truncated"] else cause
        meta = {
            "episode_id": ep["episode_id"],
            "seed": ep.get("seed"),
            "options": ep.get("options"),
            "length": self.fields.rewards.rows,
            "return": ep["return"] if abs(ep["return"]) != float("inf") and ep["return"] == ep["return"] else None,
            "ended_by": ended,
            "complete": ended in ("terminated", "truncated"),
        }
        batch = self.batch
        assert batch is not None  # an open episode has its batch
        batch.write_episode(meta, self.fields)
        self.episode_open = False
        self.episodes_written += 1
        # The episode is in the batch files now. If the last checkpoint was taken inside it, take one
        # before its spills are emptied, or a successor could resume from spill data that is gone.
        if self._cp_in_episode:
            self.checkpoint(self.position)
        self.fields.rewind()
        self._status(Status.EPISODES, self.episodes_written)
        if batch.size >= self.cfg.batch_bytes:
            self._commit()

    def _commit(self) -> None:
        t0 = time.perf_counter()
        batch = self.batch
        assert batch is not None
        entry = batch.commit(self.faults.point)
        self.batch = None
        # The record being handled is not done yet: the checkpoint covers the ring up to its start.
        self.checkpoint(self.position, pending=entry)
        self.manifest.add(entry)
        self.faults.point("commit:manifest")
        self.write_manifest(complete=False)
        self.faults.point("commit:done")
        if self.cfg.max_bytes is not None:
            self.manifest.evict(self.cfg.max_bytes, lambda: self.write_manifest(complete=False))
        self.commits += 1
        self.commit_us += round((time.perf_counter() - t0) * 1e6)
        self._publish_commits()

    def _publish_commits(self) -> None:
        named, evicted = self.manifest.named, self.manifest.evicted
        self._status(Status.BATCHES, named.batches + evicted.batches)
        self._status(Status.BYTES, named.bytes + evicted.bytes)
        self._status(Status.STEPS_COMMITTED, named.steps + evicted.steps)
        self._status(Status.EVICTED, evicted.batches)
        self._status(Status.BYTES_EVICTED, evicted.bytes)
        self._status(Status.COMMITS, self.commits)
        self._status(Status.COMMIT_US, self.commit_us)
        self._status(Status.POISONED, self.manifest.poisoned.count)

    # -- ending ----------------------------------------------------------
    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        """Write out the open episode and batch and the final manifest (see ``Handler.finish``)."""
        if self.episode_open:
            self._end_episode("close" if clean else "crash")
        if self.batch is not None and self.batch.episodes:
            self._commit()
        elif self.batch is not None:
            self.batch.abort()
            self.batch = None
        if clean and self._recorded_nothing():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.manifest_path)
        else:
            self.write_manifest(complete=True, clean=clean, terminated_by=terminated_by)
        self.fields.close()
        # The checkpoint stays until the env process has seen this worker exit: killed between here
        # and its exit, a successor replays the CLOSE record from it and finds nothing left to do.

    def _recorded_nothing(self) -> bool:
        """Closed before any reset reached it: a recorder that recorded nothing leaves no recording behind
        (Gymnasium's AsyncVectorEnv builds its first sub-env once in the parent only to read its spaces)."""
        return not self.manifest.named.batches and self.episodes_written == 0 and self.orphan_steps == 0 and self.error is None

    def abort(self, error: str) -> None:
        """Give up after a failure: drop the open batch, keep what was committed."""
        self.error = error
        if self.batch is not None:
            self.batch.abort()
            self.batch = None
        self.episode_open = False
        self.fields.close()
        try:
            self.write_manifest(complete=False)
        except OSError as exc:
            logger.error("could not record the failure in %s: %s", self.manifest_path, exc)

    def summary(self) -> dict:
        return {
            "episodes": self.episodes_written,
            "steps": self.steps_total,
            "steps_committed": self.manifest.named.steps + self.manifest.evicted.steps,
            "batches": self.manifest.named.batches + self.manifest.evicted.batches,
            "bytes": self.manifest.named.bytes + self.manifest.evicted.bytes,
            "batches_evicted": self.manifest.evicted.batches,
            "bytes_evicted": self.manifest.evicted.bytes,
            "commits": self.commits,
            "commit_us": self.commit_us,
            "records": self.records,
            "orphan_steps": self.orphan_steps,
            "records_poisoned": self.manifest.poisoned.count,
            "error": self.error,
        }

    def write_manifest(self, complete: bool, clean: bool = True, terminated_by: str | None = None) -> None:
        cfg, named = self.cfg, self.manifest.named
        manifest = manifest_document(
            prefix=cfg.prefix,
            env_id=cfg.env_id,
            observation_space=cfg.observation_space,
            action_space=cfg.action_space,
            settings=cfg.settings,
            counters={
                "batches": named.batches,
                "episodes": named.episodes,
                "steps": named.steps,
                "bytes": named.bytes,
                "orphan_steps": self.orphan_steps,
                "records_poisoned": self.manifest.poisoned.count,
            },
            complete=complete,
            closed_cleanly=clean,
            stats={"env_process": self.env_stats, "serializer": {**self.summary(), "process": resources()}}
            if complete
            else None,
            error=self.error,
            terminated_by=terminated_by,
        )
        manifest.update(self.manifest.head_fields())
        write_manifest(self.manifest_path, manifest)
