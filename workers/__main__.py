"""``python -m envrec.workers ROLE --config-fd=N --report-fd=M``: a worker process's first code.

Started by the env side's launcher (``envrec.supervision.launcher``), never by hand. It
reads its pickled ``(role, config, ring spec, env pid)`` from the inherited
memory file, wraps the report pipe, asks the kernel to signal it when its
parent dies, and runs the role's main function (``entry``). Nothing of the
user's program is imported: the worker runs the same in a script without a
``__main__`` guard, a notebook, or a daemonic process.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection

from envrec.contract.wakeup import Wakeup

from .loop import MAINS, latch_termination

PR_SET_PDEATHSIG = 1  # prctl(2) option: a signal this process gets when its parent exits
PARENT_DEATH_SIGNAL = signal.SIGUSR1  # only wakes the worker, which then checks its parent itself


def _ask_for_parent_death_signal() -> bool:
    """Linux only; the worker's own parent check (``entry``) covers everything without it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m envrec.workers")
    parser.add_argument("role", choices=sorted(MAINS))
    parser.add_argument("--config-fd", type=int, required=True)
    parser.add_argument("--report-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    with os.fdopen(args.config_fd, "rb") as f:
        role, config, ring_spec, parent_pid = pickle.load(f)
    if role != args.role:
        raise SystemExit(f"config is for a {role}, not a {args.role}")
    conn = Connection(args.report_fd, readable=False)
    # The signal may come from a thread of the parent exiting (prctl is per thread): it only wakes us.
    wake_consumer = Wakeup(ring_spec.items_fd).post  # what the producer posts to wake a sleeping consumer
    signal.signal(PARENT_DEATH_SIGNAL, lambda *_: wake_consumer())
    # How a worker takes SIGINT and SIGTERM: see entry's docstring. Both were blocked by the launcher until now.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_sigterm(signum: int, _frame) -> None:
        latch_termination(signum)
        wake_consumer()

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    _ask_for_parent_death_signal()
    MAINS[role](config, ring_spec, conn, parent_pid)


if __name__ == "__main__":
    main()
