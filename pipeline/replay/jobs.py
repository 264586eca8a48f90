"""Replaying episodes in parallel: fresh interpreters (``jobs > 1``) or Ray tasks (``ray=True``).

A task is a module-level function ``task(directory, prefix, items, options) -> list`` (one result per
item, an item being ``(index, episode_id)``) that reads the folder itself: a job is handed names, never
episodes. ``run_jobs`` returns the results in the order of the items, whatever order the jobs finish in.

``jobs > 1`` runs two tasks a job process, each a chunk of consecutive episodes, in a ``ProcessPoolExecutor`` of
``jobs`` spawned interpreters (started as envrec's workers are: nothing of the parent is inherited but its
``sys.path``); a task shares what it starts once (render's encoder) among its episodes, and a job process keeps
what its task cached (the reader) for the next. ("Worker" is kept for ``envrec.workers``' processes.) When a job process dies (the env crashed the
interpreter) the pool breaks: the episodes not done are then run one at a time in a pool of one, so the
episode that kills it is found, and given ``on_failure``'s result; so is one that gives no result
within ``timeout`` seconds (its job process is killed). ``ray=True`` runs one ``ray.remote`` task per chunk
of episodes (``ray.init()`` first when Ray is not initialized; the Ray workers read the folder from
storage they share); a chunk whose task fails is run again episode by episode, and an episode that
fails alone gets ``on_failure``'s result.

Stable API (``envrec render`` uses it too): ``run_jobs(task, directory, prefix, items, options, *, jobs=1,
ray=False, on_failure, timeout=JOB_TIMEOUT_S)``.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import ConfigError

__all__ = ["JOB_TIMEOUT_S", "Item", "run_jobs"]

logger = logging.getLogger(__name__)

JOB_TIMEOUT_S = 900.0  # one episode's replay; an env that hangs longer is given up on
STARTUP_TIMEOUT_S = 120.0  # a spawned job process's start (imports)
Item = tuple[int, int]  # (index across the reader, episode_id)
Task = Callable[[str, "str | None", list[Item], dict[str, Any]], list[Any]]
Failure = Callable[[Item, str], Any]


def run_jobs(task: Task, directory: str, prefix: str | None, items: Sequence[Item], options: dict[str, Any], *,
             jobs: int = 1, ray: bool = False, on_failure: Failure, timeout: float = JOB_TIMEOUT_S) -> list[Any]:
    """``task``'s result for every item, in the order of ``items``.

    Args:
        task: a module-level function (job processes import it by name) ``task(directory, prefix, items, options)``.
        directory, prefix: the recording, as the task reads it.
        items: the episodes, ``(index, episode_id)``.
        options: picklable options for the task.
        jobs: job processes (1: in this process).
        ray: Ray tasks instead of local interpreters.
        on_failure: ``on_failure(item, why)``: the result for an item whose job crashed, timed out or raised.
        timeout: seconds an episode's job may take.

    Raises:
        ConfigError: spawned job processes die before they run anything (see ``_pool``).
    """
    items = list(items)
    if not items:
        return []
    if ray:
        return _on_ray(task, directory, prefix, items, options, jobs, on_failure, timeout)
    if jobs <= 1:
        try:
            return task(directory, prefix, items, options)
        except Exception as exc:  # a task's own bug or an env that raised past it: each episode says so
            logger.exception("replay task failed")
            return [on_failure(item, f"{type(exc).__name__}: {exc}") for item in items]
    return _in_pool(task, directory, prefix, items, options, jobs, on_failure, timeout)


def _ready() -> bool:
    return True


def _pool(width: int) -> cf.ProcessPoolExecutor:
    """A pool of ``width`` spawned job processes, one of which answered (so they can start at all).

    Raises:
        ConfigError: a job process died before it ran anything: it could not start (a script that starts
            jobs without ``if __name__ == "__main__":``, which spawned interpreters run again).
    """
    pool = cf.ProcessPoolExecutor(max_workers=width, mp_context=multiprocessing.get_context("spawn"))
    try:
        pool.submit(_ready).result(timeout=STARTUP_TIMEOUT_S)
    except (BrokenProcessPool, cf.TimeoutError) as exc:
        _stop(pool, kill=True)
        raise ConfigError(
            f"the replay's job processes die or hang before they run anything ({type(exc).__name__}): "
            "a script that replays with jobs > 1 must start it under if __name__ == '__main__': (spawned "
            "interpreters import the script again), and envrec must be importable in them") from exc
    return pool


def _kill(pool: cf.ProcessPoolExecutor) -> None:
    """Kill the pool's job processes (ours, by their pids): one is stuck in an env, or died."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()


