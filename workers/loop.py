"""Main functions of the workers, one per role (``MAINS``), run by ``python -m envrec.workers``, and the
worker loop they run (``handle_records``), which hands each record to the role's ``Handler``.

Shutdown protocol of a worker (the env side's is in ``envrec.supervision.supervisor``):

1. Normal: the recorder posts a CLOSE record. The worker finalizes what is
   open (episode and batch, or clip), writes its final files, sends
   ``("done", summary)`` on its pipe and exits 0.
2. The env process died (its pid is no longer our parent; the kernel's
   parent-death signal wakes the worker at once, ``os.getppid()`` checked
   every ``PARENT_CHECK_S`` covers systems without it): the worker drains
   every record already published, finalizes as in 1 but records that the
   recording did not close cleanly (a serializer drops its checkpoint: no
   successor can come), and exits 0. Nothing is left to free: the ring is a
   memfd, which the kernel frees with the last process holding it
   (``envrec.contract.shm``).
3. The worker itself fails (an exception: disk full, permission denied...):
   it sends ``("error", traceback)``, raises the BROKEN status word, drops its
   temporary files, keeps what was committed, and goes on consuming and
   discarding records so the env process never blocks on it, until 1 or 2.
   A worker whose handler hands over (a ``CheckpointingHandler``, the
   serializer: ``ReleasePolicy.CHECKPOINTED``) instead publishes where the
   record it failed on lies (``FAILED_AT``/``FAILED_END``) and exits 1,
   leaving every record no checkpoint covers in the ring (all of them if it
   failed to start); its
   successor resumes from the last checkpoint (see ``Suspect``): it takes a
   checkpoint before each record of that range and tries again, one record
   at a time. Failing again there pins the record down: the next successor
   resumes just before it and skips it (``quarantine``), so one record that
   makes the worker fail every time costs that record and nothing else.

SIGINT is ignored: a Ctrl-C in the terminal reaches the whole process group,
and it is the env process that decides how the recording ends. SIGTERM (what
Slurm, ``timeout`` and a Jupyter kernel's manager send to the whole process
group) is latched, not obeyed: the worker goes on until its env process
closes the recording (1) or is gone (2), then drains the ring and commits as
in 2, naming the signal in its final files (``terminated_by``). A SIGTERM to
the worker alone while its env process lives changes nothing: nothing it
holds is lost, and the env process still decides when the recording ends.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from envrec.contract.protocol import DONE, ERROR, CheckpointingHandler, Handler, Kind, ReleasePolicy, Status, Suspect
from envrec.contract.ring import RingSpec
from envrec.contract.ring_reader import RingReader
from envrec.option_checks import seconds_from_env

from .resources import resources

__all__ = ["MAINS", "encoder_main", "handle_records", "latch_termination", "serializer_main", "vector_serializer_main"]

logger = logging.getLogger("envrec.workers")

PARENT_CHECK_S = 0.5  # how long a worker may go without noticing its env process is gone
# When the ring runs dry the worker naps this long and looks again, without asking to be
# woken: records published meanwhile cost the env process no system call, and the worker
# handles them in one burst. Waking a sleeping process costs the waker ~100 µs on this
# kind of VM (an inter-processor interrupt), more than copying a 100 KB frame.
COALESCE_S = 0.002
# Only after this long without a record does the worker sleep until it is woken (the
# producer then posts the ring's eventfd once): an idle recorder costs no CPU.
SLEEP_AFTER_IDLE_S = 0.1
# Most records a handler with a ``run_template`` takes at once (its checkpoint cadence bounds it anyway).
RUN_RECORDS = 256
# A scheduler (timeout, Slurm) signals the env process, then its process group: the worker may see its env process
# gone a moment before its own SIGTERM comes, and waits this long for it before naming no signal in its final files.
GROUP_SIGNAL_GRACE_S = 0.25
# After a SIGTERM, how long a worker whose env process is gone drains the ring before it finalizes what it has: Slurm
# sends SIGKILL 30 s after SIGTERM, and the final commit (the open episode and batch, the manifest) needs time too.
# What is left in the ring then is counted (``records_not_drained``), not written. ``$ENVREC_DRAIN_DEADLINE_S`` sets it.
DRAIN_DEADLINE_S = 20.0
DRAIN_DEADLINE_ENV_VAR = "ENVREC_DRAIN_DEADLINE_S"
MAX_TRACEBACK_CHARS = 16_384  # a quarter of a pipe's buffer: the report, sent whole, never blocks
TRACEBACK_HEAD_LINES, TRACEBACK_TAIL_LINES = 12, 48  # what a cut traceback keeps of a long one

_terminated_by: str | None = None  # the signal that asked this worker to end (latched by latch_termination)
_terminated_at = 0.0  # when it came (time.monotonic())


def latch_termination(signum: int) -> None:
    """Signal handler's half (async-signal-safe: one assignment): remember that the job is being ended."""
    global _terminated_by, _terminated_at
    if _terminated_by is None:
        _terminated_at = time.monotonic()
    _terminated_by = signal.Signals(signum).name


