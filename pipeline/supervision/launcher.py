"""Env side: start a worker as a fresh interpreter, ``python -m envrec.workers ROLE``.

Why not ``multiprocessing``: its ``spawn`` re-imports the user's main module
in the child (a script without a ``__main__`` guard runs its training loop
again), ``fork`` copies a process that may hold threads (PyTorch, a
simulator), and neither may start children from a daemonic process (the
sub-processes of ``AsyncVectorEnv``, SB3's ``SubprocVecEnv``, pool workers).
A worker started here imports only envrec and what envrec imports, in any
host process.

What a worker gets, all inherited explicitly (``pass_fds``), nothing else:

* ``--config-fd``: an anonymous memory file (``memfd``) holding the pickled
  ``(role, config, ring spec, env pid)``; pickles of envrec's own data
  classes and plain data only, never the user's objects.
* ``--report-fd``: the write end of a pipe, wrapped in a
  ``multiprocessing.connection.Connection`` on both ends (just framing and
  pickle over a file descriptor), for ``("error", traceback)`` and
  ``("done", summary)``.
* the ring's two wake-up eventfds (``RingSpec``).
* stdout and stderr: one pipe that a thread here drains, keeping the last
  lines (quoted when the worker dies) and logging every line at DEBUG under
  ``envrec.workers.<role>``; a worker never blocks on a full pipe.

* SIGTERM and SIGINT blocked: they are blocked in the launching thread while
  the worker is started, so the worker starts with them blocked and unblocks
  them only once it has set how it takes them (``envrec.workers.__main__``).
  A SIGTERM or SIGINT to the whole process group while a worker is still
  importing (a Jupyter kernel's manager sends both at shutdown) is then
  latched or ignored by the worker instead of killing it before it could
  drain its ring.

The interpreter is ``sys.executable`` unless ``ENVREC_PYTHON`` names
another (embedded interpreters, where ``sys.executable`` is the host
program). The worker sees the same ``sys.path`` as this process (through
``PYTHONPATH``), minus the current folder (``-P``), so it finds envrec and
its dependencies where this process found them.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import pickle
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

import psutil

from ..contract.children import TERMINATING, blocked_in_this_thread
from ..contract.procinfo import wait_for_exit
from ..contract.ring import RingSpec
from ..formats.fullwrite import write_all
from .spare import payload, spare_workers

__all__ = ["PYTHON_ENV_VAR", "STDERR_TAIL_LINES", "Started", "WorkerProcess", "start_interpreter"]

PYTHON_ENV_VAR = "ENVREC_PYTHON"
STDERR_TAIL_LINES = 20  # lines of a worker's output kept to explain its death
CHILD_GRACE_S = 2.0  # how long a killed worker's children (ffmpeg) get to finish on their own
OUTPUT_DRAIN_S = 1.0  # how long a dead worker's last output may take to arrive (its pipe closes with its last child)


def python_executable() -> str:
    """The interpreter that runs workers."""
    return os.environ.get(PYTHON_ENV_VAR) or sys.executable


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    paths = [p for p in dict.fromkeys(sys.path) if p and os.path.exists(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("PYTHONSTARTUP", None)
    return env


def _config_file(payload: bytes) -> int:
    fd = os.memfd_create("envrec-worker-config", os.MFD_CLOEXEC)
    try:
        write_all(fd, payload)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _taken_spare(role: str, args: list[str], fds: tuple[int, ...]) -> Started | None:
    """A spare interpreter made the worker of ``args`` (``envrec.supervision.spare``), or None when none waits."""
    spare = spare_workers().take(args[0])
    if spare is None:
        return None
    if spare.started.python != python_executable():  # ENVREC_PYTHON changed since it started
        spare.discard()
        return None
    request = _config_file(payload(args[1:]))
    try:
        if not spare.hand_over(fds, request):
            return None
    finally:
        os.close(request)
    spare.started.role = role
    return spare.started


def reap_later(children: list[psutil.Process]) -> None:
    """Kill, in a thread, whichever of ``children`` are still running ``CHILD_GRACE_S`` from now."""
    if children:
        threading.Thread(target=_kill_survivors, args=(children,), name="envrec-reap", daemon=True).start()


def _kill_survivors(children: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(children, timeout=CHILD_GRACE_S)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()


class Started:
    """A started interpreter: its ``Popen`` (None when it could not be executed: ``start_error``), and a thread
    draining its output into ``tail`` and the log under ``envrec.workers.<role>``.

    Args:
        role: what it runs, for messages and the logger's name (a spare's changes when it is taken).
    """

    def __init__(self, role: str) -> None:
        self.role = role
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.proc: subprocess.Popen | None = None
        self.start_error: str | None = None
        self.python = python_executable()
        self.drain: threading.Thread | None = None

    def read_output(self, fd: int) -> None:
        with open(fd, "rb") as f:  # a pipe: each read returns what has arrived, a line is never held back
            for raw in iter(f.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    self.tail.append(line)
                    pid = self.proc.pid if self.proc is not None else -1
                    logging.getLogger(f"envrec.workers.{self.role.replace(' ', '-')}").debug("[pid %d] %s", pid, line)


def start_interpreter(role: str, args: list[str], fds: tuple[int, ...]) -> Started:
    """``python -P -m ARGS``, inheriting ``fds`` and started with SIGTERM and SIGINT blocked (see the module
    docstring); ``start_error`` says why when it could not be executed.

    Args:
        role: what it runs, for messages and its logger.
        args: what follows ``-m``: the module and its arguments.
        fds: the descriptors it inherits, at their numbers here.
    """
    started = Started(role)
    out_r, out_w = os.pipe()
    try:
        with blocked_in_this_thread(TERMINATING):  # a worker starts with these blocked, until it can take them
            started.proc = subprocess.Popen(
                [started.python, "-P", "-m", *args],
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=out_w,
                pass_fds=fds,
                env=_child_environment(),
            )
    except OSError as exc:
        started.start_error = f"cannot start the {role} with {started.python!r}: {exc}"
        os.close(out_r)
    else:
        started.drain = threading.Thread(target=started.read_output, args=(out_r,), name=f"envrec-{role}-output", daemon=True)
        started.drain.start()
    finally:
        os.close(out_w)
    return started


class WorkerProcess:
    """One worker interpreter: its pid, exit status, report pipe and the tail of its output.

    A spare interpreter started ahead (``envrec.supervision.spare``) is taken when one waits; else one
    is started now. ``start_error`` is set (and the object otherwise inert, as a process that died at
    once) when the interpreter could not even be executed.
    """

    def __init__(self, role: str, main: str, config: Any, ring: RingSpec | None, fds: tuple[int, ...],
                 module: str = "envrec.workers") -> None:
        self.role = role
        self.module = module
        self.conn: Connection | None = None
        self.pid = -1
        payload = pickle.dumps((main, config, ring, os.getpid()), protocol=pickle.HIGHEST_PROTOCOL)
        config_fd = _config_file(payload)
        report_r, report_w = os.pipe()
        args = [module, main, f"--config-fd={config_fd}", f"--report-fd={report_w}"]
        passed = (config_fd, report_w, *fds)
        try:
            self._started = _taken_spare(role, args, passed) or start_interpreter(role, args, passed)
        finally:
            for fd in (config_fd, report_w):
                os.close(fd)
        self.start_error = self._started.start_error
        self._proc = self._started.proc
        self.tail = self._started.tail
        if self._proc is None:
            os.close(report_r)
        else:
            self.pid = self._proc.pid
            self.conn = Connection(report_r, writable=False)

    @property
    def returncode(self) -> int | None:
        """Exit status (negative: killed by that signal), or None while running; 1 if it never started."""
        if self._proc is None:
            return 1
        return self._proc.poll()

    def wait(self, timeout_s: float) -> int | None:
        """The exit status once the worker exits, None if it still runs ``timeout_s`` from now (woken by its
        exit: ``wait_for_exit``)."""
        if self._proc is None:
            return 1
        return wait_for_exit(self._proc, timeout_s)

    def kill(self) -> None:
        """SIGKILL the worker, then its children that have not exited ``CHILD_GRACE_S`` later.

        The encoder's ffmpeg runs in a process group of its own, so it would
        not go with the worker; a healthy one finishes its clip (playable) when
        its input closes with the worker's death, a hung one never would. The
        grace period runs in a thread: the env process does not wait for it.
        """
        if self._proc is None or self._proc.poll() is not None:
            return
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            children = []
        self._proc.kill()
        reap_later(children)

    def terminate(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()

    def output_tail(self) -> str:
        """The worker's last lines of output (after it exited: all of them), or the start error."""
        if self.start_error is not None:
            return self.start_error
        if self._started.drain is not None and self.returncode is not None:
            self._started.drain.join(OUTPUT_DRAIN_S)
        return "\n".join(self.tail)

    def close(self) -> None:
        """Forget a finished worker: its report pipe closes; its output thread ends with the pipe. A spare is
        started for the next worker start of this kind (``envrec.supervision.spare``)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
            if not os.environ.get(PYTHON_ENV_VAR):  # an interpreter of the user's (a wrapper, an embedding): none kept idle
                spare_workers().prepare(self.module, start_interpreter)
