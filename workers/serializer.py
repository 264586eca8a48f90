"""The serializer: turns the records of a trace ring into trace batches.

It keeps one episode open at a time (see ``batch_writer`` for how its fields
stream to disk), closes a batch once it reaches the target size or the commit
interval (an open episode cut into parts: see ``episode_parts``), and after
each batch rewrites the manifest atomically: a reader sees complete batches.

Every file it writes, moves or removes (batches, manifest and segments,
checkpoints, spills, their temporary files) is one of the recording's own
names (``PREFIX.*``, ``.PREFIX.*``), relative to the recording's folder opened
once at its start (``envrec.formats.ownfolder``): a symlink planted at a name
is refused, and a folder swapped for another (or a symlink) mid-recording
changes nothing, the recording goes on in the folder it opened."""

from __future__ import annotations

import json
import logging
import os
import time

import numpy as np

from envrec.contract.protocol import CheckpointingHandler, Kind, SerializerConfig, Status, StatusSink
from envrec.contract.records import TraceLayout
from envrec.contract.ring_reader import RUN, RecordRun
from envrec.formats.atomic import remove_stale_tmp
from envrec.formats.ownfolder import OwnFolder
from envrec.formats.ship_ledger import read_ledger
from envrec.formats.trace_format import BatchEntry, manifest_name, read_manifest, trace_file_names