def _stop(pool: cf.ProcessPoolExecutor, kill: bool) -> None:
    if kill:  # shutdown() would wait for a stuck job process
        _kill(pool)
    pool.shutdown(wait=not kill, cancel_futures=True)


def _in_pool(task: Task, directory: str, prefix: str | None, items: list[Item], options: dict[str, Any], jobs: int,
             on_failure: Failure, timeout: float) -> list[Any]:
    results: dict[Item, Any] = {}
    width = min(jobs, len(items))
    pool = _pool(width)
    size = max(1, math.ceil(len(items) / (2 * width)))  # two chunks a job process: what a task starts once (an encoder) is shared
    futures, broken = [], False
    try:
        for i in range(0, len(items), size):
            chunk = items[i:i + size]
            futures.append((chunk, pool.submit(task, directory, prefix, chunk, options)))
    except BrokenProcessPool:  # a job process died while episodes were still handed out
        broken = True
    try:
        for chunk, future in futures:  # those done before a job process died keep their results
            try:
                results.update(zip(chunk, future.result(timeout=timeout * len(chunk)), strict=True))
            except BrokenProcessPool:
                broken = True
            except cf.TimeoutError:
                if len(chunk) == 1:  # else its episodes are replayed one at a time: the one that hangs is found
                    results[chunk[0]] = on_failure(chunk[0], f"the replay gave no result within {timeout:g} s (its job process was killed)")
                broken = True
                _kill(pool)
            except Exception as exc:  # noqa: BLE001  (raised in the task, or its result did not pickle)
                results.update((item, on_failure(item, f"{type(exc).__name__}: {exc}")) for item in chunk)
    finally:
        _stop(pool, kill=broken)
    if broken:
        left = [item for item in items if item not in results]
        logger.warning("a replay job process died or hung: replaying the %d episode(s) left one at a time", len(left))
        results.update(_isolated(task, directory, prefix, left, options, on_failure, timeout))
    return [results[item] for item in items]


def _isolated(task: Task, directory: str, prefix: str | None, items: list[Item], options: dict[str, Any],
              on_failure: Failure, timeout: float) -> dict[Item, Any]:
    """Each item alone in a pool of one (a new pool after one dies): which episode kills its job process is known."""
    results: dict[Item, Any] = {}
    pool = None
    try:
        for item in items:
            pool = pool or _pool(1)
            future = pool.submit(task, directory, prefix, [item], options)
            try:
                results[item] = future.result(timeout=timeout)[0]
                continue
            except BrokenProcessPool as exc:
                why = f"the replay's process died ({exc or 'killed, or the env crashed the interpreter'})"
            except cf.TimeoutError:
                why = f"the replay gave no result within {timeout:g} s (its job process was killed)"
            except Exception as exc:  # noqa: BLE001  (raised in the task, or its result did not pickle)
                results[item] = on_failure(item, f"{type(exc).__name__}: {exc}")
                continue
            results[item] = on_failure(item, why)
            _stop(pool, kill=True)
            pool = None
    finally:
        if pool is not None:
            _stop(pool, kill=False)
    return results


def _on_ray(task: Task, directory: str, prefix: str | None, items: list[Item], options: dict[str, Any], jobs: int,
            on_failure: Failure, timeout: float) -> list[Any]:
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    remote: Any = ray.remote(max_retries=0)(task)
    parallel = max(jobs, int(ray.cluster_resources().get("CPU", 1)))
    size = max(1, math.ceil(len(items) / (2 * parallel)))  # two chunks a CPU: a slow one does not hold the rest
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    refs = [remote.remote(directory, prefix, chunk, options) for chunk in chunks]
    results: list[Any] = []
    for chunk, ref in zip(chunks, refs, strict=True):
        try:
            results += ray.get(ref, timeout=timeout * len(chunk))
        except Exception as exc:  # noqa: BLE001  (a task that raised, a job process that died, a timeout: retried episode by episode)
            _cancel(ref)
            logger.warning("a Ray replay task failed (%s): its %d episode(s) again one by one", exc, len(chunk))
            results += [_ray_alone(remote, directory, prefix, item, options, on_failure, timeout) for item in chunk]
    return results


def _ray_alone(remote: Any, directory: str, prefix: str | None, item: Item, options: dict[str, Any],
               on_failure: Failure, timeout: float) -> Any:
    import ray

    ref = remote.remote(directory, prefix, [item], options)
    try:
        return ray.get(ref, timeout=timeout)[0]
    except Exception as exc:  # noqa: BLE001  (the episode's own failure, said in its result)
        _cancel(ref)
        return on_failure(item, f"the Ray task failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}")


def _cancel(ref: Any) -> None:
    import ray

    try:
        ray.cancel(ref, force=True)
    except Exception:  # a task already finished or gone: nothing to cancel
        logger.debug("cancelling a Ray task failed", exc_info=True)
