"""Run the Python examples of README.md and of the guides its examples moved to, as a user who copies them
would, so they cannot drift from the code.

Every ```` ```python ```` block of each file (``README.md`` and ``GUIDES``) is
run, in order, in one namespace per file (later examples go on from earlier
ones, as the file reads), in a fresh temporary folder, with only what the
interpreter has installed
(``.ci/run`` runs this in a virtual environment with the base install alone).
A block is skipped only when it imports one of ``NEEDS`` — things no extra of
envrec installs, or that need an account or a cluster — and each entry of
``NEEDS`` must still match a block of some file, so the list cannot go
stale. Every env a file's examples leave open is closed at its end, and none
may be broken. Exit status 1 with the block's file and line when one fails.

``python scripts/ci/readme_examples.py [FILE.md ...] [--list]``
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))

# Top-level imports that make a block a recipe the base install cannot run, and why.
NEEDS = {
    "wandb": "Weights & Biases: an account and the network",
    "torch": "PyTorch: not an envrec dependency",
    "ray": "Ray RLlib and PyTorch on a cluster folder (envrec[ray] has Ray Data; its smoke test reads traces)",
    "stable_baselines3": "Stable-Baselines3 and PyTorch (envrec[sb3]; its smoke test runs a PPO like this one)",
}

# The guides whose examples are run too (those that hold examples the README had: each must run alone).
GUIDES = ("docs/recording.md", "docs/video.md", "docs/vector.md", "docs/datasets.md")

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass
class Block:
    line: int  # the README line of its first line of code
    code: str

    def imports(self) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(self.code)):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
        return found


def python_blocks(text: str) -> list[Block]:
    return [Block(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _FENCE.finditer(text)]


def _label(path: str) -> str:
    """How output names a file: its path in the checkout, else its name."""
    rel = os.path.relpath(path, ROOT)
    return os.path.basename(path) if rel.startswith(os.pardir) else rel


def run(files: list[str], listing: bool = False) -> int:
    """Run every file's blocks, each file in a namespace and folder of its own; 1 at the first failure."""
    blocks = {}
    for path in files:
        with open(path) as f:
            blocks[path] = python_blocks(f.read())
    skipped: dict[str, list[str]] = {name: [] for name in NEEDS}
    to_run: dict[str, list[Block]] = {path: [] for path in files}
    for path, found in blocks.items():
        for b in found:
            needs = sorted(b.imports() & set(NEEDS))
            for name in needs:
                skipped[name].append(f"{_label(path)} line {b.line}")
            if not needs:
                to_run[path].append(b)
    stale = [name for name, where in skipped.items() if not where]
    if stale:
        print(f"readme_examples: NEEDS lists {stale}, which no block imports: remove them", file=sys.stderr)
        return 1
    for name, where in skipped.items():
        print(f"skipped: {', '.join(where)}: needs {name} ({NEEDS[name]})")
    if listing:
        for path, found in to_run.items():
            print(f"would run {_label(path)} lines {', '.join(str(b.line) for b in found)}")
        return 0
    from envrec.cli import headless_display

    headless_display()  # as `envrec record` does: no display here, and SDL need not say so
    for path, found in to_run.items():
        status = _run_file(path, found)
        if status:
            return status
    return 0


def _run_file(path: str, blocks: list[Block]) -> int:
    here = os.getcwd()
    namespace: dict = {"__name__": "__main__"}
    with tempfile.TemporaryDirectory(prefix="envrec-readme-") as tmp:
        os.chdir(tmp)
        try:
            for b in blocks:
                try:
                    exec(compile("\n" * (b.line - 1) + b.code, path, "exec"), namespace)  # noqa: S102
                except Exception:  # noqa: BLE001
                    traceback.print_exc()
                    print(f"readme_examples: the example at {_label(path)} line {b.line} failed", file=sys.stderr)
                    return 1
                print(f"ran: {_label(path)} line {b.line}")
            return _close_all(namespace)
        finally:
            os.chdir(here)


def _close_all(namespace: dict) -> int:
    """Close the envs the examples left open (envrec would at interpreter exit), and check none is broken."""
    import gymnasium as gym

    problems = []
    for name, value in namespace.items():
        if isinstance(value, gym.Env | gym.vector.VectorEnv):
            value.close()
            stats = value.stats() if hasattr(value, "stats") else {}
            problems += [f"{name}: {b}" for b in _broken(stats)]
    if problems:
        print(f"readme_examples: recorders broke: {problems}", file=sys.stderr)
        return 1
    print("every env the examples left open closed cleanly")
    return 0


def _broken(stats: dict) -> list:
    """The ``broken`` reasons in a stats dict (a vector video's holds one dict per sub-env)."""
    found = [stats["broken"]] if stats.get("broken") else []
    return found + [b for v in stats.values() if isinstance(v, dict) for b in _broken(v)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*", help="Markdown files (default: README.md and GUIDES)")
    p.add_argument("--list", action="store_true", help="say what would run and what is skipped, run nothing")
    args = p.parse_args()
    files = args.files or [os.path.join(ROOT, f) for f in ("README.md", *GUIDES)]
    return run([os.path.abspath(f) for f in files], args.list)


if __name__ == "__main__":
    sys.exit(main())
