"""``envrec render``: videos of recorded episodes made later, by replaying them with rendering on.

Each selected episode is replayed as ``envrec verify`` replays it (``envrec.replay.engine``: the env
recreated, started from its recorded reset state, stepped with its recorded actions) in an env made
with ``render_mode="rgb_array"`` (and any ``env_kwargs``: resolution, camera), one frame rendered at
the reset and one after each step, as ``RecordVideo`` films: N+1 frames for N steps. The frames go
through envrec's encoder (``VideoRecorder``, the same ``VideoSettings``), so a clip is what a live
``RecordVideo`` of that episode would have written: named ``NAME_PREFIX-episode-ID.mp4``, with a
``.meta.json`` whose ``episode_id`` and ``step_range`` are those of the live clip (the env steps the
recording took before the episode's reset, then before its last frame), so the viewer syncs it with
the trace and ``on_clip_closed``-style consumers take it as they take a live one.

The replay is compared with the recording as it goes (``envrec.replay.compare``, as verify compares).
A replay that diverges still films every recorded action; its metadata says where, under ``"replay"``:
``{"recording", "verdict": "reproduced" | "diverged", "diverged_at", "field", "where", "recorded",
"replayed", "difference", "start", "from_step", "env_kwargs", "error"}`` (``error``: the env raised, the
clip ends there; its verdict is then ``cannot_replay`` unless it had diverged before). An episode that cannot be replayed (``cannot_replay``: no reset state recorded)
gets no clip: its ``RenderedClip`` says why.

Episodes are rendered in one process (``jobs=1``), in ``jobs`` fresh interpreters or as Ray tasks
(``envrec.replay.jobs``); a job films its episodes through one encoder, each in an env made for it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym

from ..errors import ConfigError
from ..formats.clip_meta import is_clip_file, meta_path, read_clip_meta
from ..formats.ffmpeg import VideoSettings
from ..formats.ownfolder import FolderChanged, OwnFolder
from ..formats.trace_format import check_prefix
from ..read.reader import Episode, TraceReader
from ..record.headless import headless_display
from ..record.video_recorder import ClipCallback, VideoRecorder, drain_clip_callback
from .trust import Trust, import_user_modules, options_refusal, user_trust

__all__ = ["RenderOptions", "RenderedClip", "render", "render_task", "reset_steps"]

logger = logging.getLogger(__name__)

DEFAULT_SELECTION = "last:1"
MAX_FPS = 1000  # ffmpeg refuses frame rates far beyond any display's


@dataclass(frozen=True)
class RenderedClip:
    """One rendered episode.

    Attributes:
        recording: the recording's prefix.
        episode_id: the episode's id in it.
        path: the video file; None when none was written (``cannot_replay``, or the clip broke).
        meta_path: its ``.meta.json``; None when no clip was started.
        verdict: ``"reproduced"``, ``"diverged"`` or ``"cannot_replay"``.
        diverged_at: the first step where the replay differed (0: the reset observation), or None.
        field: the field that differed first (``"observations"``, ...), or None.
        frames: the frames filmed (rendered and handed to the encoder).
        reason: why it could not be replayed, or why its clip broke; None otherwise.
    """

    recording: str
    episode_id: int
    path: str | None
    meta_path: str | None
    verdict: str
    diverged_at: int | None = None
    field: str | None = None
    frames: int = 0
    reason: str | None = None


@dataclass(frozen=True)
class RenderOptions:
    """What every render job is told (picklable: it travels to fresh interpreters and Ray tasks)."""

    out: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    fps: float | None = None
    name_prefix: str = "rl-video"
    make: str | Callable[..., gym.Env] | None = None
    settings: VideoSettings | None = None
    snapshot: Any = None
    trusted: str | None = None  # the spec the process that started the jobs checked (recreate_env)
    trust: Trust = field(default_factory=Trust)  # what the user trusts beyond what a folder may name


def render(
    directory: str | os.PathLike,
    episodes: str = DEFAULT_SELECTION,
    *,
    prefix: str | None = None,
    out: str | os.PathLike | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    fps: float | None = None,
    name_prefix: str = "rl-video",
    jobs: int = 1,
    ray: bool = False,
    make: str | Callable[..., gym.Env] | None = None,
    settings: VideoSettings | None = None,
    snapshot: Any = None,
    on_clip_closed: ClipCallback | None = None,
    import_modules: Sequence[str] | None = None,
    trust_kwargs: bool = False,
) -> list[RenderedClip]:
    """Replay the selected episodes of a recording with rendering on and write their clips.

    Args:
        directory: the folder of the recording.
        episodes: which episodes (SEL: ``"3,7-9"``, ``"worst:2"``, ``"failed"``, ``"last:1"``, ...;
            ``envrec.replay.selection``). Default ``"last:1"``.
        prefix: the recording's prefix, needed when the folder holds several. Default None.
        out: the folder of the clips, created if needed. Default ``DIRECTORY/videos``.
        env_kwargs: keyword arguments for the env, winning over the recorded ones (``{"width": 640}``).
        fps: frames per second of the clips. Default None: the env's ``render_fps`` (30 without one).
        name_prefix: the clips' file prefix, as ``RecordVideo``'s. Default ``"rl-video"``.
        jobs: episodes rendered in parallel, each job a fresh interpreter. Default 1: in this process.
        ray: run the jobs as Ray tasks (reading the recording from shared storage). Default False.
        make: ``"module:function"`` or a callable building the env instead of its recorded spec.
        settings: the encoder's ``VideoSettings``. Default: its defaults (as ``RecordVideo``'s).
        snapshot: the snapshot hook restoring the recorded states (a ``Snapshot`` or ``"module:qualname"``,
            imported: your choice). Default None: the built-in hook the recording names (``"ale"``, ``"mujoco"``);
            another recorded name is not imported (``envrec.replay.trust``).
        on_clip_closed: ``callback(video_path, meta)`` per clip written, as ``RecordVideo``'s (W&B, TensorBoard,
            an upload), called in this process once the clips are done, in episode order. Default None.
        import_modules: modules you trust, imported first here and in every job (``--import``). Default None.
        trust_kwargs: use the recorded kwargs and reset options as they are (``--trust-kwargs``). Default False.

    Returns:
        One ``RenderedClip`` per selected episode, in episode order.

    Raises:
        ConfigError: a bad selection or option, an episode id not recorded, several recordings and no
            ``prefix``, an env that cannot be recreated (naming ``--make``) or does not take ``env_kwargs``, a
            clip filmed live of a selected episode in ``out`` (it is not replaced).
        TraceError: the recording is damaged.
    """
    options = replace(_options(directory, out, env_kwargs, fps, name_prefix, make, settings, snapshot),
                      trust=user_trust(import_modules, trust_kwargs))
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ConfigError(f"jobs must be an integer >= 1, not {jobs!r}")
    recording, items, refused = _select(directory, prefix, episodes, options)
    if not items:
        logger.info("envrec render: the selection %r picks no episode of %s", episodes, recording)
        return []
    if refused is not None:  # a folder's name or kwarg: each episode says so, as verify's verdicts do
        return _refused(recording, items, refused)
    _keep_live_clips(options, [eid for _, eid in items])
    _make_out(options.out)
    clips = _in_jobs(os.fspath(directory), recording, items, options, jobs, ray)
    if on_clip_closed is not None:
        for clip in clips:
            if clip.meta_path is not None and os.path.exists(clip.meta_path):
                on_clip_closed(clip.path, read_clip_meta(clip.meta_path))
        drain_clip_callback(on_clip_closed)  # as a recorder's close(): a logger's thread has them all on return
    return clips


def _in_jobs(directory: str, recording: str, items: list[tuple[int, int]], options: RenderOptions, jobs: int,
             ray: bool) -> list[RenderedClip]:
    """The clips of ``items``, filmed in this process, in ``jobs`` interpreters or as Ray tasks (``run_jobs``)."""
    from .jobs import run_jobs
    from .recreate import spec_trusted

    def failed(item: tuple[int, int], why: str) -> RenderedClip:
        return RenderedClip(recording, item[1], None, None, "cannot_replay", reason=why)

    with TraceReader(directory, recording) as reader:  # the user's registrations are this process's: jobs are told
        options = replace(options, trusted=spec_trusted(reader.recordings[0].manifest, options.trust, _replaced(options)))
    return run_jobs(render_task, directory, recording, items, {"render": options}, jobs=jobs, ray=ray, on_failure=failed)


def _refused(recording: str, items: Sequence[tuple[int, int]], refused: Any) -> list[RenderedClip]:
    """A ``cannot_replay`` clip for each episode of a recording whose env a folder's names keep from being made."""
    logger.warning("envrec render: %s", refused)
    return [RenderedClip(recording, eid, None, None, "cannot_replay", reason=f"{refused.reason}; {refused.hint}")
            for _, eid in items]


