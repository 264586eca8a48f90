"""The size rules a reviewer asks for: a module is one concept, a function fits on a screen.

The linter and the type checker (ruff, mypy) are not run here: they are CI's step of their own before the
tests, ``scripts/ci/lint.py``, which a contributor runs as it is.
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
FUNCTION_LINES = 70  # a function fits on a screen (a long signature is not a long function: a little slack)
# Modules are split by concept, not by size: one concept may take 700-1000 lines (CPython's
# concurrent/futures/process.py, Gymnasium's async_vector_env.py). This bound only catches a module that
# became several: past it, say which concepts it holds and split them.
MODULE_LINES = 1000


def test_modules_and_functions_stay_small():
    too_big = []
    for top in ("pipeline", "workers", "export", "viewer"):
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                text = open(path).read()
                rel = os.path.relpath(path, ROOT)
                if text.count("\n") > MODULE_LINES:
                    too_big.append(f"{rel}: {text.count(chr(10))} lines")
                for node in ast.walk(ast.parse(text)):
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= FUNCTION_LINES:
                        too_big.append(f"{rel}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not too_big, too_big
