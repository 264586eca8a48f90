"""What ``envrec verify`` concluded, per episode, and the ``PREFIX.verify.json`` file beside the recording.

The file::

    {"version": 1, "verified_at": "2026-12-02T06:30:00+00:00", "envrec": "0.1.0", "atol": 0.0, "infos": false,
     "episodes": {"3": {"recording": PREFIX, "episode_id": 3, "status": "diverged", ...}, ...}}

``write_verdicts`` merges new verdicts into an existing file (a newer verdict of an episode replaces
the older one) and replaces it atomically. ``read_verdicts`` opens it inside the folder only and checks
every field's type: a file that is not one raises ``TraceError`` naming the field, it is never trusted.

Stable API: ``Verdict`` (``to_json()``, ``Verdict.from_json(obj, where)``), ``VerdictFile``,
``verdict_path(directory, prefix)``, ``write_verdicts(directory, prefix, verdicts, *, atol, infos)``,
``read_verdicts(directory, prefix) -> VerdictFile | None`` (None: not verified yet).
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import TraceError
from ..formats.atomic import write_atomic
from ..formats.inside import name_parts, open_inside
from ..formats.trace_checks import MAX_PARSED_JSON_BYTES, json_cost, parse_json
from ..version import __version__

__all__ = ["STATUSES", "VERDICT_SUFFIX", "Verdict", "VerdictFile", "read_verdicts", "verdict_path", "write_verdicts"]

VERDICT_SUFFIX = ".verify.json"
VERSION = 1
STATUSES = ("reproduced", "diverged", "cannot_replay")
STARTS = ("seed", "rng", "snapshot")
FIELDS = ("observations", "rewards", "terminated", "truncated", "infos")
# the file's size read back: 1.1 M verdicts as write_verdicts writes them (compact, ~230 bytes each); what
# parsing it costs is bounded too (trace_checks.MAX_PARSED_JSON_BYTES), and write_verdicts writes nothing the
# two bounds refuse
MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class Verdict:
    """What replaying one episode showed.

    Attributes:
        recording: the recording's file prefix.
        episode_id: the episode's id in it.
        index: its position across the reader of that recording.
        status: ``"reproduced"``, ``"diverged"`` or ``"cannot_replay"``.
        steps: the steps compared.
        from_step: the episode step the replay started at (0, or a snapshot's step).
        start: ``"seed"``, ``"rng"`` or ``"snapshot"``; None when it could not start.
        step: diverged: the first step that differs (0: the reset observation; s: after the s-th action).
        field: diverged: ``"observations"``, ``"rewards"``, ``"terminated"``, ``"truncated"`` or ``"infos"``.
        where: diverged: the index in the field (``"[2]"``, ``"['pos'][1]"``), None for a scalar.
        recorded, replayed: diverged: the values there (JSON).
        difference: diverged: the largest absolute difference in that field at that step (None when not numeric).
        reason: cannot_replay: why; diverged: what may explain it, or None.
        hint: what to pass or do to make it replay (e.g. ``--make module:function``), or None.
    """

    recording: str
    episode_id: int
    index: int
    status: str
    steps: int = 0
    from_step: int = 0
    start: str | None = None
    step: int | None = None
    field: str | None = None
    where: str | None = None
    recorded: Any = None
    replayed: Any = None
    difference: float | None = None
    reason: str | None = None
    hint: str | None = None

    @property
    def ok(self) -> bool:
        """The episode reproduced."""
        return self.status == "reproduced"

    def to_json(self) -> dict[str, Any]:
        """The verdict as a JSON object."""
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Verdict:
        """A verdict read back, its fields' types checked.

        Args:
            obj: the JSON object.
            where: the file and key it came from, for messages.

        Raises:
            TraceError: not a verdict (a missing or unknown key, a field of the wrong type or value).
        """
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: a verdict must be an object, not {type(obj).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise TraceError(f"{where}: unknown verdict key(s) {unknown}")
        for key in ("recording", "episode_id", "index", "status"):
            if key not in obj:
                raise TraceError(f"{where}: the verdict has no {key!r}")
        _check(where, obj)
        return cls(**obj)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check(where: str, o: dict) -> None:
    checks = {
        "recording": lambda v: isinstance(v, str),
        "episode_id": lambda v: _is_int(v) and v >= 0, "index": lambda v: _is_int(v) and v >= 0,
        "status": lambda v: v in STATUSES, "steps": lambda v: _is_int(v) and v >= 0,
        "from_step": lambda v: _is_int(v) and v >= 0, "start": lambda v: v is None or v in STARTS,
        "step": lambda v: v is None or (_is_int(v) and v >= 0), "field": lambda v: v is None or v in FIELDS,
        "where": lambda v: v is None or isinstance(v, str),
        "difference": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
        "reason": lambda v: v is None or isinstance(v, str), "hint": lambda v: v is None or isinstance(v, str),
    }
    for key, ok in checks.items():
        if key in o and not ok(o[key]):
            raise TraceError(f"{where}: verdict field {key!r} has a wrong value {o[key]!r:.80}")
    if o["status"] == "diverged" and (o.get("step") is None or o.get("field") is None):
        raise TraceError(f"{where}: a diverged verdict must name its step and field")


@dataclass(frozen=True)
class VerdictFile:
    """A ``PREFIX.verify.json`` read back.

    Attributes:
        path: the file.
        verified_at: when it was last written (ISO 8601).
        envrec: the envrec version that wrote it.
        atol, infos: the options of the last verify that wrote it.
        episodes: the verdicts by episode id.
    """

    path: str
    verified_at: str
    envrec: str
    atol: float
    infos: bool
    episodes: dict[int, Verdict]


def verdict_path(directory: str | os.PathLike, prefix: str) -> str:
    """Where the verdicts of recording ``prefix`` are stored.

    Args:
        directory: the recording's folder.
        prefix: its file prefix.
    """
    return os.path.join(os.fspath(directory), prefix + VERDICT_SUFFIX)


def read_verdicts(directory: str | os.PathLike, prefix: str) -> VerdictFile | None:
    """The stored verdicts of recording ``prefix``, None when it was never verified.

    Args:
        directory: the recording's folder (the file is opened inside it only).
        prefix: the recording's file prefix.

    Raises:
        TraceError: the file is not a verdict file (not JSON, nested too deep, a wrong version, a field of
            the wrong type), too large, or not a regular file inside the folder.
    """
    directory, name = os.fspath(directory), prefix + VERDICT_SUFFIX
    name_parts(name, f"the verdict file of {prefix!r}")
    try:
        with open_inside(directory, name, f"the verdict file of {prefix!r}") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    path = os.path.join(directory, name)
    if len(data) > MAX_BYTES:
        raise TraceError(f"{path}: larger than {MAX_BYTES} bytes, not a verdict file")
    obj = parse_json(data, path)  # depth-limited, as manifests are: a crafted nesting is a TraceError
    if not isinstance(obj, dict) or obj.get("version") != VERSION:
        raise TraceError(f"{path}: not a version {VERSION} verdict file")
    for key, kind in (("verified_at", str), ("envrec", str), ("atol", (int, float)), ("infos", bool), ("episodes", dict)):
        if not isinstance(obj.get(key), kind) or (kind != bool and isinstance(obj.get(key), bool)):
            raise TraceError(f"{path}: {key!r} is missing or of the wrong type")
    episodes = {}
    for key, value in obj["episodes"].items():
        verdict = Verdict.from_json(value, f"{path}: episodes[{key!r}]")
        if key != str(verdict.episode_id):
            raise TraceError(f"{path}: episodes[{key!r}] holds the verdict of episode {verdict.episode_id}")
        episodes[verdict.episode_id] = verdict
    return VerdictFile(path, obj["verified_at"], obj["envrec"], float(obj["atol"]), obj["infos"], episodes)


def write_verdicts(directory: str | os.PathLike, prefix: str, verdicts: Iterable[Verdict], *, atol: float,
                   infos: bool) -> str:
    """Store ``verdicts`` of recording ``prefix``, merged into its file (newer verdicts win); the file's path.

    Args:
        directory: the recording's folder.
        prefix: its file prefix.
        verdicts: the verdicts of this verify.
        atol, infos: the options they were reached with.

    Raises:
        TraceError: an existing verdict file is not one (it is not overwritten blindly).
    """
    try:
        old = read_verdicts(directory, prefix)
    except TraceError as exc:
        raise TraceError(f"{exc} (remove it to verify again)") from exc
    merged = dict(old.episodes) if old is not None else {}
    merged.update({v.episode_id: v for v in verdicts})
    obj = {
        "version": VERSION,
        "verified_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "envrec": __version__,
        "atol": atol,
        "infos": infos,
        "episodes": {str(k): merged[k].to_json() for k in sorted(merged)},
    }
    path = verdict_path(directory, prefix)
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_BYTES or json_cost(data) > MAX_PARSED_JSON_BYTES:  # what read_verdicts would refuse
        raise TraceError(f"{path}: {len(merged)} verdicts make a file larger than envrec reads back ({len(data)} bytes, "
                         f"~{json_cost(data) >> 20} MiB to parse; at most {MAX_BYTES} bytes and {MAX_PARSED_JSON_BYTES >> 20} MiB)")
    write_atomic(path, data)
    return path