def drain_deadline_s() -> float:
    """``DRAIN_DEADLINE_S``, or ``$ENVREC_DRAIN_DEADLINE_S`` when it holds a positive number."""
    return seconds_from_env(DRAIN_DEADLINE_ENV_VAR, DRAIN_DEADLINE_S)


def serializer_main(cfg, ring_spec: RingSpec, conn, parent_pid: int) -> None:
    """Run a trace serializer until its recorder closes or its env process dies."""
    from .serializer import Serializer

    _run(cfg, Serializer, ring_spec, conn, parent_pid)


def encoder_main(cfg, ring_spec: RingSpec, conn, parent_pid: int) -> None:
    """Run a video encoder until its recorder closes or its env process dies."""
    from .encoder import Encoder

    _run(cfg, Encoder, ring_spec, conn, parent_pid)


def vector_serializer_main(cfg, ring_spec: RingSpec, conn, parent_pid: int) -> None:
    """Run a vector trace serializer (one trace per sub-env) until its recorder closes or its env process dies."""
    from envrec.contract.open_files import raise_soft_limit

    from .vector_serializer import VectorSerializer

    raise_soft_limit()  # a file set per recorded sub-env: the env side checked they fit under the hard limit
    _run(cfg, VectorSerializer, ring_spec, conn, parent_pid)


MAINS: dict[str, Callable[[Any, RingSpec, Any, int], None]] = {
    "serializer": serializer_main,
    "encoder": encoder_main,
    "vector-serializer": vector_serializer_main,
}


def _run(cfg, role: type[Handler], ring_spec: RingSpec, conn, parent_pid: int) -> None:
    faulthandler.enable()
    reader = RingReader(ring_spec)
    handler: Handler | None = None
    failed = False
    try:
        try:
            cfg.faults.injector().point("start")
            handler = role(cfg, status=reader.set_status)
        except Exception:  # noqa: BLE001  (any failure of the handler is reported through the pipe)
            _fail(conn, reader, None)
            failed = role.release is ReleasePolicy.CHECKPOINTED  # then leave every record in the ring to a successor
        if not failed:
            reader.set_status(Status.READY, 1)
            try:
                failed = handle_records(reader, handler, conn, parent_pid)
            except Exception:  # noqa: BLE001  (a checkpoint between records failed: reported, then handed over)
                _fail(conn, reader, handler, hand_over=True)
                failed = True
    finally:
        reader.close()
        conn.close()
    if failed:
        sys.exit(1)  # handed over: a non-zero exit says the work is not finished


def _bounded(tb: str) -> str:
    """A traceback short enough for the report pipe's buffer: sent whole, it never blocks a worker whose env
    process is not reading (a RecursionError's runs 200 KB; the env process may be waiting for the exit)."""
    if len(tb) <= MAX_TRACEBACK_CHARS:
        return tb
    lines = tb.splitlines()
    head, tail = "\n".join(lines[:TRACEBACK_HEAD_LINES]), "\n".join(lines[-TRACEBACK_TAIL_LINES:])
    cut = f"\n  [... {len(lines) - TRACEBACK_HEAD_LINES - TRACEBACK_TAIL_LINES} lines left out ...]\n"
    return (head + cut + tail)[-MAX_TRACEBACK_CHARS:]


def _fail(conn, reader: RingReader, handler: Handler | None, hand_over: bool = False,
          blame: tuple[int, int, Exception] | None = None) -> None:
    """Report the exception being handled; ``blame``: the ring range of the record(s) being handled when
    it was raised, and the exception, for a successor (see ``Suspect``) unless the disk is to blame."""
    if blame is not None and not isinstance(blame[2], OSError | MemoryError):
        reader.set_status(Status.FAILED_AT, blame[0] + 1)  # before BROKEN: the env side reads both then
        reader.set_status(Status.FAILED_END, blame[1])
    tb = _bounded(traceback.format_exc())
    logger.error("envrec worker failed; its stream is broken:\n%s", tb)
    try:  # the traceback first: whoever sees BROKEN then finds it in the pipe
        conn.send((ERROR, tb))
    except OSError:
        pass
    reader.set_status(Status.BROKEN, 1)
    if handler is not None and not hand_over:
        handler.abort(tb.strip().splitlines()[-1])


