"""``python -m envrec.workers ROLE --config-fd=N --report-fd=M``: a worker process's first code (or
``--spare-fd=N``: a spare that becomes a worker later, ``envrec.supervision.spare``).

Started by the env side's launcher (``envrec.supervision.launcher``), never by hand. It
reads its pickled ``(role, config, ring spec, env pid)`` from the inherited
memory file, wraps the report pipe, asks the kernel to signal it when its
parent dies, and runs the role's main function (``entry``). Nothing of the
user's program is imported: the worker runs the same in a script without a
``__main__`` guard, a notebook, or a daemonic process.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import logging
import os
import pickle
import signal
import socket
import sys
from multiprocessing.connection import Connection

from envrec.contract.wakeup import Wakeup

from .loop import MAINS, latch_termination

PR_SET_PDEATHSIG = 1  # prctl(2) option: a signal this process gets when its parent exits
PARENT_DEATH_SIGNAL = signal.SIGUSR1  # only wakes the worker, which then checks its parent itself


PR_SET_NAME = 15  # prctl(2) option: the process's name (``comm``: ps -o comm, top), 15 bytes at most
SPARE_NAME = "envrec-spare"


def name_process(name: str) -> None:
    """Set what ``ps -o comm`` and ``top`` show: ``envrec-ROLE`` for a worker, ``envrec-spare`` for a spare
    (a spare's command line is the same before and after it becomes a worker)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


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
    name_process(f"envrec-{args.role}")
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


def serve_as_spare(sock_fd: int) -> None:
    """``--spare-fd=N``: wait, imports done, until the env process makes this interpreter a worker
    (``envrec.supervision.spare``): it sends a memory file of ``(argv, environment, sys.path, folder)`` and the
    descriptors the worker inherits, with the numbers they have in the env process, which the worker's
    arguments and config name. Exits when the env process closes its end first (it exited, or died).

    Args:
        sock_fd: this side of the socket pair.
    """
    name_process(SPARE_NAME)
    sock = socket.socket(fileno=sock_fd)
    try:
        message, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 256)
    except OSError:
        raise SystemExit(0) from None
    finally:
        sock.close()
    if not message or not fds:
        raise SystemExit(0)  # the env process closed it: never used
    numbers: list[int] = pickle.loads(message)
    payload_fd, received = fds[0], fds[1:]
    with os.fdopen(payload_fd, "rb") as f:
        argv, environ, path, folder = pickle.load(f)
    _place(received, numbers)
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = path
    if folder is not None:
        with contextlib.suppress(OSError):  # removed meanwhile: a worker started now would be in no folder either
            os.chdir(folder)
    main(argv)


def _place(received: list[int], numbers: list[int]) -> None:
    """Move each received descriptor to the number it has in the env process: first all above every number
    involved, so that no move overwrites a descriptor still to be moved."""
    floor = max([*received, *numbers]) + 1
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for fd in received]
    for fd in received:
        os.close(fd)
    for fd, number in zip(high, numbers, strict=True):
        os.dup2(fd, number)
        os.close(fd)


def exit_at_once() -> None:
    """A worker that finished: its files are committed and its summary sent, and the env process waits for its
    exit. The interpreter's own teardown (~20 ms of freeing modules) would only make it wait longer."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].startswith("--spare-fd="):
        serve_as_spare(int(sys.argv[1].split("=", 1)[1]))
    else:
        main()
    exit_at_once()
