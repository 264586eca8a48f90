"""Env side: a recorder's shipper process (``python -m envrec.ship``), started, watched, finished.

``ShipperHandle.start`` launches it through the workers' launcher (a fresh
interpreter, signals blocked until it takes them, nothing of the user's
program imported) and waits for its word: ``ready`` once it checked the store,
or ``error`` (a bad URL, a bucket that does not exist or refuses writes, an id
another recording holds), which becomes a ``ConfigError`` in the recorder's
constructor. Afterwards nothing of the env's loop waits on it: a thread waits
for the process and starts a successor when it dies before it was told to
finish (``MAX_SHIPPER_RESTARTS`` in a row; a successor resumes from the
store's commits and the local ledger). ``finish()`` (from the recorder's
``close()``, after its workers committed the last batch) closes the control
pipe and waits for the shipper to ship what is left, within the deadline.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..formats.shipped import unique_suffix
from ..formats.store import is_url, redact, store_url
from ..options import StreamOptions
from ..ship.config import FINISH, ShipConfig, ShipLaunch, ship_deadline_s
from ..ship.counters import ShipCounter, ShipCounters
from ..ship.shipping import ShipTargets
from .launcher import WorkerProcess

__all__ = ["MAX_SHIPPER_RESTARTS", "START_TIMEOUT_S", "ShipTargets", "ShipperHandle", "ship_stats", "shipper_for", "shipping_name"]

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # how long a recorder's constructor waits for its shipper's check of the store
MAX_SHIPPER_RESTARTS = 3
FINISH_MARGIN_S = 5.0  # beyond the shipper's deadline, before close() stops waiting and kills it

_STAT_KEYS = {  # stats() key: counter
    "ship_batches": ShipCounter.BATCHES_SHIPPED,
    "ship_clips": ShipCounter.CLIPS_SHIPPED,
    "ship_bytes": ShipCounter.BYTES_SHIPPED,
    "ship_pending": ShipCounter.PENDING,
    "ship_retries": ShipCounter.RETRIES,
    "ship_failures": ShipCounter.FAILURES,
    "ship_conflicts": ShipCounter.CONFLICTS,
    "ship_damaged": ShipCounter.DAMAGED,
    "ship_store_unreachable": ShipCounter.STORE_UNREACHABLE,
}


def ship_stats(counters: ShipCounters, restarts: int) -> dict[str, int]:
    return {key: counters[c] for key, c in _STAT_KEYS.items()} | {"ship_restarts": restarts}


def shipping_name(name_prefix: str, fields: dict[str, Any]) -> str:
    """A clip name prefix as a video wrapper uses it: with ``ship_to`` among its stream option ``fields`` (or in
    their ``options``), made unique across nodes and runs with this process's ``unique_suffix``, as trace
    prefixes are (the viewer pairs a process's clips with its traces by it)."""
    options = fields.get("options")
    shipping = fields.get("ship_to") is not None or getattr(options, "ship_to", None) is not None
    return f"{name_prefix}.{unique_suffix()}" if shipping else name_prefix


def shipper_for(options: StreamOptions, folder: str, folder_id: tuple[int, int] | None, targets: ShipTargets) -> ShipperHandle | None:
    """A launched shipper when ``options.ship_to`` is set (``wait_ready`` to follow), else None.

    Raises:
        ConfigError: the URL carries credentials, or the shipper could not start.
    """
    if options.ship_to is None:
        return None
    url = os.fspath(options.ship_to)
    if is_url(url) and (urlsplit(url).username is not None or urlsplit(url).password is not None):
        raise ConfigError(f"ship_to {redact(url)} carries credentials in the URL: pass them in storage_options or the "
                          "store's environment (AWS_ACCESS_KEY_ID, ...), never in the URL")
    handle = ShipperHandle(ShipConfig(folder, store_url(url), options.storage_options, targets, folder_id))
    handle.launch()
    return handle


class ShipperHandle:
    """A recorder's shipper, from ``start`` to ``finish``.

    Args:
        config: what it ships, from where, to where.
    """

    def __init__(self, config: ShipConfig) -> None:
        self.config = config
        self.counters = ShipCounters()
        self.restarts = 0
        self._finishing = threading.Event()
        self._lock = threading.Lock()
        self._proc: WorkerProcess | None = None
        self._control_w = -1
        self._watcher: threading.Thread | None = None
        self.final: dict[str, int] | None = None

    # -- starting ------------------------------------------------------------------------------------------------
    def launch(self) -> None:
        """Start the process; ``wait_ready`` then waits for its check of the store (the recorder starts its own
        workers in between)."""
        control_r, self._control_w = os.pipe()
        try:
            launch = ShipLaunch(self.config, self.counters.fd, control_r)
            self._proc = WorkerProcess("shipper", "shipper", launch, None, (self.counters.fd, control_r), module="envrec.ship")
        finally:
            os.close(control_r)
        if self._proc.start_error is not None:
            raise ConfigError(f"the shipper could not start: {self._proc.start_error}")

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait for the shipper's ``ready``; then watch it from a thread.

        Raises:
            ConfigError: it reported an error (its message names the store, redacted), died or did not answer.
        """
        proc = self._proc
        assert proc is not None and proc.conn is not None
        if not proc.conn.poll(timeout_s):
            self._stop()
            raise ConfigError(f"the shipper to {self.config.url_display} did not check the store within {timeout_s:.0f} s")
        try:
            kind, message = proc.conn.recv()
        except (EOFError, OSError):
            proc.wait(5.0)
            tail = proc.output_tail()
            self._stop()
            raise ConfigError(f"the shipper to {self.config.url_display} died before it checked the store: {tail}") from None
        if kind != "ready":
            self._stop()
            raise ConfigError(f"cannot ship to {self.config.url_display}: {message}")
        self._watcher = threading.Thread(target=self._watch, name="envrec-shipper-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        """Wait for the shipper; start a successor when it died before it was told to finish."""
        proc = self._proc
        if proc is None:
            return
        code = proc.wait(None)  # type: ignore[arg-type]
        if self._finishing.is_set():
            return
        last = self.restarts >= MAX_SHIPPER_RESTARTS
        logger.warning("envrec: the shipper to %s exited (%s): %s", self.config.url_display, code,
                       f"no successor after {MAX_SHIPPER_RESTARTS}: `envrec ship` ships what stays local" if last
                       else "a successor resumes from the store's commits")
        if last:
            return
        if self._finishing.wait(min(10.0, 0.5 * 2 ** self.restarts)):
            return
        with self._lock:
            if self._finishing.is_set():
                return
            proc.close()
            os.close(self._control_w)
            self.restarts += 1
            self.launch()
        try:
            self.wait_ready()  # the successor's own watcher takes over
        except ConfigError as exc:
            logger.error("envrec: the shipper's successor failed: %s", exc)

    def _replace_if_dead(self) -> None:
        with self._lock:
            proc = self._proc
            if self._finishing.is_set() or proc is None or proc.returncode is None or self.restarts >= MAX_SHIPPER_RESTARTS:
                return
            self._finishing.set()  # its watcher, if still waiting to replace it, stands down
            proc.close()
            os.close(self._control_w)
            self.restarts += 1
            self.launch()
        self._finishing.clear()
        try:
            self.wait_ready()
        except ConfigError as exc:
            logger.error("envrec: the shipper's successor failed: %s", exc)

    # -- reading and ending -------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """The shipper's figures (after ``finish``: its last ones)."""
        return dict(self.final) if self.final is not None else ship_stats(self.counters, self.restarts)

    def finish(self) -> dict[str, int]:
        """Tell the shipper to ship what is left and end; wait for it (its deadline, plus a margin). One that died
        and was not replaced yet gets its successor first."""
        self._replace_if_dead()
        with self._lock:
            self._finishing.set()
            if self._control_w >= 0:
                with contextlib.suppress(OSError):  # a shipper already gone
                    os.write(self._control_w, FINISH)
                os.close(self._control_w)
                self._control_w = -1
        proc = self._proc
        if proc is not None and proc.wait(ship_deadline_s() + FINISH_MARGIN_S) is None:
            logger.warning("envrec: the shipper to %s did not end after its deadline: killed", self.config.url_display)
            proc.kill()
            proc.wait(5.0)
        self.final = ship_stats(self.counters, self.restarts)
        if self.final["ship_pending"]:
            logger.warning("envrec: %d batch(es) and clip(s) stay unshipped in %s: `envrec ship %s %s` ships them",
                           self.final["ship_pending"], self.config.folder, self.config.folder, self.config.url_display)
        self._stop()
        return self.final

    def _stop(self) -> None:
        self._finishing.set()
        if self._control_w >= 0:
            os.close(self._control_w)
            self._control_w = -1
        if self._proc is not None:
            if self._proc.returncode is None:
                self._proc.kill()
                self._proc.wait(5.0)
            self._proc.close()
        if self.final is None:
            self.final = ship_stats(self.counters, self.restarts)
        self.counters.close()
