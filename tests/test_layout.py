"""The layout is the architecture: which room of the package may import which, and no import cycle anywhere.

Rooms of ``envrec`` (pipeline/): the leaves at the top (``errors``, ``extras``, ``option_checks``,
``version``), ``formats`` (what is on disk), ``contract`` (what both processes share),
``record`` and ``supervision`` (the env side), ``read`` (the read side), ``replay`` (replays
recordings: it may use the env and read sides, not the public face), ``log`` (clips to TensorBoard
and W&B: only ``formats``), ``bench``, ``doctor`` (checks
this machine with every room's own calls but the workers' and the public face's), and the
public face at the top (``__init__``, ``cli``, ``options``, ``env_ids``, ``ray``).
``envrec.workers`` (workers/) is the worker side; ``envrec.export`` and ``envrec.viewer`` read.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
PACKAGES = {"pipeline": "envrec", "workers": "envrec.workers", "export": "envrec.export", "viewer": "envrec.viewer"}
LEAVES = ("envrec.errors", "envrec.extras", "envrec.option_checks", "envrec.version")

# room prefix -> the prefixes its modules may import (besides their own room and the leaves)
MAY_IMPORT = {
    "envrec.formats": (),
    "envrec.contract": ("envrec.formats",),
    "envrec.workers": ("envrec.contract", "envrec.formats"),
    # replay loads the namespace of an env id as envrec record does (envrec.env_ids), never a module a folder names
    "envrec.replay": ("envrec.read", "envrec.record", "envrec.formats", "envrec.supervision", "envrec.env_ids"),
    "envrec.sb3": ("envrec.record", "envrec.supervision", "envrec.formats"),
    "envrec.log": ("envrec.formats",),
    "envrec.read": ("envrec.formats",),
    # the shipper: what is on disk, read as readers read it; never the env side
    "envrec.ship": ("envrec.formats", "envrec.read"),  # the loggers take a clip's file and metadata, nothing of the recorders
    # envrec doctor checks what every other room does, with their own calls; never the worker side or the public face
    "envrec.doctor": ("envrec.contract", "envrec.formats", "envrec.record", "envrec.supervision", "envrec.read",
                      "envrec.replay", "envrec.env_ids", "envrec.options"),
}



def _modules() -> dict[str, str]:
    """Every module of the installed package by its dotted name, with its path in the checkout."""
    found = {}
    for top, package in PACKAGES.items():
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, name), os.path.join(ROOT, top))[:-3].replace(os.sep, ".")
                    dotted = package if rel == "__init__" else f"{package}.{rel.removesuffix('.__init__')}"
                    found[dotted] = os.path.join(folder, name)
    return found


def _imports(dotted: str, path: str, modules: dict[str, str]) -> set[str]:
    """The modules of the package that ``dotted`` imports: at its top, in a function or for type checkers."""
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = dotted.split(".") if is_package else dotted.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != dotted}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {dotted: _imports(dotted, path, modules) for dotted, path in modules.items()}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_each_room_imports_only_what_its_rule_allows():
    graph, wrong = _graph(), []
    for room, allowed in MAY_IMPORT.items():
        for module, imported in graph.items():
            if not _under(module, room):
                continue
            for target in imported:
                if target == "envrec" or not _under(target, "envrec"):
                    continue
                if not any(_under(target, p) for p in (room, *allowed, *LEAVES)):
                    wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def test_leaves_import_only_leaves():
    graph = _graph()
    wrong = [f"{leaf} imports {t}" for leaf in LEAVES for t in graph.get(leaf, ()) if t not in LEAVES]
    assert not wrong, wrong


def test_only_the_launcher_names_the_worker_side():
    """The env side starts workers as ``python -m envrec.workers``; no module outside workers/ imports them."""
    graph = _graph()
    wrong = [f"{m} imports {t}" for m, ts in graph.items() if not _under(m, "envrec.workers")
             for t in ts if _under(t, "envrec.workers")]
    assert not wrong, wrong


def test_no_import_cycle():
    """Tarjan's strongly connected components over all imports (type-only ones too): each is one module."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_rule_sees_the_rooms():
    """The rule is not vacuous: every room exists and has modules, and workers import both shared rooms."""
    graph = _graph()
    for room in ("envrec.formats", "envrec.contract", "envrec.record", "envrec.supervision", "envrec.read", "envrec.bench",
                 "envrec.doctor"):
        assert sum(_under(m, room) for m in graph) >= 3, room
    imported = set().union(*(ts for m, ts in graph.items() if _under(m, "envrec.workers")))
    assert any(_under(t, "envrec.contract") for t in imported) and any(_under(t, "envrec.formats") for t in imported)


def test_moved_modules_import_under_their_old_paths_for_one_release():
    """``envrec.record.wrappers`` and ``envrec.record.video`` (renamed) still import, with a DeprecationWarning."""
    import importlib
    import sys

    import pytest

    import envrec
    from envrec.record import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        assert old not in _modules() and new in _modules()  # the old path is no file: git sees a rename
        with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
            module = importlib.import_module(old)
        sys.modules.pop(old, None)
        name = "RecordTrace" if old.endswith("wrappers") else "VideoRecorder"
        assert getattr(module, name) is getattr(envrec, name)


def test_an_encoder_worker_starts_without_what_only_traces_shipping_or_the_env_side_need():
    """What a video worker imports before its first ffmpeg (``envrec.workers`` and its encoder) leaves out the
    trace checks, shipping's formats, psutil, importlib.metadata and gymnasium: ~45 ms of a cold worker's start,
    which a 720p env waits for once its frame ring is full."""
    code = (
        "import sys, envrec.workers.__main__, envrec.workers.encoder\n"
        "print(sorted(m for m in ('envrec.formats.trace_checks', 'envrec.formats.shipped', 'envrec.formats.compression',"
        " 'psutil', 'importlib.metadata', 'importlib.abc', 'gymnasium') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
