"""Which clips are recorded and kept: the default episode schedule, and what ``keep_if`` decides on.

``capped_cubic_video_schedule`` is Gymnasium's default episode trigger,
defined here so that recording video needs nothing Gymnasium imports only
for its own encoder (``gymnasium.utils.save_video`` imports moviepy).

``keep_if`` turns "record every episode" into "keep only the interesting
ones": failures (``lambda o: o.terminated``), the best (``lambda o:
o.episode_return > 400``), the long ones. It is called in the env process
when a clip ends; a clip it refuses is deleted by the encoder worker and
counted in ``clips_discarded``. A ``keep_if`` that remembers earlier clips
(``envrec.keep.best(k)``: the k best of the run) is a ``ClipKeeper``: the
recorder attaches itself to it, so that it can discard a clip it kept earlier
(``VideoRecorder.discard_clip``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, SupportsFloat

__all__ = ["ClipDiscarder", "ClipKeeper", "EpisodeOutcome", "Evictor", "KeepIf", "OutcomeTracker", "capped_cubic_video_schedule"]


def capped_cubic_video_schedule(episode_id: int) -> bool:
    """True for episodes 0, 1, 8, 27, ..., 729 (the cubes below 1000), then every 1000th: Gymnasium's default.

    The same arithmetic as ``gymnasium.utils.save_video.capped_cubic_video_schedule``
    (the tests compare the two), without importing moviepy.
    """
    if episode_id < 1000:
        return round(episode_id ** (1.0 / 3)) ** 3 == episode_id
    return episode_id % 1000 == 0


@dataclass(frozen=True)
class EpisodeOutcome:
    """The episode a clip ends in, as far as it went: what ``RecordVideo``'s ``keep_if`` is given.

    Args:
        episode_id: the episode's number (``RecordVideo.episode_id``).
        episode_return: the sum of its rewards so far.
        length: the steps it took so far.
        terminated: the last step's ``terminated``.
        truncated: the last step's ``truncated`` (both False for a clip ended
            mid-episode, by ``video_length``, a step trigger or ``close()``).
        info: the last step's info (the reset's before any step). Default ``{}``.
        clip: the name of the clip that ends (``rl-video-episode-3``; its files are
            ``NAME.mp4`` and ``NAME.meta.json``). Default None (an outcome made by hand).
    """

    episode_id: int
    episode_return: float
    length: int
    terminated: bool
    truncated: bool
    info: dict = field(default_factory=dict)
    clip: str | None = None


KeepIf = Callable[[EpisodeOutcome], bool]


class OutcomeTracker:
    """Adds up the current episode's return and length as steps go by (two additions a step)."""

    def __init__(self) -> None:
        self.episode_id = -1
        self._return = 0.0
        self._length = 0
        self._last: tuple[bool, bool, dict] = (False, False, {})

    def reset(self, episode_id: int, info: dict) -> None:
        self.episode_id = episode_id
        self._return, self._length, self._last = 0.0, 0, (False, False, info)

    def step(self, reward: SupportsFloat, terminated: bool, truncated: bool, info: dict) -> None:
        self._return += float(reward)
        self._length += 1
        self._last = (bool(terminated), bool(truncated), info)

    def outcome(self, clip: str | None = None) -> EpisodeOutcome:
        terminated, truncated, info = self._last
        return EpisodeOutcome(self.episode_id, self._return, self._length, terminated, truncated, info, clip)


class ClipDiscarder(Protocol):
    """What a ``ClipKeeper`` is attached to: a ``VideoRecorder`` (or ``envrec.keep.any_of``, which shares one)."""

    def discard_clip(self, name: str) -> None: ...


Evictor = ClipDiscarder  # the old name, kept for one release


class ClipKeeper:
    """A ``keep_if`` with memory (``envrec.keep.best``, ``worst``, ``any_of``): it may discard clips it kept earlier.

    ``RecordVideo`` calls ``attach(recorder)`` once, before the first clip;
    the keeper then calls ``recorder.discard_clip(name)`` for a clip it no
    longer keeps. One keeper serves one recorder: attaching it to a second
    one raises ``ConfigError`` (its ranking would mix two runs).
    """

    def attach(self, discarder: ClipDiscarder) -> None:
        """Take ``discarder`` as the recorder whose clips this keeper decides on.

        Args:
            discarder: the recorder (its ``discard_clip(name)`` deletes a finished clip's files).

        Raises:
            ConfigError: this keeper is attached to another recorder already.
        """
        raise NotImplementedError

    def __call__(self, outcome: EpisodeOutcome) -> bool:
        raise NotImplementedError


def decide(keep_if: KeepIf | None, outcome: EpisodeOutcome) -> bool:
    """``keep_if``'s answer as a bool (every clip is kept without one)."""
    if keep_if is None:
        return True
    answer: Any = keep_if(outcome)
    return bool(answer)
