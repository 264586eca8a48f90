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
