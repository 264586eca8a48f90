"""``envrec export --minari``: a Minari dataset built from traces with ``minari.create_dataset_from_buffers``.

Lossless: ``data_format="arrow"`` and, where the installed Minari has it,
``jpeg_encoding=False`` (image observations stay raw). Each episode becomes
a ``minari.EpisodeBuffer`` with its seed and reset options; infos are kept
when they have the same keys at every step of the episode (Minari stores
infos as columns), otherwise that episode's infos are left out and a warning
says so. Episodes are numbered in reading order (recordings by name, then
episode order); episodes without a step are skipped. The dataset is built one
trace batch at a time (``update_dataset_from_buffer``), so memory does not
grow with the recording (a long episode written in parts is stitched whole
first: Minari stores episodes, not parts); if the export fails, what it
wrote is deleted.

A Minari episode starts at a reset, and has all its steps: an *unfinished*
episode, one whose oldest parts were evicted by a disk budget
(``first_step > 0``) or whose last part read still continues (a recording
still running, or its next part damaged), is skipped, and a warning says how
many were skipped in each recording. Episodes that ended by a reset, a close
or a crash hold every step they had and are exported as before.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from envrec.env_ids import make_env
from envrec.errors import ConfigError
from envrec.formats.schema import describe_space, space_from_spec
from envrec.read.batch_files import Episode, TraceError
from envrec.read.reader import TraceReader

from .arrow_table import plain_json
from .sources import PathsLike, RecordingSource, find_recordings

__all__ = ["write_minari"]

log = logging.getLogger(__name__)

NAMESPACE_METADATA = "namespace_metadata.json"  # what minari.create_namespace writes into a namespace's folder


def _transpose(infos: list[dict]) -> dict | None:
    """Per-step info dicts as Minari's dict of per-step lists; ``None`` when their keys differ."""
    keys = list(infos[0])
    if any(not isinstance(i, dict) or list(i) != keys for i in infos):
        return None
    out: dict[str, Any] = {}
    for k in keys:
        if not isinstance(k, str):
            return None
        values = [i[k] for i in infos]
        if isinstance(values[0], dict):
            sub = _transpose(values)
            if sub is None:
                return None
            out[k] = sub
        else:
            out[k] = values
    return out


def _buffer(ep: Episode) -> Any:
    from minari.data_collector.episode_buffer import EpisodeBuffer

    infos = _transpose(ep.infos) if len(ep.infos) == ep.length + 1 and ep.infos[0] is not None else None
    if infos is None and any(ep.infos):
        log.warning("episode %d: its infos change keys between steps; Minari cannot store them, left out", ep.episode_id)
    return EpisodeBuffer(
        seed=ep.seed,
        options=plain_json(ep.options),  # Minari keeps them as JSON: bytes, tuples and arrays made plain
        observations=ep.observations,
        actions=ep.actions,
        rewards=ep.rewards,
        terminations=ep.terminations,
        truncations=ep.truncations,
        infos=infos or None,
    )


def _space(src: RecordingSource, key: str) -> Any:
    """The Gymnasium space a manifest's spec describes; ``TraceError`` when Gymnasium refuses it."""
    spec: Any = dict(src.manifest).get(key)
    if spec is None:
        raise TraceError(f"{src.name}: its manifest has no {key} (not written by envrec): a Minari dataset needs it")
    try:
        return space_from_spec(spec)
    except (AssertionError, ValueError, TypeError, OverflowError) as exc:  # Gymnasium's own checks of the values
        raise TraceError(f"{src.name}: manifest field {key}: Gymnasium cannot build the space ({exc})") from exc


def _env_and_spaces(src: RecordingSource) -> dict[str, Any]:
    """The recording's env spec when its env id is registered, and spaces rebuilt from the manifest."""
    m = src.manifest
    out: dict[str, Any] = {key: _space(src, key) for key in ("observation_space", "action_space")}
    env_id = m.get("env_id")
    if not env_id or ":" in env_id:
        return out  # "module:Env" would import a module the folder names (make_env loads installed namespaces only)
    try:
        env = make_env(env_id)
    except Exception as exc:  # noqa: BLE001  (any failure to build the env: export with the recorded spaces)
        log.info("%s: not made (%s); exporting with the spaces from the manifest", env_id, exc)
        return out
    try:
        out["env"] = env.spec
        if describe_space(env.observation_space) == m["observation_space"]:
            out["observation_space"] = env.observation_space  # exact bounds
        if describe_space(env.action_space) == m["action_space"]:
            out["action_space"] = env.action_space
    finally:
        env.close()
    return out


