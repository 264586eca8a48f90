"""Snapshots: a simulator's whole state as one array, taken while recording and restored by replay.

``RecordTrace(env, folder, snapshot=...)`` takes one just before every reset (and every
``snapshot_every`` steps); replay restores it so an episode starts, or resumes, where the
recorded one did, even when the env keeps randomness outside ``np_random`` (ALE's sticky
actions) or when the episode's start was evicted.

Two hooks are built in: ``MUJOCO`` (any Gymnasium ``MujocoEnv``: MuJoCo's integration state,
which ``mj_setState`` and ``mj_forward`` restore bit for bit) and ``ALE`` (an Atari env's
emulator, with the RNG of its sticky actions). A hook of your own is any object with ``name``,
``take`` and ``restore``; to be restored by ``envrec verify``/``render`` it must be importable as
``module:qualname``, which is what is recorded as its name. ``mujoco`` and ``ale_py`` are imported
only when a hook is used.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import ConfigError
from ..extras import install_hint
from ..option_checks import import_named

__all__ = ["ALE", "MUJOCO", "AleSnapshot", "MujocoSnapshot", "Snapshot", "resolve_snapshot", "snapshot_name"]

ACCEPTED = '"mujoco", "ale", "module:qualname" (an importable Snapshot), an object with take(env) and restore(env, state), or None'


@runtime_checkable
class Snapshot(Protocol):
    """A simulator's state: ``take`` returns it as an array, ``restore`` puts it back into an env of the same kind."""

    name: str

    def take(self, env: Any) -> np.ndarray:
        """The state of ``env`` (the env ``RecordTrace`` wraps; reach the simulator through ``env.unwrapped``)."""
        ...

    def restore(self, env: Any, state: np.ndarray) -> None:
        """Put ``state`` (an array ``take`` returned, perhaps read back from disk) into ``env``."""
        ...


def _mujoco_parts(env: Any) -> tuple[Any, Any, Any]:
    try:
        import mujoco
    except ImportError as exc:
        raise ConfigError(f"snapshot='mujoco' needs the mujoco package (pip install mujoco): {exc}") from exc
    base = env.unwrapped
    model, data = getattr(base, "model", None), getattr(base, "data", None)
    if not isinstance(model, mujoco.MjModel) or not isinstance(data, mujoco.MjData):
        raise ConfigError(f"snapshot='mujoco' needs a MuJoCo env (env.unwrapped.model and .data), got {type(base).__name__}")
    return mujoco, model, data


class MujocoSnapshot:
    """MuJoCo's integration state (``mjSTATE_INTEGRATION``: time, positions, velocities, actuator and plugin
    state, controls, applied forces, mocap, equality flags, user data and the solver's warm start) as float64."""

    name = "mujoco"

    def take(self, env: Any) -> np.ndarray:
        """``mj_getState`` of ``env.unwrapped``'s model and data.

        Args:
            env: a Gymnasium MuJoCo env, wrapped or not.
        """
        mujoco, model, data = _mujoco_parts(env)
        sig = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(model, sig), dtype=np.float64)
        mujoco.mj_getState(model, data, state, sig)
        return state

    def restore(self, env: Any, state: np.ndarray) -> None:
        """``mj_setState`` then ``mj_forward`` (so positions, contacts and sensors match the state again).

        Args:
            env: a Gymnasium MuJoCo env of the same model as the one the state was taken from.
            state: what ``take`` returned.
        """
        mujoco, model, data = _mujoco_parts(env)
        sig = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.ascontiguousarray(state, dtype=np.float64).reshape(-1)
        size = mujoco.mj_stateSize(model, sig)
        if state.size != size:
            raise ConfigError(f"a MuJoCo snapshot of {state.size} numbers does not fit this model, whose state has {size}")
        mujoco.mj_setState(model, data, state, sig)
        mujoco.mj_forward(model, data)

    def __repr__(self) -> str:
        return "envrec.record.snapshots.MUJOCO"


def _ale_interface(env: Any) -> Any:
    ale = getattr(env.unwrapped, "ale", None)
    if ale is None or not hasattr(ale, "cloneState"):
        raise ConfigError(f"snapshot='ale' needs an Atari env (ale_py's, with env.unwrapped.ale), got {type(env.unwrapped).__name__}")
    return ale


