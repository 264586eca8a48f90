"""Recording Gymnasium vector environments: per-sub-env traces and videos.

``RecordVectorTrace`` copies each batched array of a vector step into the
ring once (no Python loop over sub-envs); the vector serializer worker splits
the record into one trace per sub-env (``PREFIX.envI.*``), following the
vector env's autoreset mode so that no step of a finished episode leaks into
the next one and reset observations land where they belong:

* next-step (Gymnasium's default): the step after an episode ends is that
  sub-env's reset (its action was ignored); it starts the next episode.
* same-step: the step that ends an episode carries the final observation and
  info in ``info["final_obs"]`` / ``info["final_info"]``; the returned
  observation is the next episode's reset observation.
* disabled: sub-envs are reset by ``reset(options={"reset_mask": mask})``.

``RecordVectorVideo`` records clips of chosen sub-envs (and optionally one
tiled clip of all), with triggers counted per sub-env episode, and a
``keep_if`` asked per sub-env clip (``vector_keep``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorWrapper

from ..contract.open_files import FILES_PER_SUB_ENV_TRACE, FILES_SPARE, open_files_limit
from ..contract.protocol import Kind, VectorSerializerConfig
from ..errors import ClosedError, ConfigError, RecordError
from ..formats.compression import Compression, parse_compression
from ..formats.infos import pack_info
from ..formats.ownfolder import folder_identity
from ..formats.schema import describe_space, leaf_values, leaves
from ..formats.shipped import unique_suffix
from ..formats.store import store_url
from ..formats.trace_format import PREFIX, check_prefix, default_prefix, manifest_name
from ..option_checks import CALLABLE, FOLDER, POSITIVE_INT, POSITIVE_NUMBER, Accepts, check_options, int_in, optional
from ..options import StreamOptions
from ..supervision.closers import register_closer, unregister_closer
from ..supervision.restarts import RestartPolicy
from ..supervision.shipper import ShipTargets, shipper_for, shipping_name
from ..supervision.stream import RawRecord, Stream, warn_start_method
from .batched import check_frame_batch, reset_mask_of
from .call_lock import held_for_close
from .clip_triggers import KeepIf, capped_cubic_video_schedule
from .host_arrays import HostArrays
from .recorder import DEFAULT_RING_BYTES, TRACE_OPTIONS, check_folder, check_max_bytes, record_failure_in_manifest
from .sub_env_replay import SubEnvRng, describe_sub_envs
from .sub_env_selection import Picker, RowPlan, SubEnvSelection

__all__ = ["RecordVectorTrace", "autoreset_name", "batched_leaves"]


def autoreset_name(env) -> str:
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return mode.value if isinstance(mode, AutoresetMode) else str(mode)


def batched_leaves(spec: dict, n: int) -> list[tuple[str, tuple]]:
    """(dtype, shape) of each leaf of a single space's spec, batched over ``n`` sub-envs."""
    out = []
    for leaf in leaves(spec):
        if leaf.kind != "array":
            raise ConfigError("envrec cannot record Text spaces of vector environments")
        out.append((leaf.dtype, (n, *leaf.shape)))
    return out


def _as_section(x, dtype: str, shape: tuple, where: str) -> memoryview:
    a = x if type(x) is np.ndarray else np.asarray(x)
    dt = np.dtype(dtype)
    if a.dtype == object and dt != object:
        raise RecordError(f"{where}: expected a {dt} array of shape {shape}, got an object array of shape {a.shape}")
    if a.shape != shape or (a.dtype != dt and not np.can_cast(a.dtype, dt, "safe")):
        raise RecordError(f"{where}: expected a {dt} array of shape {shape}, got {a.dtype} of shape {a.shape}")
    if a.dtype != dt:
        a = a.astype(dt)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a.data.cast("B")


