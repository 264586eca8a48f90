"""Env side: the recorders of this process still open, closed at interpreter exit or on a signal.

Every recorder registers itself when it starts (``register_closer``) and
leaves when it is closed (``unregister_closer``). ``close_all`` closes the
ones a program forgot: at interpreter exit (before multiprocessing reaps
anything), and on SIGTERM/SIGINT when ``envrec.close_on_signals`` asked for
it (``envrec.supervision.signals``). A process forked from this one closes
none of them: the recordings are its parent's.
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
from typing import Any

from .spare import spare_workers

__all__ = ["close_all", "register_closer", "unregister_closer"]

logger = logging.getLogger(__name__)

_live: weakref.WeakSet[Any] = weakref.WeakSet()


def register_closer(obj: Any) -> None:
    """Close ``obj`` at interpreter exit if the program forgot to (before multiprocessing reaps workers)."""
    _live.add(obj)


def unregister_closer(obj: Any) -> None:
    """``obj`` was closed: nothing is left to do for it at exit."""
    _live.discard(obj)


def close_all(why: str) -> None:
    """Close every recorder of this process still open (at exit, or on a signal: see ``envrec.supervision.signals``);
    its spare workers leave first (``envrec.supervision.spare``), and no more start."""
    with spare_workers().paused():
        for obj in list(_live):
            try:
                obj.close()
            except Exception:  # one failing recorder must not keep the others from closing
                logger.exception("envrec: closing a recorder %s failed", why)


@atexit.register
def _close_forgotten() -> None:
    close_all("at exit")


def _forget_in_child() -> None:
    _live.clear()  # a forked child never closes its parent's recorders (at exit or on a signal)


os.register_at_fork(after_in_child=_forget_in_child)