def _options(directory, out, env_kwargs, fps, name_prefix, make, settings, snapshot) -> RenderOptions:
    """The checked options of a render (and SDL told to draw off screen, for it and the jobs it starts)."""
    headless_display()
    if env_kwargs is not None and (not isinstance(env_kwargs, Mapping) or not all(isinstance(k, str) for k in env_kwargs)):
        raise ConfigError(f"env_kwargs must be a dict of keyword arguments, not {env_kwargs!r:.80}")
    if "render_mode" in (env_kwargs or {}):
        raise ConfigError("env_kwargs: render_mode is rgb_array when rendering; leave it out")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps <= MAX_FPS):
        raise ConfigError(f"fps must be a positive number of at most {MAX_FPS}, not {fps!r}")
    if out is not None and not os.fspath(out):
        raise ConfigError("out is empty: name the clips' folder (default: the recording's folder/videos)")
    if settings is not None and not isinstance(settings, VideoSettings):
        raise ConfigError(f"settings must be a VideoSettings, not {type(settings).__name__}")
    hook = _hook({}, snapshot) if snapshot is not None else None
    if isinstance(hook, Exception):  # a bad argument, not a verdict per episode
        raise ConfigError(f"snapshot={snapshot!r}: {hook}") from hook
    folder = os.fspath(out) if out is not None else os.path.join(os.fspath(directory), "videos")
    return RenderOptions(os.path.abspath(folder), dict(env_kwargs or {}), fps, check_prefix(name_prefix), make, settings,
                         snapshot)


