"""Opt-in: close every recorder of this process when the job is told to stop.

By default envrec leaves the env process's signals alone: what SIGTERM or
SIGINT do there is the user's (or their framework's) business. The workers
need no help either way: they latch SIGTERM and commit everything the env
process handed over once it is gone (see ``envrec.workers.loop``). What
``close_on_signals()`` adds is a *clean* close: the open episode is ended
by ``close`` (not ``crash``), the final manifest and clip metadata carry
the env process's own stats, and ``on_clip_closed``/``on_batch_committed``
callbacks fire, before the signal goes on to do what it did before.

A signal that lands while the main thread is inside an envrec call (a few
microseconds of each step) is sent again ``RETRY_S`` later, so a recorder
is never closed halfway through writing a record.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sysconfig
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

from .closers import close_all

__all__ = ["RETRY_S", "close_on_signals"]

logger = logging.getLogger(__name__)

RETRY_S = 0.01  # how soon a signal that landed inside an envrec call is sent again


def close_on_signals(signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> None:
    """Close every open recorder when one of ``signals`` arrives, then let the signal act as before.

    Afterwards a signal whose handler was the default ends the process as it
    would have (SIGTERM: killed by SIGTERM, exit status 143 in a shell;
    SIGINT: ``KeyboardInterrupt``); a handler of your own installed before
    this call runs after the recorders are closed; an ignored signal stays
    ignored. Call it from the main thread (Python's rule for signal handlers).

    Args:
        signals: the signals to handle; SIGTERM (Slurm, ``timeout``, a Jupyter
            kernel's manager) and SIGINT (Ctrl-C) by default.

    Raises:
        ValueError: when called from a thread other than the main one.
    """
    for sig in signals:
        previous = signal.getsignal(sig)
        signal.signal(sig, functools.partial(_on_signal, previous=previous))


def _on_signal(signum: int, frame: FrameType | None, previous: Any) -> None:
    if _inside_envrec(frame):
        threading.Timer(RETRY_S, os.kill, (os.getpid(), signum)).start()
        return
    name = signal.Signals(signum).name
    logger.info("envrec: %s: closing every recorder of this process", name)
    close_all(f"on {name}")
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # the default (or a handler set outside Python): act as it would
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_STDLIB = sysconfig.get_paths()["stdlib"]


def _inside_envrec(frame: FrameType | None) -> bool:
    """True when the interrupted code is envrec's own, or the standard library called by it (a record
    may be half written); False in any other code, e.g. the env stepped inside a wrapper's ``step``."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "envrec" or module.startswith("envrec."):
            return True
        if not frame.f_code.co_filename.startswith(_STDLIB):
            return False
        frame = frame.f_back
    return False