class AleSnapshot:
    """The Arcade Learning Environment's state with its RNG (``cloneState(include_rng=True)``), as its bytes."""

    name = "ale"

    def take(self, env: Any) -> np.ndarray:
        """The serialized ``ALEState`` of ``env.unwrapped.ale`` as a uint8 array.

        Args:
            env: an ale_py env, wrapped or not.
        """
        state = _ale_interface(env).cloneState(include_rng=True)
        return np.frombuffer(state.serialize(), dtype=np.uint8).copy()

    def restore(self, env: Any, state: np.ndarray) -> None:
        """``ale.restoreState`` of the ``ALEState`` those bytes are.

        Args:
            env: an ale_py env of the same game.
            state: what ``take`` returned.
        """
        ale = _ale_interface(env)
        try:
            import ale_py
        except ImportError as exc:
            raise ConfigError(f"snapshot='ale' needs the ale-py package ({install_hint('atari')}): {exc}") from exc
        ale.restoreState(ale_py.ALEState(np.ascontiguousarray(state, dtype=np.uint8).tobytes()))

    def __repr__(self) -> str:
        return "envrec.record.snapshots.ALE"


MUJOCO: Snapshot = MujocoSnapshot()
ALE: Snapshot = AleSnapshot()
BUILT_IN: dict[str, Snapshot] = {"mujoco": MUJOCO, "ale": ALE}


# What "module:qualname" strings resolved to, so snapshot_name gives the same name back (holding each object).
_IMPORTED: dict[int, tuple[object, str]] = {}


def _is_snapshot(obj: object) -> bool:
    return not isinstance(obj, type) and callable(getattr(obj, "take", None)) and callable(getattr(obj, "restore", None))


def _import(spec: str) -> object:
    if ":" not in spec:
        raise ConfigError(f"snapshot={spec!r}: expected {ACCEPTED}")
    return import_named(spec, "snapshot")


def resolve_snapshot(spec: str | Snapshot | None) -> Snapshot | None:
    """The snapshot hook ``spec`` names.

    Args:
        spec: ``"mujoco"``, ``"ale"``, ``"module:qualname"`` (imported: an object with ``take`` and
            ``restore``, not a class), a Snapshot object, or ``None`` (no hook).

    Returns:
        The hook, or ``None``.

    Raises:
        ConfigError: ``spec`` is none of these, or its import fails.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec in BUILT_IN:
            return BUILT_IN[spec]
        if ":" not in spec:
            raise ConfigError(f"snapshot={spec!r} is unknown: expected {ACCEPTED}")
        obj = _import(spec)
        if isinstance(obj, type):
            raise ConfigError(f"snapshot={spec!r} names a class: name an instance of it (module:OBJECT); expected {ACCEPTED}")
        if not _is_snapshot(obj):
            raise ConfigError(f"snapshot={spec!r} names {obj!r}, which has no take(env) and restore(env, state): expected {ACCEPTED}")
        _IMPORTED[id(obj)] = (obj, spec)
        return obj  # type: ignore[return-value]
    if _is_snapshot(spec):
        return spec
    raise ConfigError(f"snapshot={spec!r}: expected {ACCEPTED}")


def snapshot_name(snapshot: Snapshot) -> str:
    """The name to record for ``snapshot``: ``"mujoco"``/``"ale"`` for the built-ins, the ``"module:qualname"``
    it was resolved from, or under which it is importable (its own ``__module__``/``__qualname__``, or a
    module-level name in its class's module), so replay can restore with it; else its ``repr``.

    Args:
        snapshot: a hook ``resolve_snapshot`` returned.
    """
    for name, built_in in BUILT_IN.items():
        if snapshot is built_in:
            return name
    if id(snapshot) in _IMPORTED and _IMPORTED[id(snapshot)][0] is snapshot:
        return _IMPORTED[id(snapshot)][1]
    module, qualname = getattr(snapshot, "__module__", None), getattr(snapshot, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname and _imports_as(f"{module}:{qualname}", snapshot):
        return f"{module}:{qualname}"
    module = getattr(type(snapshot), "__module__", None)
    found = sys.modules.get(module) if isinstance(module, str) else None
    for attr, value in vars(found).items() if found is not None else ():
        if value is snapshot and not attr.startswith("_"):
            return f"{module}:{attr}"
    return repr(snapshot)


def _imports_as(spec: str, obj: object) -> bool:
    try:
        return _import(spec) is obj
    except ConfigError:
        return False
