"""``python -m envrec.ship --config-fd=N --report-fd=M``: a recorder's shipper process.

Started by the env side (``envrec.supervision.shipper``) through the same
launcher as the workers, never by hand (``envrec ship`` is the command for
that). It checks the store (a ConfigError-worthy problem is reported as
``("error", message)`` and ends it), says ``("ready", None)``, then ships as the
recording goes (``envrec.ship.follow``). It finishes — everything committed
shipped, within the deadline — when its control pipe closes (the recorder
closed, or the env process died) or on SIGTERM; SIGINT is ignored, as
workers ignore it. Credentials reach it in the pickled config only.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
from multiprocessing.connection import Connection

from ..errors import ConfigError
from ..formats.ownfolder import FolderChanged, OwnFolder
from ..formats.store import Store, is_transient
from .clips import ClipShipper
from .config import FINISH, ShipConfig, ShipLaunch, ship_deadline_s
from .counters import ShipCounter, ShipCounters
from .follow import follow
from .recording import RecordingShipper, ShipConflict, live_origin
from .shipping import FolderShipping

WATCHDOG_GRACE_S = 3.0  # past the deadline, a shipper stuck in a store call is ended by its watchdog
QUIET_AFTER_DEATH_S = 3.0  # after the env process died: nothing new to ship for this long before the shipper ends
_terminated = False


def _on_sigterm(signum: int, _frame: object) -> None:
    global _terminated
    _terminated = True


class Control:
    """The control pipe from the env process: ``FINISH`` then end of file at ``close()``; end of file alone
    when it died."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False
        self.clean = False

    def poll(self) -> bool:
        """Whether the pipe is closed (the recorder closed, or the env process died)."""
        while not self.closed and self.fd >= 0 and select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 64)
            self.clean = self.clean or FINISH in data
            self.closed = data == b""
        return self.closed


def _watch_for_the_end(finishing: threading.Event, control: Control, parent_pid: int, deadline: float) -> None:
    """Set ``finishing`` when the recorder closed, the env process died or SIGTERM came — even while the main
    thread waits in a store call — then end the process if it is still there past the deadline: a store call
    that hangs (a server gone mid-request) must not keep it, and what it did not ship stays committed locally
    (a commit is written whole or not at all)."""
    while not (_terminated or control.poll() or os.getppid() != parent_pid):
        time.sleep(0.1)
    finishing.set()
    end = time.monotonic() + deadline + WATCHDOG_GRACE_S
    while time.monotonic() < end:
        time.sleep(0.5)
    logging.getLogger("envrec.ship").warning("envrec: a call to the store still hangs %.0f s after the deadline: the "
                                             "shipper ends; what it did not ship stays local", WATCHDOG_GRACE_S)
    os._exit(1)


def _probe(shipping: FolderShipping, cfg: ShipConfig, parent_pid: int) -> None:
    """Check the store once: the recorder's first id claimed (a write), or the URL listed."""
    prefixes = cfg.targets.prefixes or ()
    clips = cfg.targets.clip_recorders or ()
    if prefixes and not cfg.targets.family:
        shipper = shipping.recordings[prefixes[0]] = RecordingShipper(shipping.store, shipping.own, prefixes[0])
        shipper.claim(live_origin(socket.gethostname(), parent_pid, prefixes[0]))
    elif len(clips) == 1 and cfg.targets.clip_remote:
        clip_shipper = shipping.clips[clips[0]] = ClipShipper(shipping.store, shipping.own, clips[0], cfg.targets.clip_remote)
        clip_shipper.claim()
    else:
        shipping.store.names("")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m envrec.ship")
    parser.add_argument("role", choices=["shipper"])
    parser.add_argument("--config-fd", type=int, required=True)
    parser.add_argument("--report-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    with os.fdopen(args.config_fd, "rb") as f:
        _main, launch, _ring, parent_pid = pickle.load(f)
    assert isinstance(launch, ShipLaunch)
    cfg: ShipConfig = launch.config
    conn = Connection(args.report_fd, readable=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGUSR1, lambda *_: None)  # the parent-death signal, if any: the control pipe tells
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    counters = ShipCounters(launch.counters_fd)
    try:
        store = Store(cfg.url, cfg.storage_options)
        own = OwnFolder(cfg.folder, expect=cfg.folder_id)  # it writes only ledgers (envrec.formats.ship_ledger)
        shipping = FolderShipping(store, own, cfg.targets, counters)
        _probe(shipping, cfg, parent_pid)
    except (ConfigError, ShipConflict, FolderChanged) as exc:
        conn.send(("error", str(exc)))
        raise SystemExit(2) from None
    except Exception as exc:  # noqa: BLE001  (fsspec's and the stores' errors are many: each is told apart below)
        if not is_transient(exc):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            raise SystemExit(2) from None
        counters[ShipCounter.STORE_UNREACHABLE] = 1
        logging.getLogger("envrec.ship").warning("envrec: %s does not answer (%s): shipping starts when it does",
                                                 store.display, exc)
    counters[ShipCounter.READY] = 1
    conn.send(("ready", None))
    control = Control(launch.control_fd)
    deadline = ship_deadline_s()
    finishing = threading.Event()
    threading.Thread(target=_watch_for_the_end, args=(finishing, control, parent_pid, deadline),
                     name="envrec-ship-watchdog", daemon=True).start()

    def abrupt() -> float:  # the env process died or SIGTERM: its workers may still be finishing what they hold
        return 0.0 if control.clean and not _terminated else QUIET_AFTER_DEATH_S

    done = follow(shipping, finishing.is_set, deadline, quiet_s=abrupt)
    counters[ShipCounter.DONE] = int(done)
    conn.send(("done", counters.snapshot()))
    raise SystemExit(0 if done else 1)


if __name__ == "__main__":
    main()