def _make_out(out: str) -> None:
    """The clips' folder, created if needed; ConfigError when it is a symbolic link (not followed: by default it
    lies in a folder that may come from anyone), not a folder, or not writable."""
    if os.path.islink(out):
        raise ConfigError(f"the clips' folder {out} is a symbolic link, which is not followed: pass a real folder (--out)")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot make the clips' folder {out}: {exc.strerror or exc}") from None
    if not os.path.isdir(out) or not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"the clips' folder {out} is not a folder this process can write (--out)")


def _keep_live_clips(options: RenderOptions, episode_ids: Sequence[int]) -> None:
    """ConfigError when a clip of these episodes filmed live (its metadata has no ``"replay"``) is in the way:
    it is what the env really showed, and a replay that diverged would replace it with something else."""
    live = []
    for eid in episode_ids:
        path = meta_path(options.out, f"{options.name_prefix}-episode-{eid}")
        try:
            if "replay" not in read_clip_meta(path):
                live.append(os.path.basename(path))
        except (OSError, ValueError):
            continue  # none there (or not one envrec can read: replaced like any file in the way)
    if live:
        shown = ", ".join(live[:3]) + (f" and {len(live) - 3} more" if len(live) > 3 else "")
        raise ConfigError(f"{options.out} holds clips filmed live of the episodes to render ({shown}): they are not "
                          "replaced; render into another folder (out=, --out) or move them")


def _replaced(options: RenderOptions) -> set[str]:
    """The recorded kwargs rendering replaces (the render mode, the user's env kwargs): not checked."""
    return {"render_mode", *options.env_kwargs}


def _select(directory: str | os.PathLike, prefix: str | None, selection: str,
            options: RenderOptions) -> tuple[str, list[tuple[int, int]], Any]:
    """The recording's prefix, the ``(index, episode_id)`` of the episodes ``selection`` picks in it, in
    order, and why a folder's names keep its env from being made (a ``CannotRecreate``), else None; its env made
    once here, so that one that cannot be made, or filmed, is said before any job starts."""
    from .recreate import refusal
    from .selection import episode_refs, parse_selection, select_episodes

    parse_selection(selection)  # a bad term is said before the folder is read
    with TraceReader(directory, prefix=prefix) as reader:
        prefixes = [r.manifest.get("prefix") for r in reader.recordings]
        if len(prefixes) > 1:
            raise ConfigError(f"{os.fspath(directory)} holds {len(prefixes)} recordings ({', '.join(map(str, prefixes))}): "
                              "pass the one to render with prefix= (--prefix): clips are named by episode id alone")
        if not prefixes:
            raise ConfigError(f"{os.fspath(directory)} holds no recording" + (f" with prefix {prefix!r}" if prefix else ""))
        chosen = select_episodes(episode_refs(reader), selection)
        manifest = reader.recordings[0].manifest
        refused = None if options.make is not None else refusal(manifest, options.trust, _replaced(options))
        if chosen and refused is None:
            _make_env(manifest, options).close()
    return str(prefixes[0]), [(ref.index, ref.episode_id) for ref in chosen], refused