from .batch_writer import BatchWriter
from .checkpoint import Checkpoint, CheckpointFile, read_checkpoint
from .episode_fields import EpisodeFields
from .episode_parts import EpisodeParts, IdleCommit, episode_record
from .field_sinks import ArrayField
from .manifest_writer import ManifestWriter
from .resources import resources
from .step_runs import StepRunWriter, read_reset_meta, write_info, write_rst

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
        # every file, relative to it (see above); FolderChanged when it is not the folder the env process opened
        self.own = OwnFolder(cfg.folder, trace_file_names(cfg.prefix), expect=cfg.folder_id)
        self.manifest_path = os.path.join(cfg.folder, manifest_name(cfg.prefix))
        self.fields = EpisodeFields(self.own, cfg.prefix, self.layout, cfg.observation_space, cfg.action_space, cfg.compression)
        self._wire_handlers()
        self._runs = StepRunWriter.for_layout(self.layout, self.fields, cfg.faults)
        obs_keys = [k for k in self.layout.reset_sections() if k[0] == "observations"]
        self.parts = EpisodeParts(self.fields, obs_keys, cfg.batch_bytes, cfg.commit_interval)
        self.batch: BatchWriter | None = None
        self.faults = cfg.faults.injector()
        self.manifest = ManifestWriter(self.own, cfg.prefix, self.faults.point)
        self.commits = self.commit_us = 0  # batch commits, and microseconds spent in them
        self.episode_open = False
        self.episodes_written = self.steps_total = self.records = self.orphan_steps = 0
        self.env_stats: dict = {}
        self._ep: dict = {}
        self.error: str | None = None
        self._since_checkpoint = 0
        self._checkpoint_at = 0.0
        self._cp_file = CheckpointFile(self.own, cfg.prefix)
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
                cursor=cursor, records=self.records, steps_total=self.steps_total,
                orphan_steps=self.orphan_steps, episodes_written=self.episodes_written, pending=pending,
                batch=self.batch.state() if self.batch is not None else None,
                episode_open=self.episode_open,
                ep=self.parts.checkpoint_ep(self._ep),
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
                self.batch = BatchWriter.reopen(self.own, self.cfg.prefix, cp.batch)
                self.parts.batch_opened()
            self.episode_open, self._ep = cp.episode_open, self.parts.resume_ep(cp.ep)
            self.fields.restore(cp.arrays, cp.jsons, cp.filters)
            for (f, _), (old_path, size) in zip(self.fields.spills, cp.spills, strict=True):
                f.take_over(old_path, size)
            self.resume_cursor = cp.cursor
            if "carry" in self._ep:  # it died between a part's commit and the start of the next part
                self._start_part()
            # From here on this worker's own files are the ones to resume from: say so before
            # dropping the predecessor's spills (a successor of ours may need them until then).
            self.checkpoint(self.resume_cursor, pending=pending)  # still pending until our manifest is written
            for old_path, _ in cp.spills:  # the checkpoint's paths: of this recording's naming, in its folder, only
                self.own.unlink(self.own.name_of(old_path))
        else:
            self.episodes_written = self.manifest.named.episodes + self.manifest.evicted.episodes
        remove_stale_tmp(self.cfg.folder, self.cfg.prefix)  # what the dead worker left and nothing needs
        if self.cfg.max_bytes is not None:
            self.manifest.sweep_evicted(keep=set())  # what an interrupted eviction left
        self._status(Status.RECORDS, self.records)
        self._status(Status.STEPS, self.steps_total)
        self._status(Status.EPISODES, self.episodes_written)
        # Before BATCHES: what this worker commits beyond it is its own, which ends a run of restarts in a row.
        self._status(Status.BATCHES_INHERITED, self.manifest.figures()["batches"])
        self._publish_commits()

    # -- fields ----------------------------------------------------------
    def _wire_handlers(self) -> None:
        """One function per record section, in the order of the sections (see ``TraceLayout``)."""
        special = {
            ("rst",): lambda mv: write_rst(self.fields, mv, self.batch, self._ep),
            ("infos",): lambda mv: write_info(self.fields.infos, mv, self._ep),
            ("meta",): lambda mv: self._ep.update(read_reset_meta(mv)),
        }
        sinks = self.fields.sinks
        handler = lambda key: special.get(key) or self._leaf_handler(sinks[key])
        self._step_handlers = [handler(k) for k in self.layout.step_sections()]
        self._reset_handlers = [handler(k) for k in self.layout.reset_sections()]

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
        self.own.close()  # the worker's last word on the folder

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
            if rec.sections and len(rec.sections[0]):
                self.env_stats = json.loads(bytes(rec.sections[0]))
            self.finish(clean=True)
            return True
        else:
            raise ValueError(f"unknown record kind {kind} in the trace ring")
        self._status(Status.RECORDS, self.records)
        return False

    def _on_reset(self, rec) -> None:
        if self.episode_open:
            self._end_episode("reset")
        if self.batch is not None and self.batch.episodes and self.parts.batch_due():
            self._commit(self.position)
        self._open_episode(None)
        self._ep = {"episode_id": rec.episode, "return": 0.0, "terminated": False, "truncated": False}
        for h, mv in zip(self._reset_handlers, rec.sections, strict=True):
            h(mv)
        self.episode_open = True

    def _open_episode(self, head_part: dict | None) -> None:
        """Start the open episode's fields (or its next part's, ``head_part``: then in a batch of its own)."""
        if self.batch is None:
            self.batch = BatchWriter(self.own, self.cfg.prefix, self.episodes_written, head_part,
                                     compress_json=self.fields.compressed)
            self.parts.batch_opened()
        self.batch.pad_bin()
        self.fields.start_episode(self.batch.bin_size)
        self.parts.episode_opened()

    def _on_step(self, rec) -> None:
        if not self.episode_open or rec.episode != self._ep["episode_id"]:
            self.orphan_steps += 1  # its episode's reset was refused or dropped: nothing to attach it to
            return
        if self._part_due(1):
            self.records -= 1  # the checkpoint of the cut covers the ring up to this record, not this record
            self._cut_part(self.position)
            self.records += 1
        for h, mv in zip(self._step_handlers, rec.sections, strict=True):
            h(mv)
        self.steps_total += 1
        self.batch.steps += 1  # type: ignore[union-attr]  # an open episode has its batch
        self._status(Status.STEPS, self.steps_total)

    def _on_step_run(self, run: RecordRun) -> None:
        """Steps of one episode at once (see ``StepRunWriter``); split where the episode is cut into parts."""
        n = run.count
        self._since_checkpoint += n - 1
        if not self.episode_open or run.episode != self._ep["episode_id"]:
            self.records += n - 1  # _handle counted one
            self.orphan_steps += n
            return
        assert self._runs is not None  # runs come only with a template
        self.records -= 1  # counted piece by piece: a cut inside the run checkpoints what came before it
        rows, done = run.rows, 0
        while done < n:
            if self._part_due(n - done):
                self._cut_part(self.position + done * rows.shape[1])  # the records of a run lie end to end
            k = min(n - done, self.parts.steps_until_full())
            self._runs.write(rows[done : done + k], self.batch, self._ep)  # type: ignore[arg-type]  # an open episode has its batch
            self.records += k
            self.steps_total += k
            self.batch.steps += k  # type: ignore[union-attr]  # as above
            done += k
        self._status(Status.STEPS, self.steps_total)

    # -- episode parts (see envrec.workers.episode_parts) -----------------------
    def _part_due(self, steps: int) -> bool:
        """Whether the open episode is to be cut before the next ``steps`` steps (never an empty part)."""
        return self.fields.rewards.rows > 0 and (self.parts.full() or self.parts.time_due(steps))

    def _cut_part(self, cursor: int, lift: bool = False) -> None:
        """Cut the open episode, commit its batch, start its next part (``lift``: no step yet, moved whole: ``lift_reset``)."""
        self._ep = (self.parts.lift_reset if lift else self.parts.close_part)(self.batch, self._ep)  # type: ignore[arg-type]
        self.faults.point("part:cut")
        self._commit(cursor)  # its checkpoint holds the carry: a successor starts the next part from it
        self._start_part()
        self.faults.point("part:next")

    def _start_part(self) -> None:
        part = self._ep.get("part")
        self._open_episode({"index": part, "first_step": self._ep["first_step"]} if part else None)
        self.parts.write_carry(self._ep.pop("carry"), self.batch)  # type: ignore[arg-type]  # just opened

    def idle_in(self) -> float | None:
        return self.parts.due_in(self.batch, self.episode_open)

    def on_idle(self, cursor: int) -> None:
        """The commit interval is over and no record came: commit what the open batch holds."""
        action = self.parts.idle_action(self.batch, self.episode_open, self._ep)
        if action is IdleCommit.END_EPISODE:
            self._end_episode("reset", cursor)  # it is over, its reset yet to come: written whole
        if action in (IdleCommit.CUT, IdleCommit.LIFT_RESET):
            self._cut_part(cursor, lift=action is IdleCommit.LIFT_RESET)
        elif action is not IdleCommit.WAIT and self.batch is not None:
            self._commit(cursor)

    def _end_episode(self, cause: str, cursor: int | None = None) -> None:
        """Write the open episode (its last part) into the batch; ``cursor``: as ``_commit``'s (default: ``position``)."""
        cursor = self.position if cursor is None else cursor
        ep = self._ep
        if ep.get("part") and not self.fields.rewards.rows:
            self._drop_empty_part(cursor)
            return
        ended = "terminated" if ep["terminated"] else "truncated" if ep["truncated"] else cause
        batch = self.batch
        assert batch is not None  # an open episode has its batch
        batch.write_episode(episode_record(ep, self.fields.rewards.rows, ended, continues=False), self.fields)
        self.episode_open = False
        self.episodes_written += 1
        # The episode is in the batch files now. If the last checkpoint was taken inside it, take one
        # before its spills are emptied, or a successor could resume from spill data that is gone.
        if self._cp_in_episode:
            self.checkpoint(cursor)
        self.fields.rewind()
        self._status(Status.EPISODES, self.episodes_written)
        if batch.size >= self.cfg.batch_bytes:
            self._commit(cursor)

    def end_episode(self) -> None:
        """End the open episode now: no reset of it will come here (its sub-env's next episode is not recorded)."""
        if self.episode_open:
            self._end_episode("reset")

    def _drop_empty_part(self, cursor: int) -> None:
        """It ended right after a cut made when idle: its part before, which says it continues, was its last."""
        batch, self.batch = self.batch, None
        self.episode_open = False
        self.episodes_written += 1
        self.fields.rewind()
        self.checkpoint(cursor)  # before its files go: the last checkpoint may name them
        if batch is not None:
            batch.abort()
        self._status(Status.EPISODES, self.episodes_written)

    def _commit(self, cursor: int) -> None:
        """Commit the open batch; ``cursor``: the ring position its checkpoint covers (the start of the
        record being handled, which is not done yet; or, between records, all that was handled)."""
        t0 = time.perf_counter()
        batch = self.batch
        assert batch is not None
        entry = batch.commit(self.faults.point)
        self.batch = None
        self.checkpoint(cursor, pending=entry)
        self.manifest.add(entry)
        self.faults.point("commit:manifest")
        self.write_manifest(complete=False)
        self.faults.point("commit:done")
        if self.cfg.max_bytes is not None:
            shipped = read_ledger(self.manifest.own.path, self.cfg.ship_ledger) if self.cfg.ship_ledger else None
            self.manifest.evict(self.cfg.max_bytes, lambda: self.write_manifest(complete=False), shipped)
        self.commits += 1
        self.commit_us += round((time.perf_counter() - t0) * 1e6)
        self._publish_commits()

    def _publish_commits(self) -> None:
        self.manifest.publish(self._status, self.commits, self.commit_us)

    # -- ending ----------------------------------------------------------
    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        """Write out the open episode and batch and the final manifest (see ``Handler.finish``)."""
        if self.episode_open:
            self._end_episode("close" if clean else "crash")
        if self.batch is not None and self.batch.episodes:
            self._commit(self.position)
        elif self.batch is not None:
            self.batch.abort()
            self.batch = None
        if clean and self._recorded_nothing():
            self.own.unlink(os.path.basename(self.manifest_path))
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
            **self.manifest.figures(),
            "commits": self.commits,
            "commit_us": self.commit_us,
            "records": self.records,
            "orphan_steps": self.orphan_steps,
            "records_poisoned": self.manifest.poisoned.count,
            "records_not_drained": self.records_not_drained,
            "error": self.error,
        }

    def write_manifest(self, complete: bool, clean: bool = True, terminated_by: str | None = None) -> None:
        stats = {"env_process": self.env_stats, "serializer": {**self.summary(), "process": resources()}} if complete else None
        self.manifest.write_head(
            os.path.basename(self.manifest_path), self.cfg, orphan_steps=self.orphan_steps, complete=complete, closed_cleanly=clean,
            stats=stats, error=self.error, terminated_by=terminated_by,
        )
