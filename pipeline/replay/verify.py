"""``envrec.replay.verify``: does a recording reproduce? Each selected episode replayed and compared.

For every recording in the folder (or ``prefix``'s), the selected episodes are replayed (``engine``) in
an env made again from the recorded spec or by ``make`` (``recreate``), in this process or in parallel
(``jobs``), and compared step by step until the first difference. One ``Verdict`` per episode:
reproduced, diverged (at which step, field and index, by how much) or cannot_replay (why, and what
to pass). The verdicts are stored in ``PREFIX.verify.json`` beside the recording (``verdicts``).

Every episode is replayed in an env made for it, started from its recorded reset state: a verdict
never rests on what the episodes replayed before it left in the env (an ALE game keeps its
sticky-action RNG across resets: replayed after its predecessor, an episode recorded without
``snapshot="ale"`` would reproduce, and diverge alone). A job keeps the reader for its next episode.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError, TraceError
from ..read.reader import TraceReader
from .engine import INFERRED_RNG, NO_RNG, CannotReplay, Replay, Start, compare, plan_start, snapshot_hook
from .jobs import JOB_TIMEOUT_S, Item, run_jobs
from .recreate import KEEP, CannotRecreate, load_callable, recreate_env, spec_trusted
from .selection import episode_refs, parse_selection, select_episodes
from .trust import Trust, import_user_modules, options_refusal, user_trust
from .verdicts import Verdict, write_verdicts

__all__ = ["verify", "verify_task"]

logger = logging.getLogger(__name__)

ALE_HINT = "ALE keeps randomness outside np_random (sticky actions): record with snapshot='ale' to replay unseeded resets"
HIDDEN = ("the env draws randomness it does not take from its np_random (Python's random, numpy's global "
          "generator, another generator or the clock), or depends on more than its reset state")


class _Session:
    """What a job keeps between episodes of one recording: the reader (and the env of the episode it replays)."""

    def __init__(self, directory: str, prefix: str, options: Mapping[str, Any]) -> None:
        self.key = _key(directory, prefix, options)
        self.reader = TraceReader(directory, prefix)
        self.manifest = self.reader.recordings[0].manifest
        self.options = options
        self._env: Any = None
        self._failed: ConfigError | None = None  # why the env cannot be made: not tried again for each episode

    def env(self) -> Any:
        if self._failed is not None:
            raise self._failed
        if self._env is None:
            try:
                self._env = recreate_env(self.manifest, make=self.options.get("make"), render_mode=_render_mode(self.manifest),
                                         trusted=self.options.get("trusted"), trust=self.options.get("trust"))
            except ConfigError as exc:
                self._failed = exc
                raise
        return self._env

    def drop_env(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except Exception:  # an env broken by the replay that raised: closing is best effort
                logger.debug("closing a replay env failed", exc_info=True)

    def close(self) -> None:
        self.drop_env()
        self.reader.close()


_SESSION: _Session | None = None  # a job process's session, kept for its next task


def _key(directory: str, prefix: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    return (directory, prefix, repr(options.get("make")), repr(options.get("snapshot")), repr(options.get("trusted")),
            repr(options.get("trust")))


def _render_mode(manifest: Mapping[str, Any]) -> Any:
    """Verify keeps the recorded render mode (a wrapper may observe frames) but opens no window: ``"human"``
    becomes None; no recorded mode: ``KEEP`` (a ``make`` function is then called without one)."""
    env = manifest.get("env")
    spec = env.get("spec") if isinstance(env, Mapping) else None
    kwargs = spec.get("kwargs") if isinstance(spec, Mapping) else None
    mode = kwargs.get("render_mode") if isinstance(kwargs, Mapping) else None
    return KEEP if mode is None else (None if mode == "human" else mode)


def verify_task(directory: str, prefix: str | None, items: list[Item], options: dict[str, Any]) -> list[dict[str, Any]]:
    """Replay ``items`` of recording ``prefix`` and judge each: the verdicts as JSON objects (a job's task).

    Args:
        directory: the folder.
        prefix: the recording's file prefix.
        items: ``(index, episode_id)`` of the episodes, in order.
        options: ``atol``, ``infos``, ``make``, ``snapshot``, ``trust`` (a ``Trust``: its modules are imported
            here too, a job being a fresh interpreter), ``trusted`` and ``keep`` (keep the session for the next task).
    """
    global _SESSION
    if prefix is None:
        raise ConfigError("verify_task replays one recording: name its prefix")
    import_user_modules((options.get("trust") or Trust()).import_modules)
    if _SESSION is None or _SESSION.key != _key(directory, prefix, options):
        if _SESSION is not None:
            _SESSION.close()
            _SESSION = None
        _SESSION = _Session(directory, prefix, options)
    session = _SESSION
    try:
        verdicts = []
        for index, episode_id in items:
            verdicts.append(_verify_one(session, index, episode_id).to_json())
            session.drop_env()  # a fresh env for each: no verdict may rest on state an episode before left behind
        return verdicts
    finally:
        if not options.get("keep"):
            session.close()
            _SESSION = None


def _verify_one(s: _Session, index: int, episode_id: int) -> Verdict:
    base: dict[str, Any] = {"recording": s.manifest.get("prefix") or "", "episode_id": episode_id, "index": index}
    try:
        ep = s.reader[index]
        if ep.episode_id != episode_id:
            raise TraceError(f"episode {index} of the recording is episode {ep.episode_id}, not {episode_id}")
        hook, start = _plan(s, ep)
        refused = options_refusal(ep.options, s.options.get("trust") or Trust())
        if refused is not None:
            raise CannotReplay(refused.reason, refused.hint)
    except (CannotReplay, TraceError, IndexError) as exc:
        reason, hint = getattr(exc, "reason", str(exc)), getattr(exc, "hint", None)
        no_spec = None if s.options.get("make") is not None else _no_spec(s.manifest)
        if no_spec is not None and isinstance(exc, CannotReplay):  # the root cause, with its own fix
            what = "reset without a seed, and no np_random state was recorded" if reason == NO_RNG[0] else reason
            reason, hint = f"{what}: {no_spec}", None
        return Verdict(**base, status="cannot_replay", reason=reason, hint=hint)
    try:
        env = s.env()
    except (CannotRecreate, ConfigError) as exc:
        return Verdict(**base, status="cannot_replay", reason=getattr(exc, "reason", str(exc)), hint=getattr(exc, "hint", None))
    common: dict[str, Any] = {**base, "from_step": start.from_step, "start": start.how}
    replay, at = Replay(env, ep, start, hook), None
    try:
        for step in replay:
            at = step.step
            found = compare(step, atol=s.options.get("atol", 0.0), infos=s.options.get("infos", False))
            if found is not None and start.how == "rng" and ep.rng_inferred:  # no divergence can be told from it
                return Verdict(**common, status="cannot_replay", steps=found.step - start.from_step,
                               reason=f"{found.field} differ at step {found.step}: {INFERRED_RNG[0]}", hint=INFERRED_RNG[1])
            if found is not None:
                return Verdict(**common, status="diverged", steps=found.step - start.from_step, step=found.step,
                               field=found.field, where=found.where, recorded=found.recorded, replayed=found.replayed,
                               difference=found.difference, reason=_why_diverged(s.manifest),
                               hint=ALE_HINT if start.how == "rng" and _is_ale(s.manifest) else None)
    except Exception as exc:  # noqa: BLE001  (the env or its restore raised: that episode cannot replay, others may)
        s.drop_env()
        when = f"after step {at}" if at is not None else "at the reset" + (
            f" (restoring step {start.from_step})" if start.from_step else "")
        return Verdict(**common, status="cannot_replay", steps=max(0, (at or 0) - start.from_step),
                       reason=f"replaying raised {type(exc).__name__} {when}: {exc}")
    return Verdict(**common, status="reproduced", steps=replay.steps)


def _plan(s: _Session, ep: Any) -> tuple[Any, Start]:
    """The snapshot hook and the start of ``ep``; a hook that cannot be loaded matters only to an episode
    that needs it (a seeded one still replays from its seed)."""
    try:
        hook = snapshot_hook(s.manifest, s.options.get("snapshot"))
    except CannotReplay as missing:
        try:
            start = plan_start(ep, None)
        except CannotReplay:
            raise missing from None
        logger.warning("%s: %s; episode %d replays from its %s without it (%s)", s.key[1], missing.reason, ep.episode_id,
                       start.how, missing.hint)
        return None, start
    return hook, plan_start(ep, hook)


def _no_spec(manifest: Mapping[str, Any]) -> str | None:
    """Why the recording has no env spec (its ``spec_error``), None when it has one or says nothing."""
    env = manifest.get("env")
    if not isinstance(env, Mapping) or env.get("spec") is not None:
        return None
    why = env.get("spec_error")
    return why if isinstance(why, str) and why else None


def _is_ale(manifest: Mapping[str, Any]) -> bool:
    env = manifest.get("env")
    spec = env.get("spec") if isinstance(env, Mapping) else None
    entry = spec.get("entry_point") if isinstance(spec, Mapping) else None
    return str(entry).startswith("ale_py") or str(manifest.get("env_id") or "").startswith("ALE/")


def _why_diverged(manifest: Mapping[str, Any]) -> str:
    """What may explain a divergence: versions that differ from the recording's, else hidden randomness."""
    env = manifest.get("env")
    recorded = env.get("versions") if isinstance(env, Mapping) else None
    changed = []
    for name, version in (recorded or {}).items() if isinstance(recorded, Mapping) else ():
        now = platform.python_version() if name == "python" else _version(name)
        if now is not None and now != version:
            changed.append(f"{name} {version} -> {now}")
    if changed:
        return f"recorded with other versions ({', '.join(changed)}); or {HIDDEN}"
    return HIDDEN


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name.replace("_", "-"))
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _failed(recording: str) -> Callable[[Item, str], dict[str, Any]]:
    def failed(item: Item, why: str) -> dict[str, Any]:
        return Verdict(recording, item[1], item[0], "cannot_replay", reason=f"the replay job failed: {why}").to_json()

    return failed