def render_task(directory: str, prefix: str | None, items: list[tuple[int, int]], options: dict[str, Any]) -> list[RenderedClip]:
    """A render job (``envrec.replay.jobs``): film episodes of one recording through one encoder, each episode in
    an env made for it (an ALE game keeps its sticky-action RNG across resets: a clip must not depend on the
    episodes filmed before it).

    Args:
        directory: the folder of the recording.
        prefix: its prefix.
        items: the episodes, ``(index, episode_id)``.
        options: ``{"render": RenderOptions}``.

    Raises:
        ConfigError: the env cannot be recreated, does not take the env kwargs or renders no frames; the folder
            changed since the episodes were chosen.
    """
    opts: RenderOptions = options["render"]
    import_user_modules(opts.trust.import_modules)  # a job is a fresh interpreter: the user's modules imported here too
    filmed = []
    with _open_out(opts.out) as own, TraceReader(directory, prefix=prefix) as reader:
        rec = reader.recordings[0]
        episodes = [_episode(reader, index, eid) for index, eid in items]
        starts = reset_steps(reader, episodes)
        hook, name = _hook(rec.manifest, opts.snapshot), str(rec.manifest.get("prefix"))
        env = _make_env(rec.manifest, opts)  # the first episode's: its metadata gives the clips' fps
        try:
            fps = opts.fps or env.metadata.get("render_fps") or 30
            recorder = VideoRecorder(opts.out, fps=fps, settings=opts.settings, env_id=rec.manifest.get("env_id"),
                                     replace_clips=True)  # a re-rendered episode replaces its earlier render
        except BaseException:
            env.close()
            raise
        if recorder.folder_id != own.identity:  # swapped between the two opens: write nothing into the new one
            recorder.close()
            env.close()
            raise ConfigError(f"the clips' folder {opts.out} was replaced (by a symbolic link or another folder) while "
                              "the render started: nothing was written into it")
        with recorder:
            for k, ep in enumerate(episodes):
                env = env if k == 0 else _make_env(rec.manifest, opts)  # one for each: none films what one before left
                try:
                    filmed.append(_film(_Job(env, recorder, name, hook, opts), ep, starts[ep.episode_id]))
                finally:
                    env.close()
        return [_finished(own, clip) for clip in filmed]


def _make_env(manifest: Mapping[str, Any], options: RenderOptions) -> gym.Env:
    from .recreate import CannotRecreate, recreate_env

    try:
        env = recreate_env(manifest, make=options.make, render_mode="rgb_array", env_kwargs=options.env_kwargs,
                           trusted=options.trusted, trust=options.trust)
    except CannotRecreate as exc:
        if options.env_kwargs:
            shown = " ".join(f"{k}={json.dumps(v, default=repr)}" for k, v in options.env_kwargs.items())
            raise ConfigError(f"cannot make the env with the env kwargs {shown} (--env-kwargs): {exc.reason}") from exc
        raise
    modes = env.metadata.get("render_modes") or []
    if "rgb_array" not in modes:
        env.close()
        raise ConfigError(f"the env renders no rgb_array frames (its render_modes: {modes}): it cannot be filmed")
    return env


def _hook(manifest: Mapping[str, Any], snapshot: Any) -> Any:
    """The recording's snapshot hook; an exception standing in for it when it cannot be loaded (each episode
    that needs it is then ``cannot_replay``, the others replay)."""
    from .engine import CannotReplay, snapshot_hook

    try:
        return snapshot_hook(manifest, snapshot)
    except CannotReplay as exc:
        return exc


@dataclass
class _Job:
    """What filming an episode uses: shared by a job's episodes."""

    env: gym.Env
    recorder: VideoRecorder
    recording: str
    hook: Any  # the snapshot hook, None, or the CannotReplay saying why it cannot be loaded
    options: RenderOptions


