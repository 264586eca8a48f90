"""Whether a recorded env spec may be made here: a folder can come from anyone, and ``gym.make(spec)`` calls
whatever its entry points name with whatever its kwargs say (``"os:system"`` with ``{"command": ...}``).

A recorded spec is made only when its env's entry point is the one Gymnasium registers for its id on this
machine (the env's package imported first, as ``gym.make`` would, so that it registers its ids), and each of
its ``additional_wrappers`` is a ``gymnasium.Wrapper`` class from Gymnasium or from the env's own package, and
none records or renders (envrec's wrappers, Gymnasium's ``RecordVideo`` and ``HumanRendering``).
Anything else is refused with the reason; ``--make module:function`` (your own code) makes such envs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from ..errors import ConfigError
from ..option_checks import import_named

__all__ = ["WRITING_WRAPPERS", "untrusted_reason"]

# Gymnasium's wrappers that write files or open windows where their kwargs say: never made from a folder's spec.
WRITING_WRAPPERS = frozenset({"RecordVideo", "HumanRendering"})


def _name(entry_point: Any) -> str | None:
    """An entry point as ``module:qualname`` (a registered callable's too), None when it is neither."""
    if isinstance(entry_point, str):
        return entry_point if entry_point.count(":") == 1 else None
    module, qualname = getattr(entry_point, "__module__", None), getattr(entry_point, "__qualname__", None)
    return f"{module}:{qualname}" if module and qualname else None


def _top_package(entry_point: str) -> str:
    return entry_point.split(":")[0].split(".")[0]


def _names_gymnasium(top: str) -> bool:
    """``top`` is an installed distribution's package that requires Gymnasium (in any extra): one that may
    register envs. Only such a package is imported because a folder names it (not ``os``, not ``antigravity``)."""
    for dist in importlib.metadata.packages_distributions().get(top, ()):
        try:
            requires = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist == "gymnasium" or any(r.lower().startswith("gymnasium") for r in requires):
            return True
    return False


def _registered(spec: EnvSpec) -> EnvSpec | None:
    """The spec this machine registers for ``spec.id``, importing the entry point's top-level package first
    when it is one that may register envs (ale_py registers its ids when it is imported); None when the id is
    not registered."""
    if spec.id not in gym.registry and isinstance(spec.entry_point, str):
        top = _top_package(spec.entry_point)
        if top.isidentifier() and top not in sys.modules and _names_gymnasium(top):
            try:
                module = importlib.import_module(top)
            except Exception:  # noqa: BLE001  (not installed, or broken: the id stays unregistered)
                return None
            gym.register_envs(module)
    return gym.registry.get(spec.id)


def _wrapper_reason(entry_point: Any, allowed: tuple[str, ...]) -> str | None:
    name = _name(entry_point)
    if name is None:
        return f"its wrapper entry point {entry_point!r} is not module:Class"
    module_name, qualname = name.split(":")
    if module_name.split(".")[0] == "envrec" or qualname in WRITING_WRAPPERS:
        return f"its wrapper {name} records or renders (it would write or show what a folder says): it is not made again"
    if not module_name.startswith(allowed):
        return (f"its wrapper {name} is neither Gymnasium's nor the env package's ({', '.join(dict.fromkeys(p.rstrip('.') for p in allowed))}),"
                " and a wrapper named by a folder is not imported")
    try:
        obj = import_named(name, "wrapper")
    except ConfigError as exc:
        return f"its wrapper {name} cannot be imported: {exc}"
    if not (isinstance(obj, type) and issubclass(obj, gym.Wrapper)):
        return f"its wrapper {name} is not a gymnasium.Wrapper class"
    return None


def untrusted_reason(spec: EnvSpec) -> str | None:
    """Why the recorded ``spec`` must not be made here, or None when it may.

    Args:
        spec: the recorded spec (``EnvSpec.from_json`` of the manifest's ``env.spec``).
    """
    recorded = _name(spec.entry_point)
    if recorded is None:
        return f"its recorded entry point {spec.entry_point!r} is not module:Class"
    registered = _registered(spec)
    if registered is None:
        return (f"its env id {spec.id!r} is not registered here (is the package that registers it installed?), and an "
                "entry point named by a folder is not called")
    if _name(registered.entry_point) != recorded:
        return (f"its recorded entry point {recorded} is not the one registered here for {spec.id!r} "
                f"({_name(registered.entry_point)})")
    allowed = ("gymnasium.", f"{_top_package(recorded)}.")
    for w in spec.additional_wrappers:
        why = _wrapper_reason(w.entry_point, allowed)
        if why is not None:
            return why
    return None
