"""The repository's ``scripts/`` as modules, and recordings written through the commit bench's serializer driver."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from types import ModuleType

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts")


def load_script(path: str) -> ModuleType:
    """``scripts/<path>`` (e.g. ``"soak/soak_long_run.py"``) imported as a module (its ``main`` not run)."""
    spec = importlib.util.spec_from_file_location(os.path.basename(path).removesuffix(".py"), os.path.join(SCRIPTS, path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_segmented(folder: str, segment_batches: int, lengths: Iterable[int]) -> None:
    """A recording of one batch per episode of ``lengths`` steps, whose manifest closes a segment every
    ``segment_batches`` batches (the real writer, ``bench_commit.Driver``'s serializer in this process)."""
    import envrec.workers.manifest_writer as mw

    driver = load_script("bench/bench_commit.py").Driver
    saved, mw.SEGMENT_BATCHES = mw.SEGMENT_BATCHES, segment_batches
    try:
        d = driver(folder)
        for n in lengths:
            d.episode_of(n)
        d.close()
    finally:
        mw.SEGMENT_BATCHES = saved
