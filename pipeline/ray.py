"""Recording on a Ray cluster: an env creator for RLlib and a Ray Data reader of traces.

``recording_env_creator`` wraps the env every RLlib EnvRunner (a Ray actor)
builds so that it records into a folder of its own,
``folder/runner-<worker_index>-<pid>-<n>``: RLlib hands every sub-env of a
runner the same context, so the pid and a per-process count keep sub-envs
apart, in-process or inside ``AsyncVectorEnv`` sub-processes alike.
With ``ship_to=URL`` every runner's recorder also ships what it commits to
``URL`` (docs/cluster.md), its recorder id there ``runner-<worker_index>-<n>``
plus the process's unique suffix: nodes need no shared file system, and a
node that dies keeps every batch it shipped. ``read_traces`` reads those
folders (or any recordings, or a shipped run's URL) back as a
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
SHIPPING = ("ship_to", "storage_options")  # the stream options clips take too


def runner_folder(folder: str | os.PathLike, config: Any) -> str:
    """``folder/runner-<worker_index>-<pid>-<n>`` for an env made with RLlib's ``EnvContext`` (or a dict)."""
    return os.path.join(os.fspath(folder), _runner_name(config, next(_made)))


def _runner_name(config: Any, n: int) -> str:
    index = getattr(config, "worker_index", None)
    if index is None and isinstance(config, Mapping):
        index = config.get("worker_index", 0)
    return f"runner-{int(index or 0)}-{os.getpid()}-{n}"


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

    Args:
        make_env: ``make_env(config) -> gym.Env``, or a registered env id.
        folder: where each env's runner folder is made, on the node that steps it (a local disk is fine
            with ``ship_to``).
        trace: record traces.
        video: record clips too (``True``, or ``RecordVideo``'s keyword arguments).
        **options: ``RecordTrace``'s, among them the stream options ``ship_to=URL`` (every runner's
            recorder ships what it commits to ``URL``, e.g. ``s3://bucket/run``; read it back with
            ``read_traces(URL)`` or ``envrec.open_dataset(URL)``) and ``storage_options`` (fsspec's, for
            ``ship_to``). These two go to ``RecordVideo`` too (clips ship where traces do, unless the
            ``video`` mapping sets its own), so they may be given with ``trace=False``. Without a
            ``name_prefix``, a shipping recorder is named ``runner-<worker_index>-<pid>-<n>`` like its folder
            (then the process's unique suffix), so the dataset's ``recorder`` column tells runners apart.
    """
    if not trace and not video:
        raise ConfigError("recording_env_creator records nothing: set trace=True or video=True (or a mapping)")
    trace_only = sorted(set(options) - set(SHIPPING))
    if trace_only and not trace:
        raise ConfigError(f"options {trace_only} are RecordTrace's, but trace=False")
    video_kwargs = dict(video) if isinstance(video, Mapping) else {}
    if video:  # the clips ship where the traces do, unless the video mapping says otherwise
        video_kwargs = {**{k: v for k, v in options.items() if k in SHIPPING}, **video_kwargs}

    def create(config: Any = None) -> gym.Env:
        if isinstance(make_env, str):
            env = make_env_by_id(make_env, render_mode="rgb_array") if video else make_env_by_id(make_env)
        else:
            env = make_env(config if config is not None else {})
        name = _runner_name(config, next(_made))
        where = os.path.join(os.fspath(folder), name)
        if video:
            env = RecordVideo(env, os.path.join(where, "videos"), **video_kwargs)
        if trace:
            env = RecordTrace(env, where, **_named(options, name))
        return env

    return create


def _named(options: dict[str, Any], name: str) -> dict[str, Any]:
    """``options`` with ``name_prefix=name`` when they ship (``ship_to``, or a ``StreamOptions`` with it) and name
    no prefix: the recorder id under the URL then says which runner it was."""
    ships = options.get("ship_to") is not None or getattr(options.get("options"), "ship_to", None) is not None
    return {**options, "name_prefix": name} if ships and options.get("name_prefix") is None else options


def read_traces(paths: Any, verify: bool = True, storage_options: dict[str, Any] | None = None, **read_args: Any) -> Any:
    """A ``ray.data.Dataset`` of every committed step under ``paths`` (one read task per batch).

    Args:
        paths: recording folders (searched recursively), globs, a list of them, or a shipped run's URL
            (``ship_to``): then the batches committed there when this is called, each read task fetching its
            own batch's objects from the store on the node it runs on (no shared file system needed).
        verify: check each batch's CRC-32 when it is read.
        storage_options: fsspec's options for a URL (credentials, endpoint). Default None: the store's
            environment (``AWS_ENDPOINT_URL``, ...).
        **read_args: passed to ``ray.data.read_datasource``.
    """
    import ray.data

    from envrec.export.ray_source import TraceDatasource

    return ray.data.read_datasource(TraceDatasource(paths, verify=verify, storage_options=storage_options), **read_args)
