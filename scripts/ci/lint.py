"""The linter and the type checker, CI's step before the tests: ``python scripts/ci/lint.py``.

* ruff (its default rules plus bugbear, pyupgrade and simplify; ``ruff.toml`` says why each ignored rule is
  ignored) on every Python folder of the repository;
* mypy on ``envrec`` as installed (``envrec`` = pipeline/, ``envrec.workers`` = workers/, ``envrec.export`` =
  export/, ``envrec.viewer`` = viewer/), from a copy of the sources laid out that way, so an editable install
  checks the same files as CI's.

Both run whatever the other found; the exit status is 1 when either found something, and each prints what.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
LINTED = ("pipeline", "workers", "export", "viewer", "tests", "scripts")
PACKAGE = {"": "pipeline", "workers": "workers", "export": "export", "viewer": "viewer"}  # envrec's subfolder: source


def ruff() -> int:
    """``ruff check`` on every Python folder; its exit status."""
    return subprocess.run([sys.executable, "-m", "ruff", "check", *LINTED], check=False, cwd=ROOT).returncode


def mypy() -> int:
    """``mypy -p envrec`` on a copy laid out as installed, with setup.cfg's settings; its exit status."""
    with tempfile.TemporaryDirectory(prefix="envrec-mypy-") as tmp:
        pkg = os.path.join(tmp, "envrec")
        for sub, source in PACKAGE.items():
            shutil.copytree(os.path.join(ROOT, source), os.path.join(pkg, sub), ignore=shutil.ignore_patterns("__pycache__"))
        return subprocess.run([sys.executable, "-m", "mypy", "--config-file", os.path.join(ROOT, "setup.cfg"),
                               "--cache-dir", os.path.join(tmp, "cache"), "-p", "envrec"], check=False, cwd=tmp).returncode


def main() -> int:
    failed = []
    for name, check in (("ruff", ruff), ("mypy", mypy)):
        started = time.monotonic()
        status = check()
        print(f"{name}: {'passed' if status == 0 else 'FAILED'} in {time.monotonic() - started:.0f} s", flush=True)
        if status:
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