def _drain_overdue(parent_pid: int | None = None) -> bool:
    """A SIGTERM came ``drain_deadline_s()`` ago or more (and, given ``parent_pid``, the env process is gone)."""
    overdue = _terminated_by is not None and time.monotonic() - _terminated_at >= drain_deadline_s()
    return overdue and (parent_pid is None or _parent_gone(parent_pid))


def _parent_gone(parent_pid: int) -> bool:
    return os.getppid() != parent_pid


def handle_records(reader: RingReader, handler: Handler | None, conn, parent_pid: int) -> bool:
    """The worker loop (tests run it in their own process): hand ``handler`` each record of ``reader`` until
    CLOSE or the env process is gone; True if the worker failed and hands over to a successor.

    Args:
        reader: the worker's end of the ring.
        handler: the role's handler; None (it failed to start): records are discarded and counted until CLOSE.
        conn: the report pipe (``DONE`` and ``ERROR`` go there).
        parent_pid: the env process: once it is no longer this process's parent, it is gone.
    """
    broken = handler is None
    policy, ckpt = _prepare(reader, handler)
    discarded = beats = 0
    last_record_at = time.monotonic()
    suspect = ckpt.suspect if ckpt is not None else None

    def poll():
        if handler is not None and not broken and suspect is None:  # one record at a time across a suspect range
            template = handler.run_template  # it may change (a clip's frame size)
            if template is not None and (run := reader.poll_run(template, RUN_RECORDS, reader.capacity // 8)) is not None:
                return run
        return reader.poll()

    while True:
        beats += 1
        reader.set_status(Status.HEARTBEAT, beats)
        if _terminated_by is not None and _drain_overdue(parent_pid):
            break  # the ring still full at the drain deadline: _drain_and_finish counts the rest
        start = reader.cursor
        rec = poll()
        if rec is None:
            start, rec = _wait_for_record(reader, poll, None if broken else handler, last_record_at)
        if rec is None:
            if _parent_gone(parent_pid):
                break
            if policy is ReleasePolicy.RELEASE_POINT and not broken:
                assert handler is not None  # not broken
                reader.release(handler.release_point(reader.cursor))
            continue
        last_record_at = time.monotonic()
        done = rec.kind == Kind.CLOSE
        if broken:
            discarded += rec.count
            reader.set_status(Status.DISCARDED, discarded)
        elif ckpt is not None and suspect is not None and suspect.covers(start) and _quarantined(ckpt, suspect, start, reader.cursor, rec):
            suspect = None  # skipped: the records after it go on as usual
        else:
            assert handler is not None  # not broken
            try:
                done = handler.handle(rec, start)
            except Exception as exc:  # noqa: BLE001  (reported through the pipe, then handed over)
                hand_over = ckpt is not None
                _fail(conn, reader, handler, hand_over=hand_over, blame=(start, reader.cursor, exc) if hand_over else None)
                if hand_over:
                    return True  # exit: the unreleased records wait in the ring for a successor
                broken = True
            if suspect is not None and reader.cursor >= suspect.end:
                suspect = None  # past the range without failing: it was not the records' fault
        _release(reader, policy, None if broken or done else handler, ckpt)
        if done:
            _send_done(conn, handler)
            return False
    if handler is not None and not broken:
        _drain_and_finish(reader, handler, conn)  # the env process is gone
    if ckpt is not None:
        ckpt.discard_checkpoint()
    return False


def _prepare(reader: RingReader, handler: Handler | None) -> tuple[ReleasePolicy, CheckpointingHandler | None]:
    """The handler's release policy, and the handler if it checkpoints (then the records its predecessor's
    checkpoint covers are skipped); the handler sees its ``ring``, a RELEASE_POINT handler its ``release_now``."""
    policy = handler.release if handler is not None else ReleasePolicy.HANDLED
    ckpt = handler if isinstance(handler, CheckpointingHandler) else None  # the policy is CHECKPOINTED
    if ckpt is not None:
        reader.skip_to(ckpt.resume_cursor)  # records its predecessor's checkpoint already covers
    if handler is not None:
        handler.ring = reader
    if handler is not None and policy is ReleasePolicy.RELEASE_POINT:
        handler.release_now = functools.partial(_release_if_waited_for, reader, handler)
    return policy, ckpt


def _release_if_waited_for(reader: RingReader, handler: Handler) -> None:
    """``Handler.release_now``: while a run of frames goes to ffmpeg, the room of those it has read is given
    back at once if the env process waits for room (else after the run), so that a full ring makes the env
    wait frame by frame, not a run at a time."""
    if reader.producer_waits():
        reader.release(handler.release_point(reader.cursor))


def _quarantined(ckpt: CheckpointingHandler, suspect: Suspect, start: int, end: int, rec) -> bool:
    """A record in a suspect range: skip it if it is the confirmed poison (True), else take a checkpoint
    just before it, so that failing on it again tells the next successor exactly which record to skip."""
    if suspect.confirmed and start == suspect.first:
        logger.warning("skipping the record at ring position %d: it made the serializer fail every time (%s)",
                       start, suspect.reason)
        ckpt.quarantine(rec, suspect.reason)
        if rec.kind == Kind.CLOSE:  # the end of the recording all the same (its env stats are lost)
            ckpt.finish(clean=True)
        else:
            ckpt.checkpoint(end)  # a successor of ours must not meet it again
        return True
    if not suspect.confirmed:
        ckpt.checkpoint(start)
    return False


def _release(reader: RingReader, policy: ReleasePolicy, handler: Handler | None, ckpt: CheckpointingHandler | None) -> None:
    """Give back the room of what was handled, as the handler's ``policy`` says (``handler`` None: all of
    it, the worker failed or is done; ``ckpt``: the handler when it is a ``CheckpointingHandler``)."""
    if handler is None or policy is ReleasePolicy.HANDLED:
        reader.release()
    elif policy is ReleasePolicy.RELEASE_POINT:
        reader.release(handler.release_point(reader.cursor))
    elif ckpt is not None and ckpt.checkpoint_due(reader.held_bytes(), reader.capacity):  # CHECKPOINTED
        ckpt.checkpoint(reader.cursor)
        reader.release()
    elif ckpt is not None:
        reader.release(ckpt.checkpointed)  # a commit's checkpoint covers what came before it


def _wait_for_record(reader: RingReader, poll: Callable[[], Any], handler: Handler | None, last_record_at: float):
    """The ring ran dry: do what the handler has due when idle (a commit: ``Handler.idle_in``), checkpoint
    what was handled when one is due (a handler that hands over), nap ``COALESCE_S`` and look again; after
    ``SLEEP_AFTER_IDLE_S`` without records, sleep until woken (or until the handler has something due).
    Returns (the ring position before the record, the record or None)."""
    wait_s = PARENT_CHECK_S
    ckpt = handler if isinstance(handler, CheckpointingHandler) else None
    if handler is not None and (idle_in := handler.idle_in()) is not None:
        if idle_in <= 0:
            handler.on_idle(reader.cursor)  # everything read is handled: its checkpoint may cover it all
            if ckpt is not None:
                reader.release(ckpt.checkpointed)
        else:
            wait_s = min(wait_s, idle_in)
    if ckpt is not None and reader.held_bytes():
        due_in = ckpt.idle_checkpoint_in()
        if due_in <= 0:
            ckpt.checkpoint(reader.cursor)  # idle: make what was handled durable, free the ring
            reader.release()
        else:
            wait_s = min(wait_s, due_in)  # come back for it even if no record arrives
    time.sleep(COALESCE_S)
    start = reader.cursor
    rec = poll()
    if rec is None and time.monotonic() - last_record_at >= SLEEP_AFTER_IDLE_S:
        rec = reader.next(wait_s)  # asks to be woken: the producer posts at its next record
    return start, rec


def _drain_and_finish(reader: RingReader, handler: Handler, conn) -> None:
    """The env process is gone: handle what it published, then finalize (not cleanly) unless a CLOSE came.

    After a SIGTERM the drain stops ``drain_deadline_s()`` after the signal: the records left are counted in the
    handler's ``records_not_drained`` and what was handled is finalized before the scheduler's SIGKILL."""
    if _terminated_by is not None:
        logger.info("the env process is gone after %s: committing what the ring holds", _terminated_by)
    while True:
        start = reader.cursor
        if _drain_overdue():
            handler.records_not_drained = _count_left(reader)
            logger.warning("%s %.1f s ago: %d record(s) left in the ring are not written (records_not_drained)",
                           _terminated_by, time.monotonic() - _terminated_at, handler.records_not_drained)
            break
        if (rec := reader.poll()) is None:
            break
        try:
            if handler.handle(rec, start):
                return
        except Exception:  # noqa: BLE001  (reported through the pipe)
            _fail(conn, reader, handler)
            return
    deadline = time.monotonic() + GROUP_SIGNAL_GRACE_S
    while _terminated_by is None and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        handler.finish(clean=False, terminated_by=_terminated_by)
    except Exception:  # noqa: BLE001  (reported through the pipe)
        _fail(conn, reader, handler)


def _count_left(reader: RingReader) -> int:
    """Records published and not yet read (read now, without handling them)."""
    n = 0
    while (rec := reader.poll()) is not None:
        n += rec.kind != Kind.CLOSE
    return n


def _send_done(conn, handler: Handler | None) -> None:
    summary = handler.summary() if handler is not None else {"error": "the worker never started"}
    summary["process"] = resources()
    with contextlib.suppress(OSError):
        conn.send((DONE, summary))
