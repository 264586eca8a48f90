"""Syscall faults injected into a worker with strace (``-e inject``), for ``test_syscall_faults``.

A worker is started on the interpreter ``ENVREC_PYTHON`` names; here that is
a small shell script that ``exec``s ``strace -D`` (the tracer runs beside the
worker, not as its parent, so the worker keeps its pid and its parent: the
env process) on the real interpreter. strace filters by path (``-P``), so a
fault counts and hits only the calls that touch the files of interest: the
``when=N`` of a fault is the Nth such call, and nothing of the interpreter's
start, the ring's wake-ups or the report pipe is counted. Temporary files are
named with their writer's pid, which is the script's own (``$$``).

A one-off fault (``when=N``) is injected in the first worker only (the
script marks that it ran); a persistent one (``when=N+``) in every worker, as
a disk that stays bad would hit each successor.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

STRACE = shutil.which("strace")
PID = "$$"  # in a path: the worker's pid (the script's, kept by exec)


@functools.cache
def _cannot_trace(strace: str) -> str | None:
    """Why strace cannot inject faults here (no ptrace or seccomp in a container, say), or None."""
    probe = [strace, "-qq", "-D", "--seccomp-bpf", "-o", "/dev/null", "-e", "trace=openat",
             "-e", "inject=openat:error=EIO:when=1000", "--", sys.executable, "-c", "pass"]
    try:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"strace does not run: {exc}"
    return None if out.returncode == 0 else f"strace cannot trace here: {out.stderr.strip()[-300:]}"


def need_strace() -> str:
    """strace's path; under CI=true its absence (or its failing here) fails the test, elsewhere skips it."""
    reason = "the syscall fault battery needs strace (apt-get install strace)" if STRACE is None else _cannot_trace(STRACE)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        print(f"skipped: {reason}")
        pytest.skip(reason)
    assert STRACE is not None
    return STRACE


@dataclass(frozen=True)
class Fault:
    """One row of the battery: inject ``error`` into the ``when``th ``syscall`` touching ``target``."""

    worker: str  # "serializer" or "encoder"
    syscall: str  # as strace names it: openat, write, pwrite64, fsync, rename, renameat
    target: str  # a key of the worker's path table (see trace_paths, video_paths)
    when: int
    error: str  # EIO or ENOSPC
    persistent: bool = False

    @property
    def id(self) -> str:
        return f"{self.worker}-{self.syscall}-{self.target}-{self.when}{'+' if self.persistent else ''}-{self.error}"


def trace_paths(folder: str, prefix: str, batches: int = 16, spills: int = 8) -> dict[str, list[str]]:
    """The serializer's files by role (see workers/serializer.py, batch_writer.py, checkpoint.py).

    The serializer opens, creates and renames them relative to its folder opened once (``OwnFolder``:
    ``openat`` and ``renameat`` on that descriptor, with the bare name), so each role lists every file twice:
    by its bare name (matched in ``openat``/``renameat``) and by its path (matched through the file's own
    descriptor: ``write``, ``pwrite64``, ``fsync``). Each row still counts the calls of its role alone."""
    f = folder
    batch = []
    for k in range(batches):
        stem = f"{prefix}.ep{k:09d}"
        batch += [f".{stem}.bin.{PID}.tmp", f".{stem}.json.{PID}.tmp", f"{stem}.bin", f"{stem}.json"]
    names = {
        "checkpoint": [f".{prefix}.checkpoint.a.json", f".{prefix}.checkpoint.b.json"],
        "batch": batch,
        "manifest": [f".{prefix}.manifest.json.{PID}.tmp", f"{prefix}.manifest.json"],
        "spill": [f".{prefix}.spill{i}.{PID}.tmp" for i in range(spills)],
    }
    return {
        **{role: [*files, *(f"{f}/{n}" for n in files)] for role, files in names.items()},
        "folder": [f],  # the folder's own fsync after a rename (its descriptor opened once)
    }


def video_paths(folder: str, clips: list[str]) -> dict[str, list[str]]:
    """The encoder's files by role: each clip's metadata, and its video (written by ffmpeg, a traced child,
    then remuxed into a temporary file that the encoder fsyncs and renames over it), and its folder: the encoder
    opens, creates and renames files relative to the folder opened once (``OwnFolder``: ``openat`` and
    ``renameat`` on its descriptor), which strace matches by that descriptor only."""
    return {
        "folder": [folder],
        "meta": [p for c in clips for p in (f"{folder}/.{c}.meta.json.{PID}.tmp", f"{folder}/{c}.meta.json")],
        "video": [p for c in clips for p in (f"{folder}/{c}.mp4", f"{folder}/.{c}.mp4.{PID}.tmp")],
    }


def wrapper(where: Path, fault: Fault, paths: list[str]) -> Path:
    """Write the interpreter script for ``fault`` into ``where``; its strace logs go to ``where/strace.*``."""
    strace = need_strace()
    when = f"{fault.when}+" if fault.persistent else str(fault.when)
    filters = " ".join(f'-P "{p}"' for p in paths)  # double quotes: $$ is expanded, nothing else is special
    log = shlex.quote(str(where / "strace"))
    once = "" if fault.persistent else f'mkdir {shlex.quote(str(where / "injected-once"))} 2>/dev/null || exec "$PY" "$@"\n'
    script = where / "python-under-strace"
    script.write_text(
        "#!/bin/sh\n"
        f"PY={shlex.quote(sys.executable)}\n"
        + once
        + f"exec {strace} -D --seccomp-bpf -qq -e signal=none -o {log}.$$ -e trace={fault.syscall} "
        f"-e inject={fault.syscall}:error={fault.error}:when={when} {filters} -- \"$PY\" \"$@\"\n"
    )
    script.chmod(0o755)
    return script


def injected(where: Path) -> int:
    """Faults strace injected, over every traced worker's log."""
    return sum(p.read_text().count("(INJECTED)") for p in where.glob("strace.*"))


def tracers(where: Path) -> list[int]:
    """strace processes still running for this case (their logs are under ``where``)."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if p.info["name"] == "strace" and str(where) in " ".join(p.info["cmdline"] or []):
                found.append(p.info["pid"])
        except psutil.Error:
            continue
    return found