class RecordVectorTrace(VectorWrapper):
    """Records every sub-env of a vector env as its own trace (``PREFIX.envI.manifest.json`` ...).

    Each batched array of a step is copied into the ring once; the vector
    serializer splits it per sub-env, following the env's autoreset mode.
    Read sub-env I with ``TraceReader(directory, prefix=wrapper.prefix_of(I))``.

    Args:
        env: the vector env (its sub-envs' spaces must hold no Text space).
        directory: the output folder, created if needed.
        name_prefix: the file prefix before ``.envI``. Default None: a fresh
            ``openaigym.trace.<n>.<pid>``.
        batch_bytes: about how many bytes of records make one batch. Default 5,000,000.
        compression: as for ``RecordTrace``. Default ``"auto"``.
        max_bytes: as for ``RecordTrace``; the budget holds for each sub-env's trace.
        commit_interval: as for ``RecordTrace``, for each sub-env's trace. Default 5.0.
        options: a ``StreamOptions``; its fields may also come as keyword
            arguments (``**stream_options``), which win. A failed vector
            serializer is not replaced (it keeps no checkpoints), so
            ``max_restarts`` has no effect.
        start_method: deprecated and ignored (a ``DeprecationWarning``).
        sub_envs: which sub-envs get a trace: a list of indices, or a picker
            ``pick(indices) -> chosen`` asked as episodes end
            (``envrec.record.sub_env_selection``). Only their rows are copied
            from the batch (gathered on the device for GPU arrays). Default
            None: every sub-env.

    Batched values may be numpy arrays, torch tensors, JAX or CuPy arrays,
    on the CPU or a CUDA GPU, or anything with ``__dlpack__`` or
    ``__array__`` (``envrec.record.host_arrays``).

    Raises:
        ConfigError: a bad option, a folder that cannot be written, a name
            prefix already used there, a Text space, ``sub_envs`` out of range.
        RecordError: from ``step()``/``reset()``, a batched value of the wrong dtype or shape, a batch of
            another size than ``num_envs``, an array on a device the host cannot read (naming the field;
            nothing of that step is recorded).
        ClosedError: a call after ``close()``.
        WorkerError: only with ``strict=True``: the serializer failed.
    """

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        directory: str | os.PathLike,
        *,
        name_prefix: str | None = None,
        batch_bytes: int = 5_000_000,
        compression: str | Compression | None = "auto",
        max_bytes: int | None = None,
        commit_interval: float | None = 5.0,
        options: StreamOptions | None = None,
        start_method: str | None = None,
        sub_envs: list[int] | tuple[int, ...] | Picker | None = None,
        **stream_options: Any,
    ) -> None:
        warn_start_method(start_method)
        check_options("RecordVectorTrace", TRACE_OPTIONS, {k: v for k, v in locals().items() if k != "sub_envs"})
        opts = StreamOptions.merge(options, stream_options)
        ring_bytes = opts.ring_or(DEFAULT_RING_BYTES)
        check_max_bytes(max_bytes, batch_bytes)
        compression = parse_compression(compression)
        super().__init__(env)

        self.directory = check_folder(directory)
        self.prefix = check_prefix(name_prefix) if name_prefix else default_prefix()
        if opts.ship_to is not None:
            self.prefix = check_prefix(f"{self.prefix}.{unique_suffix()}")
        n = self.num_envs
        self.selection = _selection(n, sub_envs, autoreset_name(env))
        self._host = HostArrays(n)
        for i in range(n):
            path = os.path.join(self.directory, manifest_name(f"{self.prefix}.env{i}"))
            if os.path.exists(path):
                raise ConfigError(f"{path} exists: choose another name_prefix or folder so no recording is overwritten")
        self._obs_spec = describe_space(env.single_observation_space)
        self._act_spec = describe_space(env.single_action_space)
        self._obs_leaves = batched_leaves(self._obs_spec, n)
        self._act_leaves = batched_leaves(self._act_spec, n)
        self.autoreset_mode = autoreset_name(env)
        env_id = env.spec.id if env.spec is not None else None
        self._rng = SubEnvRng.of(env)
        self._cfg = cfg = VectorSerializerConfig(
            self.directory, self.prefix, n, self.autoreset_mode, self._obs_spec, self._act_spec, batch_bytes, env_id,
            {"batch_bytes": batch_bytes, "ring_bytes": ring_bytes, "backpressure": opts.backpressure, "num_envs": n,
             "autoreset_mode": self.autoreset_mode,
             "compression": compression.describe() if compression is not None else None, "max_bytes": max_bytes,
             "commit_interval": commit_interval,
             **({"sub_envs": self.selection.describe()} if self.selection is not None else {})},
            compression=compression, max_bytes=max_bytes, commit_interval=commit_interval,
            folder_id=folder_identity(self.directory),
            ship_url=store_url(opts.ship_to) if opts.ship_to is not None else None,
            sub_envs=self._traced(), indexed=self.selection is not None, env=describe_sub_envs(env),
        )
        self._shipper = shipper_for(opts, self.directory, cfg.folder_id,
                                    ShipTargets(prefixes=tuple(self.prefix_of(i) for i in range(n)), clip_recorders=()))
        self._stream = Stream(
            "vector serializer", cfg, opts, ring_bytes=ring_bytes, where=self.directory,
            restart=RestartPolicy.never(),  # it keeps no checkpoints a successor could resume from
            on_broken=self._record_failure,
        )
        if self._shipper is not None:
            try:
                self._shipper.wait_ready()
            except ConfigError:
                self._stream.close()
                raise
        self._steps = 0
        self._lock = threading.RLock()  # one record at a time, whole (envrec.record.call_lock)
        self._closing = False
        register_closer(self)

    def _traced(self) -> tuple[int, ...] | None:
        """The sub-envs whose traces the worker makes at its start (None: all; a picker's: as they are picked)."""
        if self.selection is None:
            return None
        return tuple(self.selection.tracked.tolist()) if self.selection.fixed else ()

    def _sections(self, value, spec: dict, batched: list, where: str, rows: np.ndarray | None = None) -> list:
        values = leaf_values(value, spec)
        out = []
        for v, (dt, shape) in zip(values, batched, strict=True):
            a = self._host.to_host(v, rows, where)
            out.append(_as_section(a, dt, shape if rows is None else (len(rows), *shape[1:]), where))
        return out

    def _info(self, info: dict, rows: np.ndarray | None) -> bytes:
        return pack_info(self._host.info(info, rows)) if info else b""

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        mask = reset_mask_of(options, self.num_envs, self._host)  # read first: the vector env may pop it from options
        options = dict(options) if options else None
        rng = self.rng_before_reset(seed, mask)
        obs, info = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]  # vector envs take a list of seeds too
        recorded_options = {k: v for k, v in (options or {}).items() if k not in ("reset_mask", "env_idx")}
        self.record_reset(obs, info, seed=seed, options=recorded_options, mask=mask, rng=rng)
        return obs, info

    def _recorded(self, mask: np.ndarray | None) -> np.ndarray:
        """The sub-envs of ``mask`` (None: all) whose traces this recorder makes."""
        tracked = np.arange(self.num_envs) if self.selection is None else self.selection.tracked
        return tracked if mask is None else tracked[np.asarray(mask, bool)[tracked]]

    def rng_before_reset(self, seed: int | list[int | None] | None, mask: np.ndarray | None = None) -> dict[int, dict]:
        """The ``np_random`` states of the recorded sub-envs an unseeded reset is about to reset (read before it;
        ``{}`` when the vector env does not expose its sub-envs). What ``record_reset``'s ``rng`` takes.

        Args:
            seed: the reset's seed: an int (every sub-env seeded), a list of one per sub-env, or None.
            mask: which sub-envs it resets. Default None: all of them.
        """
        if self._rng is None or isinstance(seed, int):
            return {}
        unseeded = [int(i) for i in self._recorded(mask) if seed is None or seed[int(i)] is None]
        return self._rng.states(unseeded)

    def record_reset(self, obs, info: dict, *, seed=None, options=None, mask=None, rng=None) -> None:
        """Record a reset the vector env did already (how adapters of other vector APIs record: ``envrec.sb3``).

        Args:
            obs: the batched observations it returned.
            info: its vector info (Gymnasium's dict of arrays, ``_key`` masks).
            seed: an int (sub-env I got ``seed + I``), a list of one per sub-env, or None.
            options: the reset options: one dict for all, a list of one per sub-env, or None.
            mask: which sub-envs were reset. Default None: all of them.
            rng: ``{sub_env: np_random state}`` read before an unseeded reset (``rng_before_reset``), which
                replay starts those episodes from. Default None: not read.
        """
        mask = None if mask is None else self._host.to_host(mask, None, "reset_mask").astype(bool)
        replay = self._replay_at_reset(mask, rng)
        rows: np.ndarray | None = None
        before = None
        if self.selection is not None:
            with self._lock:
                before = self.selection.save()
                plan = self.selection.on_reset(mask)
            if not len(plan.rows):
                return  # no recorded sub-env was reset
            sections: list[Any] = plan.sections()
            rows = plan.rows
        else:
            mask = np.ones(self.num_envs, bool) if mask is None else mask
            sections = [_as_section(mask, "|b1", (self.num_envs,), "reset_mask")]
        try:
            sections += self._sections(obs, self._obs_spec, self._obs_leaves, "observations", rows)
            sections += [pack_info({"seed": seed, "options": options or None, **replay}), self._info(info, rows)]
            with self._lock:
                self._check_open()
                self._stream.send(RawRecord(Kind.VRESET, 0, self._steps, sections))
        except BaseException:
            if before is not None and self.selection is not None:
                with self._lock:
                    self.selection.restore(before)  # the reset was not recorded: as if it had not come
            raise

    def _replay_at_reset(self, mask: np.ndarray | None, rng: dict[int, dict] | None) -> dict[str, Any]:
        """The reset's replay fields (``envrec.record.sub_env_replay``): ``rng``, the states read before it, and
        with same-step autoreset ``rng_next``, the states after it (they stand for the next autoreset's)."""
        out: dict[str, Any] = {"rng": dict(rng)} if rng else {}
        if self._rng is not None and self.autoreset_mode == "SameStep":
            out["rng_next"] = self._rng.states(self._recorded(mask).tolist())
        return out

    def _rng_at_ends(self, ended: np.ndarray) -> bytes:
        """The packed states of the recorded sub-envs ``ended`` (sub-env indices) whose episode just ended, b"" when
        none is read: what their next autoreset starts from (see ``envrec.record.sub_env_replay``)."""
        if self._rng is None or not len(ended):
            return b""
        states = self._rng.states(ended.tolist())
        return pack_info(states) if states else b""

    def step(self, actions):
        obs, rewards, terminations, truncations, info = self.env.step(actions)
        self.record_step(actions, obs, rewards, terminations, truncations, info)
        return obs, rewards, terminations, truncations, info

    def record_step(self, actions, obs, rewards, terminations, truncations, info: dict) -> None:
        """Record a step the vector env took already, its autoreset as the env's mode says (see ``record_reset``).

        Args:
            actions: the batched actions it was given.
            obs: the batched observations it returned.
            rewards: one reward per sub-env.
            terminations: one flag per sub-env.
            truncations: one flag per sub-env.
            info: its vector info (Gymnasium's dict of arrays, ``_key`` masks).
        """
        if self.selection is not None:
            self._record_rows(actions, obs, rewards, terminations, truncations, info)
            return
        n = self.num_envs
        host = self._host
        terms = host.to_host(terminations, None, "terminations")
        truncs = host.to_host(truncations, None, "truncations")
        sections = self._sections(actions, self._act_spec, self._act_leaves, "actions")
        sections += self._sections(obs, self._obs_spec, self._obs_leaves, "observations")
        sections += [
            _as_section(_rewards(host.to_host(rewards, None, "rewards")), "<f8", (n,), "rewards"),
            _as_section(terms, "|b1", (n,), "terminations"),
            _as_section(truncs, "|b1", (n,), "truncations"),
            self._info(info, None),
        ]
        sections.append(self._rng_at_ends(np.flatnonzero(_ended(terms, truncs)) if self._rng is not None else _NONE))
        self._send_step(sections)

    def _record_rows(self, actions, obs, rewards, terminations, truncations, info: dict) -> None:
        """``record_step`` of the chosen sub-envs: their flags decide the rows, only those rows are copied."""
        assert self.selection is not None
        flag_rows = None if len(self.selection.tracked) == self.num_envs else self.selection.tracked
        terms = _flags(self._host.to_host(terminations, flag_rows, "terminations"), "terminations")
        truncs = _flags(self._host.to_host(truncations, flag_rows, "truncations"), "truncations")
        with self._lock:
            before = self.selection.save()
            plan: RowPlan = self.selection.on_step(terms, truncs)
        try:
            rows, k = plan.rows, len(plan.rows)
            if not k:
                self._send_step(None)  # no recorded sub-env in this step: only its number counts
                return
            sections: list[Any] = plan.sections()
            sections += self._sections(actions, self._act_spec, self._act_leaves, "actions", rows)
            sections += self._sections(obs, self._obs_spec, self._obs_leaves, "observations", rows)
            sections += [
                _as_section(_rewards(self._host.to_host(rewards, rows, "rewards")), "<f8", (k,), "rewards"),
                _as_section(terms[plan.positions], "|b1", (k,), "terminations"),
                _as_section(truncs[plan.positions], "|b1", (k,), "truncations"),
                self._info(info, rows),
            ]
            ended = rows[np.logical_or(terms[plan.positions], truncs[plan.positions])] if self._rng is not None else _NONE
            sections.append(self._rng_at_ends(ended))
            self._send_step(sections)
        except BaseException:
            with self._lock:
                self.selection.restore(before)  # the step was not recorded: as if it had not come
            raise

    def _send_step(self, sections: list | None) -> None:
        with self._lock:  # the step number and the record in one order (envrec.record.call_lock)
            self._check_open()
            self._steps += 1
            if sections is not None:
                self._stream.send(RawRecord(Kind.VSTEP, 0, self._steps, sections))

    def _check_open(self) -> None:
        if self._closing and not self._stream.closed:
            raise ClosedError("this recorder is being closed (close() was called in another thread): nothing more is recorded")
        self._stream.check_open()

    def stats(self) -> dict[str, Any]:
        """The stream's counters (every key: docs/reference.md, "Stats")."""
        return self._stream.stats() | (self._shipper.stats() if self._shipper is not None else {})

    def prefix_of(self, sub_env: int) -> str:
        """The file prefix of sub-env ``sub_env``'s trace (for ``TraceReader(directory, prefix=...)``)."""
        return f"{self.prefix}.env{sub_env}"

    def _record_failure(self, reason: str) -> None:
        """Each sub-env's manifest that no serializer wrote says why (a worker that never started)."""
        traced = self._traced()
        for i in range(self.num_envs) if traced is None else traced:
            prefix = self.prefix_of(i)
            record_failure_in_manifest(
                os.path.join(self.directory, manifest_name(prefix)), reason, only_if_missing=True, prefix=prefix,
                env_id=self._cfg.env_id, observation_space=self._obs_spec, action_space=self._act_spec,
                settings=self._cfg.settings, folder_id=self._cfg.folder_id,
            )

    def close(self, **kwargs) -> None:
        try:
            if not self._stream.closed and not self._stream.left_behind_by_fork:
                with held_for_close(self, self._stream.ring):
                    unregister_closer(self)
                    self._stream.close()
                if self._shipper is not None:
                    self._shipper.finish()
        finally:
            self.env.close(**kwargs)


