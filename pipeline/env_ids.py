"""Making an environment from its id, with the packages that register its namespace loaded first.

Gymnasium 1.x no longer imports environment packages by itself: ``ALE/Pong-v5``
is "Namespace ALE not found" until ``ale_py`` has been imported (what
``gym.register_envs(ale_py)`` is for). Every envrec command that takes an
env id (``record``, ``bench``, the Minari export, Ray's env creator) goes
through :func:`make_env`, which first loads, for an id that is not
registered yet:

1. the ``gymnasium.envs`` entry points of installed packages (Gymnasium's
   plugin group; shimmy, for one, still declares it) named after the id's
   namespace, then any others;
2. the package known to register that namespace on import (``ALE``: ale-py);

then leaves the rest to ``gym.make``, whose own error names what is missing.
An id of the form ``module:Env-v0`` is Gymnasium's own way and works as is.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from importlib.metadata import entry_points
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator, parse_env_id, registry

from .extras import install_hint

__all__ = ["NAMESPACE_PACKAGES", "PLUGIN_GROUP", "callable_name", "declared_render_modes", "id_module", "is_module_name",
           "load_env_namespace", "make_env"]

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "gymnasium.envs"
# Namespaces whose package registers them on import and declares no plugin.
NAMESPACE_PACKAGES = {"ALE": ("ale_py", "atari")}  # namespace: (module, envrec's extra that installs it)


def is_module_name(text: Any) -> bool:
    """Whether ``text`` is a dotted module name (``mypackage.envs``): what ``--import`` takes and ``module:Id`` names."""
    return isinstance(text, str) and bool(text) and all(part.isidentifier() for part in text.split("."))


def id_module(env_id: str) -> str:
    """The module an env id ``module:Env-v0`` names (Gymnasium's form), ``""`` for any other id."""
    return env_id.rpartition(":")[0]


def callable_name(obj: Any) -> str | None:
    """An entry point (a registered class or function) as the ``module:qualname`` Gymnasium loads, or None when it
    has no such name."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}:{qualname}" if module and qualname else None


def _known(env_id: str) -> bool:
    return env_id in registry


def _namespace(env_id: str) -> str | None:
    try:
        return parse_env_id(env_id)[0]
    except gym.error.Error:
        return None


def _load_plugins(namespace: str | None, env_id: str) -> None:
    plugins = sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name != namespace)  # its own first
    for ep in plugins:
        if _known(env_id):
            return
        try:
            loaded = ep.load()
            if callable(loaded):
                loaded()
        except Exception as exc:  # noqa: BLE001  (a broken plugin must not hide the others)
            logger.warning("envrec: the %s plugin %s (%s) failed to load: %s", PLUGIN_GROUP, ep.name, ep.value, exc)


def load_env_namespace(env_id: str) -> str | None:
    """Import what registers ``env_id``'s namespace, if it is not registered yet.

    Returns the ``pip install`` command for the package known to register the
    namespace when it is missing (``envrec.extras.install_hint``; ``None`` otherwise); never raises for that.
    """
    if ":" in env_id or _known(env_id):
        return None
    namespace = _namespace(env_id)
    _load_plugins(namespace, env_id)
    module, extra = NAMESPACE_PACKAGES.get(namespace or "", (None, None))
    if module is None or _known(env_id):
        return None
    try:
        gym.register_envs(importlib.import_module(module))
    except ImportError as exc:
        logger.debug("envrec: %s, which registers namespace %s, cannot be imported: %s", module, namespace, exc)
        return install_hint(extra or "")
    return None


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make(env_id, **kwargs)`` once the packages registering ``env_id`` are loaded.

    Gymnasium's own errors pass through; "Namespace ALE not found" with
    ale-py missing also says what to install. An id ``module:Env-v0`` stays
    the env's ``spec.id`` as given (Gymnasium drops the module), so a
    recording names the module the env comes from and replay can make it
    again once the user trusts that module (``--import module``).
    """
    missing = load_env_namespace(env_id)
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.NamespaceNotFound as exc:
        if missing is None:
            raise
        raise gym.error.NamespaceNotFound(f"{exc} ({missing})") from exc
    base = env.unwrapped
    if ":" in env_id and base.spec is not None and base.spec.id != env_id:
        base.spec = dataclasses.replace(base.spec, id=env_id)
    return env


def declared_render_modes(env_id: str) -> list[str] | None:
    """The render modes ``env_id``'s class declares (``metadata["render_modes"]``), read without making the env;
    None when they cannot be told (an unknown id, an entry point that is a function without metadata).

    Args:
        env_id: a registered id, or ``module:Env-v0`` (the module is imported, as ``gym.make`` would).
    """
    load_env_namespace(env_id)
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        entry_point = gym.spec(name).entry_point
        creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    except (ImportError, AttributeError, gym.error.Error) as exc:
        logger.debug("envrec: the render modes of %s cannot be told before making it: %s", env_id, exc)
        return None
    modes = (getattr(creator, "metadata", None) or {}).get("render_modes")
    return [str(m) for m in modes] if isinstance(modes, list | tuple) else None
