"""What replay needs, as it is on disk: the manifest's ``env`` and an episode record's ``rng``,
``reset_snapshot`` and ``snapshots`` (docs/format.md, "What replay needs").

The env side takes them (``envrec.record.replay_capture``), the serializer writes them into the records
(``episode_keys``, ``pop_snapshot``), the reader checks them here before anything relies on them
(``check_env``, ``check_episode_keys``): a folder from anywhere gives a ``TraceError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import TraceError
from .infos import encode_json

__all__ = [
    "EPISODE_KEYS", "FIRST_PART_KEYS", "SNAPSHOT_INFO_KEY", "check_env", "check_episode_keys", "episode_keys", "pop_snapshot",
]

# A step's snapshot travels to the serializer inside that step's packed info, under this key, and is taken
# out there: the info written is the env's own.
SNAPSHOT_INFO_KEY = "__envrec_snapshot__"
# taken at the reset: on an episode's first part only. ``rng_inferred``: ``rng`` was read after the previous
# episode's reset, not just before this one (a same-step autoreset: envrec.record.sub_env_replay)
FIRST_PART_KEYS = ("rng", "rng_inferred", "reset_snapshot")
EPISODE_KEYS = (*FIRST_PART_KEYS, "snapshots")
_TAGGED_ARRAY = "numpy"  # how envrec.formats.infos tags an array in JSON


def episode_keys(reset_meta: Mapping[str, Any]) -> dict:
    """The record keys of a reset's ``rng`` and ``reset_snapshot`` (JSON-ready), from the reset's unpacked meta."""
    return {k: encode_json(reset_meta[k]) for k in FIRST_PART_KEYS if reset_meta.get(k) is not None}


def pop_snapshot(info: Any) -> Any:
    """A step's snapshot taken out of its unpacked info (JSON-ready), or None when it carries none."""
    if type(info) is not dict or SNAPSHOT_INFO_KEY not in info:
        return None
    return encode_json(info.pop(SNAPSHOT_INFO_KEY))


def _fail(where: str, what: str, value: Any) -> TraceError:
    text = repr(value)
    return TraceError(f"{where}: {text[:80] + '...' if len(text) > 80 else text} is not {what}")


def _check_rng(rng: Any, where: str) -> None:
    """A numpy bit generator's ``state``: a JSON object naming its ``bit_generator``."""
    if not isinstance(rng, dict) or not isinstance(rng.get("bit_generator"), str) or not isinstance(rng.get("state"), dict):
        raise _fail(where, "a numpy bit generator's state (an object with bit_generator and state)", rng)


def _check_tagged_array(value: Any, where: str) -> None:
    if not isinstance(value, dict) or value.get("__type") != _TAGGED_ARRAY:
        raise _fail(where, "an array as envrec writes one (a tagged JSON object)", value)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_episode_keys(raw: Mapping[str, Any], where: str) -> None:
    """An episode record's replay keys (each optional), checked as far as replay relies on them.

    Args:
        raw: the parsed episode record.
        where: the batch and episode, for messages.
    """
    if raw.get("rng") is not None:
        _check_rng(raw["rng"], f"{where}.rng")
    if raw.get("rng_inferred") is not None and not isinstance(raw["rng_inferred"], bool):
        raise _fail(f"{where}.rng_inferred", "true or false", raw["rng_inferred"])
    if raw.get("reset_snapshot") is not None:
        _check_tagged_array(raw["reset_snapshot"], f"{where}.reset_snapshot")
    snapshots = raw.get("snapshots")
    if snapshots is None:
        return
    if not isinstance(snapshots, list):
        raise _fail(f"{where}.snapshots", "a list", snapshots)
    last = -1
    for i, s in enumerate(snapshots):
        at = f"{where}.snapshots[{i}]"
        if not isinstance(s, dict) or not _is_int(s.get("step")) or not last < s["step"] < 1 << 62:
            raise _fail(at, f"a snapshot with a step after {last}", s)
        last = s["step"]
        _check_tagged_array(s.get("state"), f"{at}.state")
        if s.get("rng") is not None:
            _check_rng(s["rng"], f"{at}.rng")


def check_env(env: Any, what: str) -> None:
    """A manifest's ``env``: the env's spec (or why there is none), package versions, the snapshot hook, the action names.

    Args:
        env: the manifest's ``env`` value.
        what: the manifest's file name, for messages.
    """
    where = f"{what}: env"
    if not isinstance(env, dict):
        raise _fail(where, "an object", env)
    if env.get("spec") is not None and not isinstance(env["spec"], dict):
        raise _fail(f"{where}.spec", "an env spec (an object)", env["spec"])
    if env.get("spec_error") is not None and not isinstance(env["spec_error"], str):
        raise _fail(f"{where}.spec_error", "a string", env["spec_error"])
    versions = env.get("versions")
    if versions is not None and not (isinstance(versions, dict) and all(isinstance(v, str) for v in versions.values())):
        raise _fail(f"{where}.versions", "an object of version strings", versions)
    names = env.get("action_meanings")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise _fail(f"{where}.action_meanings", "a list of action names (strings) or null", names)
    snap = env.get("snapshot")
    if snap is not None:
        if not isinstance(snap, dict) or not isinstance(snap.get("name"), str):
            raise _fail(f"{where}.snapshot", "an object with a name", snap)
        every = snap.get("every")
        if every is not None and not (_is_int(every) and every >= 1):
            raise _fail(f"{where}.snapshot.every", "a step count >= 1 or null", every)