_NONE = np.zeros(0, np.int64)


def _selection(n: int, sub_envs: Any, mode: str) -> SubEnvSelection | None:
    """The sub-envs a vector trace records (None: all), checked to fit the user's open-files limit (a picker's are
    not known yet: it may choose few)."""
    selection = None if sub_envs is None else SubEnvSelection(n, sub_envs, mode)
    if selection is None or selection.fixed:
        _check_open_files(n if selection is None else len(selection.tracked))
    return selection


def _check_open_files(traced: int) -> None:
    """``ConfigError`` when one worker could not keep the traces of ``traced`` sub-envs open."""
    need, limit = traced * FILES_PER_SUB_ENV_TRACE + FILES_SPARE, open_files_limit()
    if need > limit:
        most = (limit - FILES_SPARE) // FILES_PER_SUB_ENV_TRACE
        raise ConfigError(f"sub_envs: recording {traced} sub-envs' traces keeps about {need} files open in one worker, "
                          f"more than this user may open ({limit}, ulimit -Hn): record at most {max(most, 0)} of them "
                          "with sub_envs=[...] (or a picker), split them across recorders, or raise the limit")


def _ended(terms: np.ndarray, truncs: np.ndarray) -> np.ndarray:
    return np.logical_or(np.asarray(terms, bool).reshape(-1), np.asarray(truncs, bool).reshape(-1))


