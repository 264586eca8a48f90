"""``envrec ship DIR URL [--follow]``: ship a folder's recordings and clips that exist already.

The same passes as a recorder's shipper (``envrec.ship.shipping``), run in
the foreground: once (ship what is committed, then exit), or with
``--follow`` until Ctrl-C or SIGTERM (then what is committed by then is
shipped, within the deadline). Running it again, or beside another one,
ships nothing twice: commits are create-only and each recording's claim
under the URL says whose it is. Exit status 0 when everything committed was
shipped, 1 when something stays local (the store did not answer, a damaged
batch, a recording another one holds the id of under the URL), 2 for bad
usage (a folder that is not there, a URL that cannot be used).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time

from ..errors import ConfigError
from ..formats.ownfolder import OwnFolder
from ..formats.store import Store
from .config import ship_deadline_s
from .counters import ShipCounter, ShipCounters
from .follow import follow
from .shipping import FolderShipping, ShipTargets

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "ship", help="ship a folder's recordings and clips to object storage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Copy every committed batch and finished clip of DIR to URL (any fsspec URL: s3://, gs://, az://,\n"
                    "file://, or a mounted folder), each under its recording's id, with a create-only commit per\n"
                    "batch: a rerun, or two at once, ship each batch exactly once. Credentials come from the store's\n"
                    "environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), never from the URL. Exit status 0 when\n"
                    "everything committed was shipped, 1 when something stays local, 2 for bad usage.",
        epilog="examples:\n"
               "  envrec ship recordings s3://my-bucket/run-7\n"
               "  envrec ship recordings s3://my-bucket/run-7 --follow     ship as a running job commits, until Ctrl-C\n"
               "  envrec ship /scratch/$SLURM_JOB_ID/rec /shared/datasets/run-7",
    )
    s.add_argument("directory", metavar="DIR", help="the recording folder")
    s.add_argument("url", metavar="URL", help="where to: an fsspec URL or a folder")
    s.add_argument("--follow", action="store_true", help="keep shipping what is committed until Ctrl-C or SIGTERM")
    s.add_argument("--storage-options", default=None, metavar="JSON",
                   help="fsspec's options as JSON (e.g. '{\"endpoint_url\": \"http://127.0.0.1:9000\"}'); prefer the "
                        "environment for credentials")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        options = json.loads(args.storage_options) if args.storage_options else None
        store = Store(args.url, options)
        own = OwnFolder(args.directory)
    except (ConfigError, ValueError) as exc:
        print(f"envrec ship: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"envrec ship: {args.directory} cannot be read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    counters = ShipCounters(shared=False)
    shipping = FolderShipping(store, own, ShipTargets(), counters)
    stop = _stop_on_signals() if args.follow else None
    started = time.monotonic()
    try:
        # what is committed by the end (now, or Ctrl-C with --follow) is shipped; the recordings may go on
        finishing = (lambda: stop["now"]) if stop is not None else (lambda: True)
        done = follow(shipping, finishing, ship_deadline_s(), wait_for_end=False)
    finally:
        own.close()
    figures = counters.snapshot() | {"seconds": round(time.monotonic() - started, 3)}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"envrec ship: {figures['batches_shipped']} batch(es) and {figures['clips_shipped']} clip(s) in "
              f"{store.display} ({figures['bytes_shipped']} bytes sent now); {figures['pending']} left local, "
              f"{figures['conflicts']} conflict(s), {figures['damaged']} damaged")
    return 0 if done and not counters[ShipCounter.CONFLICTS] and not counters[ShipCounter.DAMAGED] else 1


def _stop_on_signals() -> dict[str, bool]:
    """SIGINT and SIGTERM end ``--follow`` (what is committed by then is still shipped)."""
    stop = {"now": False}

    def handler(signum: int, _frame: object) -> None:
        stop["now"] = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    return stop

