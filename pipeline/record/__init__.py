"""The env side that users wrap their environments in: the Gymnasium wrappers,
the vector wrappers, the trace and video recorders (and the clip state of the
latter), the packer that turns a step into ring records, clip triggers and
the commit watcher.

Never imported by ``envrec.workers``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

# Modules renamed to say what they hold; their old paths import, with a DeprecationWarning, for one release.
MOVED = {
    "envrec.record.wrappers": "envrec.record.record_trace",
    "envrec.record.video": "envrec.record.video_recorder",
}


class _MovedModules:
    """Finds a module's old path (``MOVED``): a module of that name holding the new one's names. A meta path
    finder and loader by their methods (importlib.abc's base classes cost every process ~6 ms to import,
    workers included: ``envrec.headless_display`` runs at ``import envrec``)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self)) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} is now {new}; import the public names from envrec itself (envrec.RecordTrace, envrec.VideoRecorder)",
                      DeprecationWarning, stacklevel=2)
        module.__dict__.update({k: v for k, v in vars(importlib.import_module(new)).items() if not k.startswith("__")})


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