def _film(job: _Job, episode: Episode, reset_step: int) -> RenderedClip:
    """Replay ``episode`` with a frame at its start and after each step; its clip's metadata says the verdict."""
    from .engine import CannotReplay, Replay, compare, plan_start

    eid = episode.episode_id
    try:
        if isinstance(job.hook, CannotReplay) and (getattr(episode, "reset_snapshot", None) is not None or episode.first_step > 0):
            raise job.hook
        start = plan_start(episode, None if isinstance(job.hook, CannotReplay) else job.hook)
        refused = options_refusal(episode.options, job.options.trust)
        if refused is not None:
            raise CannotReplay(refused.reason, refused.hint)
    except CannotReplay as exc:
        logger.warning("envrec render: episode %d of %s cannot be replayed: %s", eid, job.recording, exc)
        return RenderedClip(job.recording, eid, None, None, "cannot_replay", reason=str(exc))
    name = f"{job.options.name_prefix}-episode-{eid}"
    if os.path.exists(meta_path(job.options.out, name)):
        logger.info("envrec render: replacing the clip %s in %s, rendered before", name, job.options.out)
    job.recorder.start_clip(name, episode_id=eid)
    difference, frames, step, error = None, 0, start.from_step, None
    try:
        for replayed in Replay(job.env, episode, start, job.hook):
            step = replayed.step
            if difference is None:
                difference = compare(replayed)
            job.recorder.add_frame(job.env.render(), reset_step + step)
            frames += 1
    except Exception as exc:  # noqa: BLE001  (the env's own code raised: the clip ends there, saying so)
        error = f"the env raised {type(exc).__name__} at step {step}: {exc}"
        logger.warning("envrec render: episode %d of %s: %s", eid, job.recording, error)
    verdict = "diverged" if difference is not None else ("cannot_replay" if error else "reproduced")
    about = {
        "recording": job.recording, "verdict": verdict, "start": start.how, "from_step": start.from_step,
        "diverged_at": difference.step if difference else None, "field": difference.field if difference else None,
        "where": difference.where if difference else None, "recorded": difference.recorded if difference else None,
        "replayed": difference.replayed if difference else None,
        "difference": difference.difference if difference else None,
        "env_kwargs": json.loads(json.dumps(job.options.env_kwargs, default=repr)), "error": error,
    }
    job.recorder.end_clip(extra={"replay": about})
    return RenderedClip(job.recording, eid, None, meta_path(job.options.out, name), verdict,
                        about["diverged_at"], about["field"], frames, error)


def _episode(reader: TraceReader, index: int, episode_id: int) -> Episode:
    ep = reader[index] if index < len(reader) else None
    if ep is None or ep.episode_id != episode_id:
        raise ConfigError(f"episode {episode_id} is no longer episode {index} of {reader.directory} (the folder changed)")
    return ep


def reset_steps(reader: TraceReader, episodes: Sequence[Episode]) -> dict[int, int]:
    """The env steps the recording took before each episode's reset (by episode id): what ``RecordVideo``'s
    step counter was at that reset, so the first number of its clip's ``step_range``.

    Counted from the manifest: the steps of evicted batches, of the batches before the episode's first kept
    part, and of the records before it in its batch, less the steps of its own start that were evicted
    (``RecordVideo`` counts every step since it wrapped the env: the same count when it and ``RecordTrace``
    wrapped the env from the start).

    Args:
        reader: a reader of one recording.
        episodes: episodes read from it.
    """
    from ..read.batch_files import BatchFiles

    rec = reader.recordings[0]
    evicted = int((rec.manifest.get("evicted") or {}).get("steps", 0))
    before, total = {}, evicted
    for entry in rec.batches:
        before[entry["fn"]] = total
        total += int(entry["steps"])
    out, loaded = {}, {}
    files = BatchFiles(reader.directory, verify=False)
    try:
        for ep in episodes:
            part = ep.parts[0]
            if part.batch not in loaded:
                loaded[part.batch] = files.load(next(e for e in rec.batches if e["fn"] == part.batch), rec.manifest)
            in_batch = sum(int(r.get("length", 0)) for r in loaded[part.batch][: part.record])
            out[ep.episode_id] = before[part.batch] + in_batch - part.first_step
    finally:
        files.close()
    return out


def _open_out(out: str) -> OwnFolder:
    """The clips' folder opened once, not through a symbolic link (``OwnFolder``): the encoder must find this very
    folder there, and the clips are read back through it; ConfigError when it is a link or gone."""
    try:
        return OwnFolder(out, is_clip_file, follow=False)
    except (OSError, FolderChanged) as exc:
        raise ConfigError(f"the clips' folder {out} cannot be opened as a folder (a symbolic link is not followed): "
                          f"{getattr(exc, 'strerror', None) or exc}") from None


def _finished(own: OwnFolder, clip: RenderedClip) -> RenderedClip:
    """``clip`` with its video's path and any reason it broke, from the metadata the encoder wrote (read through
    the folder opened once); no path when that video is not a regular file there (reported not written)."""
    if clip.meta_path is None:
        return clip
    try:
        meta = read_clip_meta(own.proc_path(os.path.basename(clip.meta_path)))
    except (OSError, ValueError) as exc:
        return replace(clip, path=None, reason=f"no clip metadata: {exc}")
    name = meta.get("path")
    reason = clip.reason or meta.get("reason")
    if name and not (is_clip_file(name) and own.is_regular(name)):
        name, reason = None, reason or f"{name} in {own.path} is not a regular file: no clip was written"
    video = os.path.join(own.path, name) if name else None
    return replace(clip, path=video, reason=reason)
