"""The code passes its linter (ruff: default rules + B, UP, SIM) and its type checker (mypy on envrec)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))

pytestmark = pytest.mark.timeout(300)


def test_ruff_finds_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "pipeline", "workers", "export", "viewer", "tests", "scripts"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_nothing_in_the_package(tmp_path):
    """Checked as installed (``envrec`` = pipeline/, ``envrec.workers`` = workers/, ``envrec.export`` = export/, ``envrec.viewer`` = viewer/), from a copy of the sources
    laid out that way, so an editable install checks the same files as CI's."""
    pkg = tmp_path / "envrec"
    shutil.copytree(os.path.join(ROOT, "pipeline"), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "workers"), pkg / "workers", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "export"), pkg / "export", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "viewer"), pkg / "viewer", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", os.path.join(ROOT, "setup.cfg"), "--cache-dir", str(tmp_path / "cache"),
         "-p", "envrec"],
        cwd=tmp_path, capture_output=True, text=True, timeout=280,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_modules_and_functions_stay_small():
    """About 400 lines a module and 60 a function (a little slack: a long signature is not a long function)."""
    import ast

    too_big = []
    for top in ("pipeline", "workers", "export", "viewer"):
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                text = open(path).read()
                rel = os.path.relpath(path, ROOT)
                if text.count("\n") > 420:
                    too_big.append(f"{rel}: {text.count(chr(10))} lines")
                for node in ast.walk(ast.parse(text)):
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 70:
                        too_big.append(f"{rel}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not too_big, too_big


SHARED = {"atomic", "clip_meta", "compression", "errors", "faults", "ffmpeg", "fullwrite", "infos", "inside", "option_checks",
          "procinfo", "protocol", "records", "ring", "ring_reader", "schema", "shm", "trace_checks", "trace_format", "wakeup"}


def _imports(path: str) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(("." * node.level) + node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_imports_go_one_way():
    """workers/ uses only the modules both sides share; neither the env side nor export/ imports envrec.workers."""
    for name in os.listdir(os.path.join(ROOT, "workers")):
        if name.endswith(".py"):
            for mod in _imports(os.path.join(ROOT, "workers", name)):
                if mod.startswith("envrec.") and not mod.startswith("envrec.workers"):
                    assert mod.split(".")[1] in SHARED, f"workers/{name} imports the env-side module {mod}"
    for folder, _, names in [*(w for top in ("pipeline", "export", "viewer") for w in os.walk(os.path.join(ROOT, top)))]:
        for name in names:
            if name.endswith(".py"):
                mods = _imports(os.path.join(folder, name))
                assert not [m for m in mods if "workers" in m], f"{name} imports envrec.workers"
