"""What replay needs, taken on the env side: the env's spec and package versions (once), the state of
``env.unwrapped.np_random`` before each unseeded reset, and a snapshot hook's states (before each reset,
and every ``snapshot_every`` steps). Nothing per step unless ``snapshot_every`` is set.

The fields are described in docs/format.md ("What replay needs"); ``envrec.replay`` reads them back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import json
import logging
import platform
import sys
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from ..env_ids import callable_name
from ..errors import ConfigError
from .action_names import action_meanings
from .snapshots import Snapshot, resolve_snapshot, snapshot_name

__all__ = ["RECORDING_WRAPPERS", "ReplayCapture", "describe_env", "env_description", "generator_state", "rng_state", "spec_json"]

logger = logging.getLogger(__name__)

# Wrappers that record: a replay must not run them again (they would write into the user's folders).
RECORDING_WRAPPERS = ("envrec.", "gymnasium.wrappers.rendering:RecordVideo", "gymnasium.wrappers.rendering:HumanRendering",
                      "stable_baselines3.common.monitor:Monitor")


def _spec(env: gym.Env) -> tuple[dict | None, str | None]:
    """The env's spec as JSON (its Gymnasium wrappers below the recorder included, recording ones left out),
    or why there is none."""
    if env.spec is None:
        return None, "the env was not made by gymnasium.make (env.spec is None)"
    return spec_json(env.spec)


def spec_json(spec: EnvSpec) -> tuple[dict | None, str | None]:
    """``spec`` as the manifest's JSON, recording wrappers left out, or None and why it cannot be written.

    Args:
        spec: an env's ``EnvSpec`` (a sub-env's, for a vector recording).
    """
    kept = tuple(w for w in spec.additional_wrappers if not str(w.entry_point).startswith(RECORDING_WRAPPERS))
    named = {k: _callable_name(getattr(spec, k)) for k in ("entry_point", "vector_entry_point") if callable(getattr(spec, k))}
    try:
        return json.loads(dataclasses.replace(spec, additional_wrappers=kept, **named).to_json()), None
    except Exception as exc:  # noqa: BLE001  (gymnasium says why in its own words; any failure means no spec)
        return None, f"its spec cannot be written as JSON: {exc}"


def _callable_name(entry_point: Any) -> Any:
    """A callable entry point (``gym.register(id, entry_point=MyEnv)``) as the ``module:qualname`` string Gymnasium
    loads, so the spec can be written as JSON; the callable itself when it has no such name, or one no other process
    can import (made in ``__main__`` or in a function): ``to_json`` then says why the spec cannot be written."""
    name = callable_name(entry_point)
    return entry_point if name is None or name.startswith("__main__:") or "<locals>" in name else name


def _versions(spec: dict | None) -> dict[str, str]:
    """Python's, Gymnasium's, NumPy's and the env's package's versions."""
    out = {"python": platform.python_version(), "gymnasium": gym.__version__}
    modules = ["numpy"]
    if spec is not None and isinstance(spec.get("entry_point"), str):
        modules.append(spec["entry_point"].split(":")[0].split(".")[0])
    for module in modules:
        version = _module_version(module)
        if version is not None:
            out[module] = version
    return out


