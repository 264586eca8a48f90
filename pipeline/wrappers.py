"""Gymnasium wrappers that record through envrec's worker processes."""

from __future__ import annotations

import os
from typing import Any, SupportsFloat

import gymnasium as gym

from .recorder import DEFAULT_RING_BYTES, TraceRecorder

__all__ = ["RecordTrace"]


class RecordTrace(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Records every reset and step of ``env`` as trace batches in ``directory``.

    The successor of gym-recording's ``TraceRecordingWrapper`` (which ignored
    its directory). For an episode of N steps the trace holds N+1 observations
    (the reset's first), N actions, rewards, terminations and truncations, and
    N+1 infos. Files are named ``openaigym.trace.<n>.<pid>.*`` unless
    ``name_prefix`` is given, so gym-recording's playback reads them as is.

    ``close()`` flushes everything, waits for the serializer and frees the
    shared memory; it then closes ``env`` as every Gymnasium wrapper does.
    A ``recorder`` passed in by the caller is the caller's: it is not closed.

    Bad values (an observation of another shape, a non-numeric reward) raise
    ``RecordError`` from ``step()``/``reset()`` after the env has stepped;
    nothing recorded before is lost. A failing worker never raises unless
    ``strict=True``: it is logged, and the recording is marked broken.
    """

    def __init__(
        self,
        env: gym.Env,
        directory: str | os.PathLike | None = None,
        *,
        name_prefix: str | None = None,
        batch_bytes: int = 5_000_000,
        ring_bytes: int = DEFAULT_RING_BYTES,
        backpressure: str = "block",
        block_timeout_s: float | None = None,
        strict: bool = False,
        start_method: str = "spawn",
        recorder: TraceRecorder | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            directory=None if directory is None else os.fspath(directory),
            name_prefix=name_prefix,
            batch_bytes=batch_bytes,
            ring_bytes=ring_bytes,
            backpressure=backpressure,
            block_timeout_s=block_timeout_s,
            strict=strict,
            start_method=start_method,
        )
        gym.Wrapper.__init__(self, env)
        if (directory is None) == (recorder is None):
            raise TypeError("RecordTrace needs exactly one of directory= or recorder=")
        self._owns_recorder = recorder is None
        if recorder is None:
            env_id = env.spec.id if env.spec is not None else None
            recorder = TraceRecorder(
                directory,
                env.observation_space,
                env.action_space,
                name_prefix=name_prefix,
                env_id=env_id,
                batch_bytes=batch_bytes,
                ring_bytes=ring_bytes,
                backpressure=backpressure,
                block_timeout_s=block_timeout_s,
                strict=strict,
                start_method=start_method,
            )
        self.recorder = recorder

    @property
    def directory(self) -> str:
        return self.recorder.directory

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.recorder.add_reset(obs, info, seed=seed, options=options)
        return obs, info

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.recorder.add_step(action, obs, reward, terminated, truncated, info)
        return obs, reward, terminated, truncated, info

    def stats(self) -> dict[str, Any]:
        """The recorder's counters (see ``TraceRecorder.stats``)."""
        return self.recorder.stats()

    def close(self) -> None:
        try:
            if self._owns_recorder:
                self.recorder.close()
        finally:
            super().close()

    def __enter__(self) -> "RecordTrace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
