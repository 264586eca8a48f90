"""Shipping as it goes: passes over a folder until told to finish, a store that does not answer waited out.

``follow`` runs ``FolderShipping.ship_pass`` every ``POLL_S`` while the
recording runs. A pass that fails is tried again after a delay that doubles
from ``FIRST_RETRY_S`` up to ``MAX_RETRY_S`` (a store away for minutes is
asked twice a minute at most, and shipping catches up once it answers); the
first failure of an outage is a warning, its end an info line, every retry
counted. When ``finishing()`` turns true (``close()``, the env process gone,
SIGTERM) it goes on until everything the recordings committed is shipped
and they ended, or until ``deadline_s`` has passed since: what is left then
stays in the local folder, which ``envrec ship DIR URL`` ships later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..formats.store import is_transient
from .counters import ShipCounter
from .shipping import FolderShipping

__all__ = ["FIRST_RETRY_S", "MAX_RETRY_S", "POLL_S", "follow"]

logger = logging.getLogger(__name__)

POLL_S = 0.2  # how often a running recording's folder is looked at for new commits
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 30.0


def follow(shipping: FolderShipping, finishing: Callable[[], bool], deadline_s: float,
           sleep: Callable[[float], None] = time.sleep, wait_for_end: bool = True,
           quiet_s: Callable[[], float] = lambda: 0.0) -> bool:
    """Ship until finished; True when everything was shipped, False when the deadline left some behind.

    Args:
        shipping: what to ship.
        finishing: turns true when the recordings will commit nothing more (or the caller wants to stop).
        deadline_s: how long to go on once ``finishing()``.
        sleep: how to wait between passes.
        wait_for_end: finish only once the recordings ended (their final manifest shipped); False: once
            what is committed now is shipped (``envrec ship``).
        quiet_s: asked when finishing starts: how long everything must have stayed shipped before it ends (the
            env process died or SIGTERM: an encoder may still be finishing its last clip).
    """
    counters = shipping.counters
    delay = 0.0
    finish_by: float | None = None
    quiet = 0.0
    settled_since: float | None = None
    while True:
        if finish_by is None and finishing():
            finish_by = time.monotonic() + deadline_s
            quiet = quiet_s()
        ok = False
        try:
            settled = shipping.ship_pass()
            ok = True
        except Exception as exc:  # noqa: BLE001  (the stores' errors are many: every one is waited out and counted)
            settled = False
            delay = _failed(shipping, exc, delay)
        else:
            if counters[ShipCounter.STORE_UNREACHABLE]:
                logger.info("envrec: %s answers again: shipping catches up", shipping.store.display)
            counters[ShipCounter.STORE_UNREACHABLE] = 0
            delay = 0.0
        done = settled or not wait_for_end and ok and not counters[ShipCounter.PENDING]
        settled_since = (settled_since or time.monotonic()) if done else None
        if finish_by is not None and settled_since is not None and time.monotonic() - settled_since >= quiet:
            return True
        if finish_by is not None and time.monotonic() >= finish_by:
            logger.warning("envrec: %d batch(es) and clip(s) not shipped to %s before the deadline (%.0f s): they stay "
                           "in %s; `envrec ship %s %s` ships them", counters[ShipCounter.PENDING], shipping.store.display,
                           deadline_s, shipping.own.path, shipping.own.path, shipping.store.display)
            return False
        wait = delay or POLL_S
        if finish_by is not None:
            wait = min(wait, max(0.0, finish_by - time.monotonic()))
        sleep(wait)


def _failed(shipping: FolderShipping, exc: Exception, delay: float) -> float:
    counters = shipping.counters
    transient = is_transient(exc)
    counters.add(ShipCounter.RETRIES if transient else ShipCounter.FAILURES)
    try:
        shipping.count_pending()
    except (OSError, ValueError) as count_exc:  # the folder itself unreadable: say so, keep the last count
        logger.debug("envrec: what waits in %s cannot be counted: %s", shipping.own.path, count_exc)
    if not counters[ShipCounter.STORE_UNREACHABLE]:
        how = "does not answer" if transient else "refused a write"
        logger.warning("envrec: %s %s (%s: %s): batches wait in %s and are shipped when it answers",
                       shipping.store.display, how, type(exc).__name__, exc, shipping.own.path)
    counters[ShipCounter.STORE_UNREACHABLE] = 1
    return min(MAX_RETRY_S, max(FIRST_RETRY_S, delay * 2))