@functools.lru_cache(maxsize=64)
def _module_version(module: str) -> str | None:
    """The version of the distribution that installs top-level ``module``, None when none does (an env of the
    user's own). Its distribution's name is tried first (``ale_py`` finds ``ale-py``): listing every installed
    distribution's files (``packages_distributions``) costs a recorder's start hundreds of milliseconds, so it is
    the fallback, and each answer is kept for the process."""
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution(module)
        if module in _top_level(dist):
            return dist.version
    where = str(getattr(sys.modules.get(module), "__file__", None) or "")
    if where and not any(part in where for part in ("site-packages", "dist-packages")):
        return None  # a module of the user's own (their script's folder): no distribution installs it
    for name in importlib.metadata.packages_distributions().get(module, ())[:1]:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The top-level modules a distribution declares (``top_level.txt``), else its own name as a module."""
    declared = dist.read_text("top_level.txt")
    if declared:
        return set(declared.split())
    return {dist.metadata["Name"].replace("-", "_").lower()}


def describe_env(env: gym.Env, snapshot: Snapshot | None = None, snapshot_every: int | None = None) -> dict:
    """The manifest's ``env``: the env's spec (or ``spec_error``), versions, the snapshot hook, and the names of
    its discrete actions when it has them (``action_meanings``, see ``envrec.record.action_names``).

    Args:
        env: the env as the recorder wraps it.
        snapshot: the snapshot hook, or None.
        snapshot_every: steps between mid-episode snapshots, or None.
    """
    return env_description(*_spec(env), snapshot=snapshot, snapshot_every=snapshot_every,
                           meanings=action_meanings(env))


def env_description(spec: dict | None, error: str | None, *, snapshot: Snapshot | None = None,
                    snapshot_every: int | None = None, meanings: list[str] | None = None) -> dict:
    """The manifest's ``env`` from its parts (``describe_env`` takes them from an env).

    Args:
        spec: the spec's JSON (``spec_json``), or None.
        error: why there is no spec, or None.
        snapshot: the snapshot hook, or None.
        snapshot_every: steps between mid-episode snapshots, or None.
        meanings: the names of the discrete actions, or None.
    """
    return {
        "spec": spec,
        "spec_error": error,
        "versions": _versions(spec),
        "snapshot": None if snapshot is None else {"name": snapshot_name(snapshot), "every": snapshot_every},
        "action_meanings": meanings,
    }


def rng_state(env: gym.Env) -> dict | None:
    """The state of ``env.unwrapped.np_random``'s bit generator (a copy), or None when it has none."""
    try:
        return generator_state(env.unwrapped.np_random)
    except AttributeError:
        return None


def generator_state(generator: Any) -> dict | None:
    """A numpy ``Generator``'s bit generator state (a copy), or None when ``generator`` is none.

    Args:
        generator: an env's ``np_random`` (read in this process, or pickled from a sub-process).
    """
    try:
        return dict(generator.bit_generator.state)
    except AttributeError:
        return None


class ReplayCapture:
    """Takes, for one wrapped env, what replay needs at each reset and every ``every`` steps.

    Args:
        env: the env the recorder wraps.
        snapshot: ``"mujoco"``, ``"ale"``, a ``Snapshot``, or None (see ``envrec.record.snapshots``).
        every: take a mid-episode snapshot after every ``every`` steps; None: at resets only.
    """

    def __init__(self, env: gym.Env, snapshot: str | Snapshot | None, every: int | None) -> None:
        self.env = env
        self.snapshot = resolve_snapshot(snapshot)
        if every is not None and (type(every) is not int or every < 1):
            raise ConfigError(f"snapshot_every must be a step count >= 1 or None, not {every!r}")
        if every is not None and self.snapshot is None:
            raise ConfigError("snapshot_every needs a snapshot hook: pass snapshot='mujoco', 'ale' or a Snapshot")
        self.every = every
        self._failed = False
        if self.snapshot is not None:
            with contextlib.suppress(Exception):  # but ConfigError: a hook that does not fit this env says so now
                self.snapshot.take(env)

    def _take(self) -> Any:
        """The hook's state, or None when it failed (logged once: the recording and the env go on without it).
        ``ConfigError``, the built-ins' word for an env they do not fit, is raised."""
        assert self.snapshot is not None
        try:
            return self.snapshot.take(self.env)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001  (a user's hook must not stop the user's job)
            if not self._failed:
                self._failed = True
                logger.warning("envrec: the snapshot hook %s failed (%r); the states it could not take are not recorded",
                               snapshot_name(self.snapshot), exc)
            return None

    def describe(self) -> dict:
        """The manifest's ``env`` (see ``describe_env``)."""
        return describe_env(self.env, self.snapshot, self.every)

    def before_reset(self, seed: int | None) -> dict[str, Any]:
        """The reset's ``rng`` (unseeded resets only: a seed replaces it) and ``reset_snapshot``."""
        out: dict[str, Any] = {}
        if seed is None:
            out["rng"] = rng_state(self.env)
        if self.snapshot is not None:
            out["reset_snapshot"] = self._take()
        return out

    def after_step(self, step: int) -> dict | None:
        """The state after step ``step`` of the episode (1 for its first) when one is due, else None."""
        if self.every is None or step % self.every:
            return None
        state = self._take()
        return None if state is None else {"step": step, "rng": rng_state(self.env), "state": state}
