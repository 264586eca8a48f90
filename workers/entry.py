"""Process entry points of the workers (top-level functions, so ``spawn`` finds them).

Shutdown protocol of a worker (the env side's is in ``envrec.supervisor``):

1. Normal: the recorder posts a CLOSE record. The worker finalizes what is
   open (episode and batch, or clip), writes its final files, sends
   ``("done", summary)`` on its pipe and exits 0.
2. The env process died (its pid is no longer our parent): the worker
   drains every record already published, finalizes as in 1 but records that
   the recording did not close cleanly, and exits 0.
3. The worker itself fails (an exception: disk full, permission denied...):
   it sends ``("error", traceback)``, raises the BROKEN status word, drops its
   temporary files, keeps what was committed, and goes on consuming and
   discarding records so the env process never blocks on it, until 1 or 2.

SIGINT is ignored: a Ctrl-C in the terminal reaches the whole process group,
and it is the env process that decides how the recording ends.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import time
import traceback
from typing import Any, Callable

from envrec.records import Kind, Status
from envrec.ring import RingReader, RingSpec

from .resources import resources

__all__ = ["serializer_main", "encoder_main", "vector_serializer_main"]

logger = logging.getLogger("envrec.workers")

PARENT_CHECK_S = 0.5  # how long a worker may go without noticing its env process is gone
# When the ring runs dry the worker naps this long before it sleeps on the ring's
# semaphore: records posted meanwhile wake no one, so the env process pays no
# system call per step, and the worker handles them in one burst.
COALESCE_S = 0.002


def serializer_main(cfg, ring_spec: RingSpec, conn, parent_pid: int) -> None:
    """Run a trace serializer until its recorder closes or its env process dies."""
    from .serializer import Serializer

    _run(lambda status: Serializer(cfg, status=status), ring_spec, conn, parent_pid)


def encoder_main(cfg, ring_spec: RingSpec, conn, parent_pid: int) -> None:
    """Run a video encoder until its recorder closes or its env process dies."""
    from .encoder import Encoder

    _run(lambda status: Encoder(cfg, status=status), ring_spec, conn, parent_pid)


def vector_serializer_main(cfg, ring_spec: RingSpec, conn, parent_pid: int) -> None:
    """Run a vector trace serializer (one trace per sub-env) until its recorder closes or its env process dies."""
    from .vector_serializer import VectorSerializer

    _run(lambda status: VectorSerializer(cfg, status=status), ring_spec, conn, parent_pid)


def _run(make: Callable[[Callable], Any], ring_spec: RingSpec, conn, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()
    reader = RingReader(ring_spec)
    handler = None
    try:
        try:
            handler = make(reader.set_status)
        except Exception:
            _fail(conn, reader, None)
        reader.set_status(Status.READY, 1)
        _loop(reader, handler, conn, parent_pid)
    finally:
        reader.close()
        conn.close()


def _fail(conn, reader: RingReader, handler) -> None:
    tb = traceback.format_exc()
    logger.error("envrec worker failed; its stream is broken:\n%s", tb)
    reader.set_status(Status.BROKEN, 1)
    if handler is not None:
        handler.abort(tb.strip().splitlines()[-1])
    try:
        conn.send(("error", tb))
    except OSError:
        pass


def _parent_gone(parent_pid: int) -> bool:
    return os.getppid() != parent_pid


def _loop(reader: RingReader, handler, conn, parent_pid: int) -> None:
    broken = handler is None
    discarded = 0
    while True:
        rec = reader.poll()
        if rec is None:
            time.sleep(COALESCE_S)
            rec = reader.poll() or reader.next(PARENT_CHECK_S)
        if rec is None:
            if _parent_gone(parent_pid):
                break
            continue
        done = rec.kind == Kind.CLOSE
        if broken:
            discarded += 1
            reader.set_status(Status.DISCARDED, discarded)
        else:
            try:
                done = handler.handle(rec)
            except Exception:
                _fail(conn, reader, handler)
                broken = True
        reader.release()
        if done:
            _send_done(conn, handler)
            return
    # The env process is gone: drain what it published, then finalize.
    while not broken and (rec := reader.poll()) is not None:
        try:
            closed = handler.handle(rec)
        except Exception:
            _fail(conn, reader, handler)
            broken = True
            break
        reader.release()
        if closed:
            return
    if not broken:
        try:
            handler.finish(clean=False)
        except Exception:
            _fail(conn, reader, handler)


def _send_done(conn, handler) -> None:
    summary = handler.summary() if handler is not None else {"error": "the worker never started"}
    summary["process"] = resources()
    try:
        conn.send(("done", summary))
    except OSError:
        pass
