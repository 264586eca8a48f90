"""Recording on a Ray cluster: an env creator for RLlib and a Ray Data reader of traces.

``recording_env_creator`` wraps the env every RLlib EnvRunner (a Ray actor)
builds so that it records into a folder of its own,
``folder/runner-<worker_index>-<pid>-<n>``: RLlib hands every sub-env of a
runner the same context, so the pid and a per-process count keep sub-envs
apart, in-process or inside ``AsyncVectorEnv`` sub-processes alike.
``read_traces`` reads those folders (or any recordings) back as a
``ray.data.Dataset`` with one read task per committed batch and the columns
of ``envrec.export.arrow_table``. Needs ``pip install envrec[ray]``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from .env_ids import make_env as make_env_by_id
from .errors import ConfigError
from .record.record_trace import RecordTrace, RecordVideo

__all__ = ["read_traces", "recording_env_creator", "runner_folder"]

_made = itertools.count()


def runner_folder(folder: str | os.PathLike, config: Any) -> str:
    """``folder/runner-<worker_index>-<pid>-<n>`` for an env made with RLlib's ``EnvContext`` (or a dict)."""
    index = getattr(config, "worker_index", None)
    if index is None and isinstance(config, Mapping):
        index = config.get("worker_index", 0)
    return os.path.join(os.fspath(folder), f"runner-{int(index or 0)}-{os.getpid()}-{next(_made)}")


def recording_env_creator(
    make_env: Callable[[Any], gym.Env] | str,
    folder: str | os.PathLike,
    trace: bool = True,
    video: bool | Mapping[str, Any] = False,
    **options: Any,
) -> Callable[[Any], gym.Env]:
    """An env creator for ``ray.tune.registry.register_env`` that records every env it makes.

    ``make_env(config)`` builds the env (or give a registered env id; it is
    made with ``render_mode="rgb_array"`` when ``video`` is on). ``trace``
    records traces (``options`` go to ``RecordTrace``: ``compression``,
    ``max_bytes``, ``batch_bytes``, ``commit_interval``, stream options); ``video=True`` adds
    ``RecordVideo`` with its defaults, a mapping gives its keyword arguments.
    Clips go to the runner folder's ``videos`` subfolder.
    """
    if not trace and not video:
        raise ConfigError("recording_env_creator records nothing: set trace=True or video=True (or a mapping)")
    if options and not trace:
        raise ConfigError(f"options {sorted(options)} are RecordTrace's, but trace=False")
    video_kwargs = dict(video) if isinstance(video, Mapping) else {}

    def create(config: Any = None) -> gym.Env:
        if isinstance(make_env, str):
            env = make_env_by_id(make_env, render_mode="rgb_array") if video else make_env_by_id(make_env)
        else:
            env = make_env(config if config is not None else {})
        where = runner_folder(folder, config)
        if video:
            env = RecordVideo(env, os.path.join(where, "videos"), **video_kwargs)
        if trace:
            env = RecordTrace(env, where, **options)
        return env

    return create


def read_traces(paths: Any, verify: bool = True, **read_args: Any) -> Any:
    """A ``ray.data.Dataset`` of every committed step under ``paths`` (one read task per batch)."""
    import ray.data

    from envrec.export.ray_source import TraceDatasource

    return ray.data.read_datasource(TraceDatasource(paths, verify=verify), **read_args)