def _rewards(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.float64 else a.astype(np.float64)


def _flags(a: np.ndarray, field: str) -> np.ndarray:
    if a.dtype != bool:
        if a.dtype == object or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.bool_)):
            raise RecordError(f"{field}: expected booleans, got {a.dtype}")
        a = a.astype(bool)
    return a


def _outcomes(keep_if: KeepIf, recorders: dict) -> Any:
    from .vector_keep import SubEnvOutcomes  # only with a keep_if

    return SubEnvOutcomes(keep_if, recorders)


def tile(frames: list[np.ndarray]) -> np.ndarray:
    """One frame showing all sub-envs' frames in a near-square grid (missing cells black)."""
    n = len(frames)
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    h, w = frames[0].shape[:2]
    c = frames[0].shape[2] if frames[0].ndim == 3 else 1
    grid = np.zeros((rows * h, cols * w, c), np.uint8)
    for k, f in enumerate(frames):
        r, q = divmod(k, cols)
        grid[r * h : (r + 1) * h, q * w : (q + 1) * w] = f.reshape(h, w, c)
    return grid


# What RecordVectorVideo's own options accept; recorder_options are VideoRecorder's (VIDEO_RECORDER_OPTIONS).
RECORD_VECTOR_VIDEO_OPTIONS = {
    "video_folder": FOLDER,
    "sub_envs": Accepts("a tuple of sub-env indices", lambda v: isinstance(v, tuple | list) and all(int_in(0).test(j) for j in v)),
    "episode_trigger": optional(CALLABLE),
    "video_length": int_in(0, what="an integer >= 0 (0: the whole episode)"),
    "name_prefix": PREFIX,
    "fps": optional(POSITIVE_NUMBER),
    "tiled_step_trigger": optional(CALLABLE),
    "tiled_length": POSITIVE_INT,
    "keep_if": optional(CALLABLE),
}


