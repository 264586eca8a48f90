"""The recorded env made again: from the manifest's ``env.spec``, from its ``env_id``, or by the user's code.

A recording's manifest holds, under ``"env"``, the env's Gymnasium ``EnvSpec`` as JSON (kwargs and
the user's wrappers below ``RecordTrace`` as ``additional_wrappers``). ``recreate_env`` turns it back
into an ``EnvSpec`` (``EnvSpec.from_json``) and, once ``envrec.replay.trust`` lets it (the id registered
here with that entry point, its wrappers loaded, no path or huge size in its kwargs), calls
``gym.make(spec, **overrides)``, which runs the registered env's code. A recording
without the ``"env"`` key (an older envrec) falls back to ``gym.make(env_id)`` with the id's
registered defaults, and says so in the log. ``make="module:function"`` (``--make``) replaces both:
``function(**overrides)`` builds the env, for envs made by code and never registered.

Stable API (``envrec render`` builds on it):

* ``recreate_env(manifest, *, make=None, render_mode=KEEP, env_kwargs=None, trusted=None, trust=None) -> gym.Env``;
* ``refusal(manifest, trust=None, replaced=None) -> CannotRecreate | None``: why a folder's names keep it from being made;
* ``describe_source(manifest, make=None) -> str``: how the env would be made, for messages;
* ``load_callable(text) -> Callable``: a ``module:qualname`` imported;
* ``CannotRecreate`` (a ``ConfigError``) with ``reason`` and ``hint`` (which names ``--make``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from ..errors import ConfigError
from ..option_checks import import_named
from .trust import Refused, Trust, recorded_env_id, spec_refusal

__all__ = ["KEEP", "MAKE_HINT", "CannotRecreate", "describe_source", "load_callable", "recreate_env", "refusal", "spec_trusted"]

logger = logging.getLogger(__name__)
_WARNED: set[tuple[Any, str]] = set()  # (prefix, env id) of the recordings without a spec said so in this process

KEEP: Any = type("Keep", (), {"__repr__": lambda self: "KEEP"})()  # render_mode: as recorded
MAKE_HINT = ("pass --make module:function (make='module:function' or a callable in Python): a function that "
             "builds the env as the recording made it")


class CannotRecreate(ConfigError):
    """The recorded env cannot be made again.

    Attributes:
        reason: why not (the spec is missing, its entry point does not import, making it raised).
        hint: what to pass instead (names ``--make``).
    """

    def __init__(self, reason: str, hint: str = MAKE_HINT) -> None:
        super().__init__(f"{reason}; {hint}")
        self.reason = reason
        self.hint = hint


def load_callable(text: str) -> Callable[..., Any]:
    """The object ``module:qualname`` names (``pkg.mod:make_env``, ``pkg.mod:Factory.create``).

    Args:
        text: ``module:qualname``.

    Raises:
        ConfigError: not of that form, the module does not import, or it has no such attribute or it is
            not callable.
    """
    obj = import_named(text, "make")
    if not callable(obj):
        raise ConfigError(f"{text!r} is not callable: {type(obj).__name__}")
    return obj


def _overrides(render_mode: Any, env_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    kwargs = dict(env_kwargs or {})
    if render_mode is not KEEP:
        kwargs["render_mode"] = render_mode
    return kwargs


def recreate_env(
    manifest: Mapping[str, Any],
    *,
    make: str | Callable[..., gym.Env] | None = None,
    render_mode: Any = KEEP,
    env_kwargs: Mapping[str, Any] | None = None,
    trusted: str | None = None,
    trust: Trust | None = None,
) -> gym.Env:
    """A fresh env like the one the recording wrapped (below ``RecordTrace``).

    Args:
        manifest: the recording's head manifest (``TraceReader(...).recordings[k].manifest``).
        make: ``"module:function"`` or a callable that builds the env instead of the recorded spec; it is
            called with the overrides as keyword arguments (``render_mode=`` only when one is given).
        render_mode: the render mode to make it with; default ``KEEP``: as recorded.
        env_kwargs: more keyword arguments for the env (they win over the recorded ones), e.g.
            ``{"width": 640}``.
        trusted: the spec the process that started this job checked (``spec_trusted``'s JSON: a fresh
            interpreter may lack the user's registrations); the recorded spec is made unchecked only when it is
            that very spec (the folder may change in between). Default None: checked here
            (``envrec.replay.trust``).
        trust: what the user trusts beyond what a folder may name (``--import``, ``--trust-kwargs``); default
            nothing. The recorded kwargs that ``env_kwargs`` (and ``render_mode``) replace are not checked.

    Raises:
        CannotRecreate: no spec and no registered id, the entry point does not import, or making it raised;
            its message names ``--make``.
        ConfigError: ``make`` is not a ``module:function`` that imports.
    """
    kwargs = _overrides(render_mode, env_kwargs)
    if make is not None:
        fn = load_callable(make) if isinstance(make, str) else make
        try:
            return fn(**kwargs)
        except Exception as exc:  # user code may raise anything
            raise CannotRecreate(f"{describe_source(manifest, make)} raised {type(exc).__name__}: {exc}",
                                 "check that function: it must build the env the recording wrapped") from exc
    trust = trust or Trust()
    spec = _spec(manifest, trust, _replaced(manifest, render_mode, env_kwargs), trusted)
    target: str | EnvSpec
    if spec is not None:
        target = spec
    else:
        target = _env_id(manifest, trust)
        if (manifest.get("prefix"), target) not in _WARNED:  # once per recording, not per episode replayed
            _WARNED.add((manifest.get("prefix"), target))
            logger.warning("%s has no recorded env spec (recorded by an older envrec): making %r with its registered "
                           "defaults; kwargs the recording gave gym.make are not known", _prefix(manifest), target)
    try:
        env = gym.make(target, **kwargs)
    except Exception as exc:  # gym.make raises import, registry and env errors of every type
        raise CannotRecreate(f"cannot recreate the env: {describe_source(manifest)} raised {type(exc).__name__}: {exc}") from exc
    return env


def _prefix(manifest: Mapping[str, Any]) -> str:
    return f"recording {manifest.get('prefix')!r}"


def _replaced(manifest: Mapping[str, Any], render_mode: Any, env_kwargs: Mapping[str, Any] | None) -> set[str]:
    """The recorded kwargs the caller replaces with values of its own: they are not used, so not checked (verify's
    render mode is the recorded one: checked)."""
    env = manifest.get("env")
    spec = env.get("spec") if isinstance(env, Mapping) else None
    kwargs = spec.get("kwargs") if isinstance(spec, Mapping) else None
    recorded = kwargs.get("render_mode") if isinstance(kwargs, Mapping) else None
    own_mode = render_mode is not KEEP and (render_mode is None or render_mode != recorded)
    return set(env_kwargs or ()) | ({"render_mode"} if own_mode else set())


def spec_trusted(manifest: Mapping[str, Any], trust: Trust | None = None, replaced: set[str] | None = None) -> str | None:
    """The recorded spec of ``manifest`` as this process would make it (it has one, and ``envrec.replay.trust``
    lets it), as canonical JSON for ``recreate_env(trusted=...)``; None when it would not.

    Args:
        manifest: the recording's head manifest.
        trust: what the user trusts (default nothing).
        replaced: the recorded kwargs the caller replaces (render's env kwargs and render mode).
    """
    try:
        return _canonical(manifest["env"]["spec"]) if _spec(manifest, trust or Trust(), replaced or set()) is not None else None
    except CannotRecreate:
        return None


def refusal(manifest: Mapping[str, Any], trust: Trust | None = None, replaced: set[str] | None = None) -> CannotRecreate | None:
    """Why the recorded env of ``manifest`` would not be made (``recreate_env`` would raise this), without making
    it; None when it would be made (or tried).

    Args:
        manifest: the recording's head manifest.
        trust: what the user trusts (default nothing).
        replaced: the recorded kwargs the caller replaces (render's env kwargs and render mode).
    """
    try:
        if _spec(manifest, trust or Trust(), replaced or set()) is None:
            _env_id(manifest, trust or Trust())
    except CannotRecreate as exc:
        return exc
    return None


def _canonical(spec: Any) -> str:
    return json.dumps(spec, sort_keys=True)


def _spec(manifest: Mapping[str, Any], trust: Trust, replaced: set[str], trusted: str | None = None) -> EnvSpec | None:
    """The recorded ``EnvSpec``, None for a recording without an ``"env"`` key; ``CannotRecreate`` when the
    recording says it has none, or it is not a spec."""
    env = manifest.get("env")
    if env is None:
        return None
    if not isinstance(env, Mapping):
        raise CannotRecreate(f"{_prefix(manifest)}: its manifest's env is not an object")
    spec = env.get("spec")
    if spec is None:
        why = env.get("spec_error") or "the env had no spec (made by code, not gym.make)"
        raise CannotRecreate(f"{_prefix(manifest)} has no env spec to recreate the env from: {why}")
    not_spec = f"{_prefix(manifest)}: its recorded env spec is not a Gymnasium EnvSpec"
    if not isinstance(spec, Mapping):
        raise CannotRecreate(f"{not_spec}: it is a {type(spec).__name__}, not an object")
    missing = [key for key in ("id", "additional_wrappers") if key not in spec]  # from_json says a bare KeyError
    if missing:
        raise CannotRecreate(f"{not_spec}: it has no {' and no '.join(map(repr, missing))} key")
    try:
        made = EnvSpec.from_json(json.dumps(spec))
    except Exception as exc:  # from_json raises several types on a malformed spec
        raise CannotRecreate(f"{not_spec}: {exc}") from exc
    why = None if trusted is not None and trusted == _canonical(spec) else spec_refusal(made, trust, replaced)
    if why is not None:
        raise CannotRecreate(f"{_prefix(manifest)}: the recorded env spec is not made here: {why.reason}", why.hint)
    return made


def _env_id(manifest: Mapping[str, Any], trust: Trust) -> str:
    """The id an older recording (no spec) is made from: ``module:Id`` only when the user imported ``module``."""
    env_id = manifest.get("env_id")
    if not isinstance(env_id, str) or not env_id:
        raise CannotRecreate(f"{_prefix(manifest)} names no env: no env spec and no env id (the env was made by code)")
    found = recorded_env_id(env_id, trust)  # gym.make("module:Id") would import the module a folder names
    if isinstance(found, Refused):
        raise CannotRecreate(f"{_prefix(manifest)}: {found.reason}", found.hint)
    return found


def describe_source(manifest: Mapping[str, Any], make: str | Callable[..., Any] | None = None) -> str:
    """How the env of ``manifest`` is (or would be) made, for messages and logs.

    Args:
        manifest: the recording's head manifest.
        make: the ``make`` given to ``recreate_env``, if any.
    """
    if make is not None:
        name = make if isinstance(make, str) else getattr(make, "__qualname__", repr(make))
        return f"make={name}"
    env = manifest.get("env")
    spec = env.get("spec") if isinstance(env, Mapping) else None
    if isinstance(spec, Mapping):
        return f"gym.make of the recorded spec {spec.get('id')!r} (entry point {spec.get('entry_point')!r})"
    return f"gym.make({manifest.get('env_id')!r})"
