"""Episodes as Arrow: one row per step, array leaves as fixed-shape tensor columns.

Columns, in order:

* ``recording`` (string): which recording (see ``envrec.export.sources``);
* ``episode_id`` (int64), ``step`` (int64): the step's number in its episode,
  0 for the first; rows are made one trace batch at a time, so a long episode
  written in parts gives each part's rows with their true numbers
  (``Episode.first_step + i``), and an episode whose oldest parts were
  evicted starts at the first step kept;
* ``observation``: the observation the action was chosen on (row 0: the
  reset observation);
* ``action``, ``reward`` (float64), ``terminated``, ``truncated`` (bool);
* ``next_observation``: the observation ``step()`` returned, so a row is a
  whole transition and an episode's last observation is kept;
* ``info`` (string): the info ``step()`` returned, as plain JSON (arrays as
  lists, non-finite floats as the strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``); null for traces written without infos.

A Box, MultiDiscrete or MultiBinary leaf is an ``arrow.fixed_shape_tensor``
column (``.to_numpy_ndarray()`` gives the recorded array back, dtype and
shape included); a Discrete leaf is int64; a Text leaf is a string; Dict and
Tuple spaces are struct columns (Tuple fields named ``"0"``, ``"1"``, ...).
Seeds, reset options and reset infos are episode-level and are not rows:
``TraceReader`` and the Minari export carry them.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from envrec.read.batch_files import Episode

__all__ = ["COLUMNS", "episodes_to_batch", "plain_json", "space_type", "step_schema"]

COLUMNS = (
    "recording", "episode_id", "step", "observation", "action", "reward",
    "terminated", "truncated", "next_observation", "info",
)


def space_type(spec: dict) -> pa.DataType:
    """The Arrow type of one value of a space, from the manifest's space spec."""
    t = spec["type"]
    if t == "Dict":
        return pa.struct([pa.field(k, space_type(sub)) for k, sub in spec["spaces"]])
    if t == "Tuple":
        return pa.struct([pa.field(str(i), space_type(sub)) for i, sub in enumerate(spec["spaces"])])
    if t == "Text":
        return pa.string()
    value = pa.from_numpy_dtype(np.dtype(spec["dtype"]))
    shape = [int(n) for n in spec["shape"]]
    return pa.fixed_shape_tensor(value, shape) if shape else value


def step_schema(manifest: Mapping[str, Any]) -> pa.Schema:
    """The schema of a recording's rows."""
    obs, act = space_type(manifest["observation_space"]), space_type(manifest["action_space"])
    return pa.schema([
        ("recording", pa.string()), ("episode_id", pa.int64()), ("step", pa.int64()),
        ("observation", obs), ("action", act), ("reward", pa.float64()),
        ("terminated", pa.bool_()), ("truncated", pa.bool_()),
        ("next_observation", obs), ("info", pa.string()),
    ])


def _tree(spec: dict, fn: Callable[..., Any], *values: Any) -> Any:
    """``fn`` applied leaf by leaf to values shaped like ``spec`` (Dict -> dict, Tuple -> tuple)."""
    t = spec["type"]
    if t == "Dict":
        return {k: _tree(sub, fn, *(v[k] for v in values)) for k, sub in spec["spaces"]}
    if t == "Tuple":
        return tuple(_tree(sub, fn, *(v[i] for v in values)) for i, sub in enumerate(spec["spaces"]))
    return fn(*values)


def _concat(parts: Sequence[Any]) -> Any:
    if isinstance(parts[0], list):
        return [x for part in parts for x in part]
    return np.concatenate(parts)


def _arrow(value: Any, typ: pa.DataType) -> pa.Array:
    if pa.types.is_struct(typ):
        items = value.values() if isinstance(value, dict) else value
        children = [_arrow(v, typ.field(i).type) for i, v in enumerate(items)]
        return pa.StructArray.from_arrays(children, fields=list(typ))
    if isinstance(typ, pa.FixedShapeTensorType):
        return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(value))
    return pa.array(value, type=typ)


def _leaves_of(spec: dict, episodes: list[Episode], field: str, lo: int, hi_extra: int) -> Any:
    """One field's leaves of every episode, rows ``lo .. length+hi_extra``, joined."""
    per_episode = [
        _tree(spec, lambda leaf, n=ep.length: leaf[lo : n + hi_extra], getattr(ep, field)) for ep in episodes
    ]
    return _tree(spec, lambda *parts: _concat(parts), *per_episode)


def plain_json(value: Any) -> Any:
    """A decoded info as plain JSON values (what DuckDB, Polars and pandas parse)."""
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain_json(value.tolist())
    if isinstance(value, np.generic):
        return plain_json(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _step_infos(ep: Episode) -> list[str | None]:
    if len(ep.infos) != ep.length + 1:  # written without infos
        return [None] * ep.length
    return [json.dumps(plain_json(info), separators=(",", ":")) for info in ep.infos[1:]]


def episodes_to_batch(name: str, manifest: Mapping[str, Any], episodes: list[Episode], schema: pa.Schema) -> pa.RecordBatch:
    """The rows of ``episodes`` (one per step; episodes without a step add none)."""
    episodes = [ep for ep in episodes if ep.length > 0]
    if not episodes:  # pa.nulls, not from_pylist([]): it cannot build an empty tensor (extension) column
        return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
    obs_spec, act_spec = manifest["observation_space"], manifest["action_space"]
    lengths = np.array([ep.length for ep in episodes], dtype=np.int64)
    n = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    columns = {
        "recording": pa.array([name] * n, pa.string()),
        "episode_id": np.repeat(np.array([ep.episode_id for ep in episodes], dtype=np.int64), lengths),
        "step": np.arange(n, dtype=np.int64) - starts + np.repeat(np.array([ep.first_step for ep in episodes], np.int64), lengths),
        "observation": _leaves_of(obs_spec, episodes, "observations", 0, 0),
        "action": _leaves_of(act_spec, episodes, "actions", 0, 0),
        "reward": np.concatenate([np.asarray(ep.rewards[: ep.length], dtype=np.float64) for ep in episodes]),
        "terminated": np.concatenate([np.asarray(ep.terminations[: ep.length], dtype=bool) for ep in episodes]),
        "truncated": np.concatenate([np.asarray(ep.truncations[: ep.length], dtype=bool) for ep in episodes]),
        "next_observation": _leaves_of(obs_spec, episodes, "observations", 1, 1),
        "info": [s for ep in episodes for s in _step_infos(ep)],
    }
    arrays = [_arrow(columns[f.name], f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