def _check_spaces(sources: list[RecordingSource]) -> None:
    first = dict(sources[0].manifest)
    for src in sources[1:]:
        for key in ("observation_space", "action_space"):
            if dict(src.manifest).get(key) != first.get(key):
                raise TraceError(
                    f"recordings {sources[0].name} and {src.name} have different {key.replace('_', ' ')}s: "
                    "a Minari dataset has one; export them separately"
                )


def _new_folders(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    new = []
    while not path.exists():
        new.append(path)
        path = path.parent
    return new


def _remove_written(new: list[Path]) -> None:
    """After a failed export: the dataset folder, and the namespace folders it created if nothing else is in them."""
    shutil.rmtree(new[0], ignore_errors=True)
    for folder in new[1:]:
        with contextlib.suppress(OSError):
            (folder / NAMESPACE_METADATA).unlink(missing_ok=True)
            folder.rmdir()  # only when empty: another dataset in the namespace keeps it


def unfinished(ep: Episode) -> bool:
    """``ep`` lacks its first steps (evicted) or its last (it continues): not a Minari episode."""
    return ep.first_step > 0 or ep.ended_by is None


def _buffers(src: RecordingSource, verify: bool) -> Iterator[tuple[str, list[Any]]]:
    """The recording's whole episodes with a step as Minari buffers, one list per trace batch (the batch
    of the episodes' last parts); unfinished ones are counted and skipped with a warning."""
    skipped, batch = 0, ""
    buffers: list[Any] = []
    with TraceReader(src.directory, prefix=os.path.basename(src.name), verify=verify) as reader:
        for ep in reader:
            if ep.parts[-1].batch != batch and buffers:
                yield batch, buffers
                buffers = []
            batch = ep.parts[-1].batch
            if ep.length == 0:
                continue
            if unfinished(ep):
                skipped += 1
                continue
            buffers.append(_buffer(ep))
    if buffers:
        yield batch, buffers
    if skipped:
        log.warning("%s: %d unfinished episode(s) skipped (evicted first parts, or still being recorded): "
                    "a Minari episode needs all its steps", src.name, skipped)


def write_minari(paths: PathsLike, dataset_id: str, verify: bool = True, **metadata: Any) -> Any:
    """Create the Minari dataset ``dataset_id`` from every episode under ``paths``.

    A failed export (a damaged batch, a missing package, a full disk) removes
    what it wrote, dataset folder and any namespace folder it created, so the
    same id can be exported again.
    """
    import minari
    from minari.storage.datasets_root_dir import get_dataset_path

    where = get_dataset_path(dataset_id)
    if where.exists():
        raise ConfigError(f"a local Minari dataset named {dataset_id} exists ({where}): choose another id or delete it")
    new = _new_folders(where)
    sources = find_recordings(paths, verify=verify)
    _check_spaces(sources)
    kwargs: dict[str, Any] = {**_env_and_spaces(sources[0]), "data_format": "arrow", **metadata}
    if "jpeg_encoding" in inspect.signature(minari.create_dataset_from_buffers).parameters:
        kwargs.setdefault("jpeg_encoding", False)
    dataset = None
    try:
        for src in sources:
            for batch, buffers in _buffers(src, verify):
                try:
                    if dataset is None:
                        dataset = minari.create_dataset_from_buffers(dataset_id, buffers, **kwargs)
                    else:
                        dataset.update_dataset_from_buffer(buffers)
                except (ValueError, TypeError, KeyError) as exc:  # Minari's (and pyarrow's) refusals of the values
                    raise TraceError(f"{src.name}: Minari cannot store the episodes of batch {batch}: {exc}") from exc
        if dataset is None:
            raise TraceError(f"no episode with a step under {paths}: nothing to export")
    except BaseException:
        _remove_written(new)
        raise
    return dataset