class RecordVectorVideo(VectorWrapper):
    """Clips of chosen sub-envs of a vector env, one per triggered sub-env episode; optionally a tiled clip.

    Frames are rendered only while a clip records. Each recorded sub-env (and
    the tiled clip) has its own ``VideoRecorder``, so its own encoder worker
    process; ``close()`` closes them all, then the env.

    Args:
        env: the vector env, its sub-envs made with ``render_mode="rgb_array"``.
        video_folder: where the clips go, created if needed.
        sub_envs: which sub-envs get clips, named
            ``NAME_PREFIX-envJ-episode-N.mp4``. Default ``(0,)``.
        episode_trigger: ``trigger(n) -> bool`` with the sub-env's own episode
            count. Default: Gymnasium's capped cubic schedule.
        video_length: frames per clip; default 0: the whole episode.
        name_prefix: the clips' file prefix. Default ``"rl-video"``.
        fps: frames per second. Default None: the env's ``render_fps`` (30 without one).
        tiled_step_trigger: ``trigger(step) -> bool``: start a clip of all
            sub-envs side by side (``NAME_PREFIX-tiled-step-N.mp4``). Default
            None: no tiled clips.
        tiled_length: vector steps per tiled clip. Default 200.
        keep_if: ``keep_if(outcome) -> bool``, asked when a sub-env's clip
            ends, with its sub-env's ``EpisodeOutcome`` (``episode_id``: that
            sub-env's episode count), as ``RecordVideo``'s; ``envrec.keep.best(k)``
            keeps the k best clips of all recorded sub-envs together. Tiled
            clips are always kept. Default None: keep all.
        recorder_options: ``VideoRecorder``'s keyword arguments (settings,
            ffmpeg, stream options...), for each recorder; ``max_bytes`` and
            ``keep_last_clips`` hold for each of them.

    Raises:
        ConfigError: sub-envs without frames, ``sub_envs`` out of range, or
            a bad option (naming it).
    """

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        video_folder: str,
        *,
        sub_envs: tuple[int, ...] = (0,),
        episode_trigger: Callable[[int], bool] | None = None,
        video_length: int = 0,
        name_prefix: str = "rl-video",
        fps: float | None = None,
        tiled_step_trigger: Callable[[int], bool] | None = None,
        tiled_length: int = 200,
        keep_if: KeepIf | None = None,
        **recorder_options: Any,
    ) -> None:
        check_options("RecordVectorVideo", RECORD_VECTOR_VIDEO_OPTIONS, locals())
        super().__init__(env)
        from .video_recorder import VideoRecorder

        if env.render_mode != "rgb_array":
            raise ConfigError(f"render_mode is {env.render_mode!r}: RecordVectorVideo needs sub-envs made with render_mode='rgb_array'")
        bad = [j for j in sub_envs if not 0 <= j < self.num_envs]
        if bad:
            raise ConfigError(f"sub_envs {bad} out of range for {self.num_envs} sub-envs")
        if episode_trigger is None:
            episode_trigger = capped_cubic_video_schedule
        self.episode_trigger = episode_trigger
        self.video_length = video_length or float("inf")
        self.name_prefix = check_prefix(shipping_name(name_prefix, recorder_options))
        self.sub_envs = tuple(sub_envs)
        self.autoreset_mode = autoreset_name(env)
        fps = fps or env.metadata.get("render_fps", 30)
        folder = os.fspath(video_folder)  # each VideoRecorder checks and creates it, after checking its options
        self.recorders = {j: VideoRecorder(folder, fps=fps, **recorder_options) for j in self.sub_envs}
        self.outcomes = None if keep_if is None else _outcomes(keep_if, self.recorders)
        self.tiled_step_trigger = tiled_step_trigger
        self.tiled_length = tiled_length
        self.tiled = VideoRecorder(folder, fps=fps, **recorder_options) if tiled_step_trigger else None
        self._tiled_frames = 0
        self._host = HostArrays(self.num_envs)
        self._rows = np.array(self.sub_envs, dtype=np.int64)
        self.episode = {j: -1 for j in self.sub_envs}
        self.frames = {j: 0 for j in self.sub_envs}
        self.done = {j: False for j in self.sub_envs}
        self.step_id = 0

    def _keep(self, j: int) -> bool:
        return self.outcomes is None or self.outcomes.decide(j)

    def _begin_episode(self, j: int, info: Any = None) -> None:
        rec = self.recorders[j]
        if rec.recording:
            rec.end_clip(keep=self._keep(j))
        self.episode[j] += 1
        self.frames[j] = 0
        if self.outcomes is not None:
            self.outcomes.reset(j, self.episode[j], info)
        if self.episode_trigger(self.episode[j]):
            rec.start_clip(f"{self.name_prefix}-env{j}-episode-{self.episode[j]}", episode_id=self.episode[j], sub_env=j)

    def _render(self):
        """The frames the running clips need: only those sub-envs when they live in this process."""
        envs = getattr(self.env.unwrapped, "envs", None)  # SyncVectorEnv's sub-envs
        if envs is None or (self.tiled is not None and self.tiled.recording):
            return self.env.render()
        return {j: envs[j].render() for j, rec in self.recorders.items() if rec.recording}

    def _own_frames(self, frames, live: list[int]) -> Any:
        """The frames of the sub-envs in ``live``: a batch (B×H×W×C, any framework) gives up only their rows."""
        if isinstance(frames, dict | list | tuple) or not live:
            return frames
        batch = self._host.to_host(frames, np.array(live, dtype=np.int64), "frames")
        check_frame_batch(batch, len(live))
        return dict(zip(live, batch, strict=True))

    def _capture(self, frames) -> None:
        live = [j for j, rec in self.recorders.items() if rec.recording]
        own = self._own_frames(frames, live)
        for j in live:
            rec = self.recorders[j]
            rec.add_frame(own[j], self.step_id)
            self.frames[j] += 1
            if self.frames[j] >= self.video_length:
                rec.end_clip(keep=self._keep(j))
        if self.tiled is not None and self.tiled.recording:
            if not isinstance(frames, list | tuple):
                frames = check_frame_batch(self._host.to_host(frames, None, "frames"), self.num_envs)
            self.tiled.add_frame(tile(list(frames)), self.step_id)
            self._tiled_frames += 1
            if self._tiled_frames >= self.tiled_length:
                self.tiled.end_clip()

    def _frames_wanted(self) -> bool:
        return any(r.recording for r in self.recorders.values()) or (self.tiled is not None and self.tiled.recording)

    def reset(self, *, seed=None, options=None):
        mask = reset_mask_of(options, self.num_envs, self._host)  # read first: the vector env may pop it from options
        obs, info = self.env.reset(seed=seed, options=dict(options) if options else None)
        for j in self.sub_envs:
            if mask is None or mask[j]:
                self.done[j] = False
                self._begin_episode(j, info)
        if self._frames_wanted():
            self._capture(self._render())
        return obs, info

    def step(self, actions):
        obs, rewards, terminations, truncations, info = self.env.step(actions)
        self.step_id += 1
        if (
            self.tiled is not None
            and self.tiled_step_trigger is not None
            and not self.tiled.recording
            and self.tiled_step_trigger(self.step_id)
        ):
            self.tiled.start_clip(f"{self.name_prefix}-tiled-step-{self.step_id}")
            self._tiled_frames = 0
        terms = self._host.to_host(terminations, self._rows, "terminations")  # only the recorded sub-envs' rows
        truncs = self._host.to_host(truncations, self._rows, "truncations")
        rews = self._host.to_host(rewards, self._rows, "rewards") if self.outcomes is not None else None
        for k, j in enumerate(self.sub_envs):
            ended = bool(terms[k] or truncs[k])
            if self.autoreset_mode == "NextStep" and self.done[j]:
                self._begin_episode(j, info)  # this step reset the sub-env: its frame opens the next episode
            elif self.outcomes is not None:
                assert rews is not None
                self.outcomes.step(j, rews[k], terms[k], truncs[k], info, same_step=self.autoreset_mode == "SameStep")
            if self.autoreset_mode == "SameStep" and ended:
                self._begin_episode(j, info)  # already reset within this step: the frame shows the next episode
                ended = False
            self.done[j] = ended
        if self._frames_wanted():
            self._capture(self._render())
        return obs, rewards, terminations, truncations, info

    def stats(self) -> dict[str, Any]:
        out = {f"env{j}": rec.stats() for j, rec in self.recorders.items()}
        if self.tiled is not None:
            out["tiled"] = self.tiled.stats()
        return out

    def close(self, **kwargs) -> None:
        try:
            try:
                for j, rec in self.recorders.items():
                    if rec.recording and not rec.closed:
                        rec.end_clip(keep=self._keep(j))  # decided on its episode so far
            finally:  # a keep_if that raised: every recorder is closed all the same (its clip kept)
                for rec in [*self.recorders.values(), *([self.tiled] if self.tiled else [])]:
                    rec.close()
        finally:
            self.env.close(**kwargs)