def _check(jobs: int, atol: float, make: Any) -> None:
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ConfigError(f"jobs must be a whole number of at least 1, not {jobs!r}")
    if not isinstance(atol, (int, float)) or isinstance(atol, bool) or not math.isfinite(atol) or atol < 0:
        raise ConfigError(f"atol must be a finite number of at least 0, not {atol!r}")
    if make is not None and not isinstance(make, str) and not callable(make):
        raise ConfigError(f"make must be 'module:function' or a callable, not {type(make).__name__}")


def verify(directory: str | os.PathLike, episodes: str = "all", *, prefix: str | None = None, jobs: int = 1,
           ray: bool = False, atol: float = 0.0, infos: bool = False, make: str | Callable[..., Any] | None = None,
           snapshot: Any = None, timeout: float = JOB_TIMEOUT_S, import_modules: Sequence[str] | None = None,
           trust_kwargs: bool = False) -> list[Verdict]:
    """Replay the selected episodes of every recording in ``directory`` and judge each; store the verdicts.

    Args:
        directory: the recording folder.
        episodes: the selection (SEL: ``"all"``, ``"3,7-9"``, ``"worst:5"``, ...; see ``envrec.replay.selection``),
            applied to each recording; an id term must name an episode of at least one of them.
        prefix: only the recording with this file prefix.
        jobs: job processes replaying in parallel (1: in this process).
        ray: replay as Ray tasks (``ray.init()`` when Ray is not initialized).
        atol: absolute tolerance for numbers (observations, rewards, infos); 0: exact.
        infos: compare the infos too.
        make: ``"module:function"`` (or, with ``jobs=1``, any callable) that builds the env instead of the
            recorded spec; called with the recorded ``render_mode`` as keyword when there is one (None for
            ``"human"``), else with no argument.
        snapshot: the snapshot hook (a ``Snapshot`` or ``"module:qualname"``, imported: your choice). Default
            None: the built-in hook the recording names (``"ale"``, ``"mujoco"``); another recorded name is not
            imported (``envrec.replay.trust``).
        timeout: seconds one episode's replay may take in a job before it is given up on.
        import_modules: modules to import first (``--import``; and in every job): the envs they register, their
            wrappers and ``module:Id`` env ids naming them are made from the recorded spec.
        trust_kwargs: use the recorded kwargs and reset options even where they name paths or sizes far
            beyond the registered defaults (``--trust-kwargs``).

    Returns:
        One ``Verdict`` per selected episode, by recording and in episode order.

    Raises:
        ConfigError: a bad argument or selection (an unknown term, an id recorded nowhere), or job
            processes that cannot start.
        TraceError: the folder holds no readable recording, or a verdict file there is not one.
    """
    _check(jobs, atol, make)
    trust = user_trust(import_modules, trust_kwargs)
    if isinstance(make, str):
        load_callable(make)  # a make that does not import is a bad argument, not a verdict per episode
    if snapshot is not None:
        try:
            snapshot_hook({}, snapshot)
        except CannotReplay as exc:
            raise ConfigError(f"snapshot={snapshot!r}: {exc.reason}") from exc
    directory = os.fspath(directory)
    terms = parse_selection(episodes)
    with TraceReader(directory, prefix) as reader:
        prefixes = [str(r.manifest.get("prefix")) for r in reader.recordings]
    chosen: dict[str, list[Any]] = {}
    for p in prefixes:
        with TraceReader(directory, p) as reader:
            refs = episode_refs(reader)
        chosen[p] = select_episodes(refs, episodes, missing_ok=len(prefixes) > 1)
    _check_ids(terms, [ref.episode_id for refs in chosen.values() for ref in refs], episodes, len(prefixes) > 1)
    options = {"atol": float(atol), "infos": bool(infos), "make": make, "snapshot": snapshot, "keep": jobs > 1 or ray,
               "trust": trust}
    verdicts: list[Verdict] = []
    for p in prefixes:
        items = [(ref.index, ref.episode_id) for ref in chosen[p]]
        with TraceReader(directory, p) as reader:  # the user's registrations are this process's: jobs are told
            trusted = spec_trusted(reader.recordings[0].manifest, trust)
        results = run_jobs(verify_task, directory, p, items, {**options, "trusted": trusted}, jobs=jobs, ray=ray,
                           on_failure=_failed(p), timeout=timeout)
        found = [Verdict.from_json(r, f"the verdict of a replay job ({p})") for r in results]
        if found:
            write_verdicts(directory, p, found, atol=float(atol), infos=bool(infos))
        verdicts += found
    return verdicts


def _check_ids(terms: list[Any], found: list[int], selection: str, several: bool) -> None:
    """With several recordings, each id term must name an episode of at least one of them."""
    if not several:
        return
    missing = [t.first for t in terms if t.kind == "ids" and not any(t.first <= k <= t.last for k in found)]
    if missing:
        raise ConfigError(f"episode selection {selection!r}: no recording in the folder has episode {missing[0]}")
