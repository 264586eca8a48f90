"""Process entry points of the workers (top-level functions, so ``spawn`` finds them).

Shutdown protocol of a worker:

1. Normal: the recorder posts a CLOSE record. The worker finalizes the open
   episode and batch, writes the final manifest, sends ``("done", summary)``
   on its pipe and exits 0.
2. The env process died (its pid is no longer our parent): the worker
   drains every record already published, finalizes as in 1 but marks the
   manifest ``closed_cleanly: false``, and exits 0.
3. The worker itself fails (an exception: disk full, permission denied...):
   it sends ``("error", traceback)``, raises the BROKEN status word, drops
   its temporary files, keeps the manifest at its last commit (with the
   error recorded) and goes on consuming and discarding records so the env
   process never blocks on it, until 1 or 2.

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

from envrec.records import Status
from envrec.ring import RingReader, RingSpec

from .serializer import Serializer, SerializerConfig

__all__ = ["serializer_main"]

logger = logging.getLogger("envrec.workers")

PARENT_CHECK_S = 0.5  # how long a worker may go without noticing its env process is gone
# When the ring runs dry the worker naps this long before it sleeps on the ring's
# semaphore: records posted meanwhile wake no one, so the env process pays no
# system call per step, and the worker handles them in one burst.
COALESCE_S = 0.002


def _parent_gone(parent_pid: int) -> bool:
    return os.getppid() != parent_pid


def serializer_main(cfg: SerializerConfig, ring_spec: RingSpec, conn, parent_pid: int) -> None:
    """Run a serializer until its recorder closes or its env process dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()
    reader = RingReader(ring_spec)
    ser: Serializer | None = None
    try:
        try:
            ser = Serializer(cfg, status=reader.set_status)
        except Exception:
            _fail(conn, reader, None)
        reader.set_status(Status.READY, 1)
        _loop(reader, ser, conn, parent_pid)
    finally:
        reader.close()
        conn.close()


def _fail(conn, reader: RingReader, ser: Serializer | None) -> None:
    tb = traceback.format_exc()
    logger.error("envrec serializer failed; the trace stream is broken:\n%s", tb)
    reader.set_status(Status.BROKEN, 1)
    if ser is not None:
        ser.abort(tb.strip().splitlines()[-1])
    try:
        conn.send(("error", tb))
    except OSError:
        pass


def _loop(reader: RingReader, ser: Serializer | None, conn, parent_pid: int) -> None:
    broken = ser is None
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
        done = rec.kind == 3  # Kind.CLOSE, also honoured when broken
        if broken:
            discarded += 1
            reader.set_status(Status.DISCARDED, discarded)
        else:
            try:
                done = ser.handle(rec)
            except Exception:
                _fail(conn, reader, ser)
                broken = True
        reader.release()
        if done:
            _send_done(conn, ser, broken)
            return
    # The env process is gone: drain what it published, then finalize.
    while not broken and (rec := reader.poll()) is not None:
        try:
            closed = ser.handle(rec)
        except Exception:
            _fail(conn, reader, ser)
            broken = True
            break
        reader.release()
        if closed:
            return
    if not broken:
        try:
            ser.finish(clean=False)
        except Exception:
            _fail(conn, reader, ser)


def _send_done(conn, ser: Serializer | None, broken: bool) -> None:
    try:
        conn.send(("done", ser.summary() if ser is not None else {"error": "serializer never started"}))
    except OSError:
        pass
