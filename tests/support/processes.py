"""Child processes of the tests: the environment they inherit, the ``tests/child_*.py`` programs, how those end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with this interpreter's ``sys.path`` as ``PYTHONPATH``.

    A child imports the same envrec (a checkout's, an install's) as the tests do.
    """
    return {**(os.environ if base is None else base), "PYTHONPATH": os.pathsep.join(sys.path)}


def child_command(name: str, *args: str) -> list[str]:
    """The command that runs ``tests/<name>`` on this interpreter with ``args``."""
    return [sys.executable, os.path.join(TESTS, name), *args]


def start_child(name: str, *args: str, env: Mapping[str, str] | None = None, **popen) -> subprocess.Popen[str]:
    """Start ``tests/<name>`` with ``args`` in the environment ``env`` (``child_env()`` if not given), its stdout a text pipe."""
    return subprocess.Popen(child_command(name, *args), stdout=subprocess.PIPE, text=True,
                            env=child_env() if env is None else env, **popen)


def end_as_told(mode: str) -> None:
    """A child program's last act, as its parent asked.

    ``"kill-self"``: SIGKILL this process (what it handed over still in flight); ``"interrupt"``: raise
    ``KeyboardInterrupt``; anything else: print ``ready`` and sleep until killed.
    """
    if mode == "kill-self":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "interrupt":
        raise KeyboardInterrupt
    print("ready", flush=True)
    time.sleep(600)
