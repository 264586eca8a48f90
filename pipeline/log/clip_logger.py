"""``ClipLogger``: what the ready ``on_clip_closed`` callbacks share.

Which clips are logged (those with an MP4: a clip with no playable file, or
an asciicast of an ``ansi`` env, is skipped), at which step, which metadata
keys go along as scalars, and the rule that a logging failure never reaches
the user's loop: the callback runs inside ``step()``/``reset()``/``close()``,
so whatever the logger, the network or ffmpeg raises is logged as a warning
(the first with its traceback) and counted, and the loop goes on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..formats.clip_meta import ClipMeta
from ..option_checks import CALLABLE, Accepts, optional
from .background import Background

__all__ = ["DEFAULT_SCALARS", "SCALARS", "STEP", "TAG", "ClipLogger", "StepFn"]

logger = logging.getLogger(__name__)

StepFn = Callable[[ClipMeta], int]  # the step a clip is logged at, from its metadata

# Keys of a clip's metadata logged as scalars beside it when they hold numbers (``end_clip(extra=...)`` writes such
# keys; the names are ``EpisodeOutcome``'s).
DEFAULT_SCALARS = ("episode_return", "length")

STEP = optional(CALLABLE)
SCALARS = Accepts("a tuple of metadata keys (strings)",
                  lambda v: isinstance(v, tuple | list) and all(isinstance(k, str) and k for k in v))
TAG = Accepts("a non-empty string", lambda v: isinstance(v, str) and bool(v))


class ClipLogger:
    """An ``on_clip_closed`` callback, ``callback(video_path, meta)``, that logs each clip somewhere.

    Subclasses say where (``_log``). ``logged``, ``skipped`` and ``failed``
    count the clips; a failure is logged as a warning, never raised. With
    ``background=True`` the clips are logged in order by a thread of the
    logger's (``envrec.log.background``): the call returns at once.
    """

    what = "the logger"  # where clips go, for messages

    def __init__(self, step: StepFn | None, scalars: tuple[str, ...] | list[str], background: bool = False) -> None:
        self.step = step
        self.scalars = tuple(scalars)
        self.logged = 0  # clips logged
        self.skipped = 0  # clips with nothing to log (no playable file, or text)
        self.failed = 0  # clips whose logging failed (a warning said why)
        self._background = Background(f"envrec-log-{type(self).__name__}", self._log_item) if background else None

    def __call__(self, video_path: str | None, meta: ClipMeta) -> None:
        """Log one clip (``on_clip_closed``'s signature), or hand it to the logger's thread; never raises.

        Args:
            video_path: the clip's file; None for a clip with no playable file (it is skipped).
            meta: the clip's metadata (its ``.meta.json``).
        """
        try:
            at = self._step_now(meta)  # now, in the caller's thread: step(meta) may read the trainer's counter
        except Exception as exc:  # noqa: BLE001  (the user's step function failed: a warning, as any failure)
            self._failed(meta, video_path, exc)
            return
        if self._background is not None and self._background.submit((video_path, meta, at)):
            return
        self.log_now(video_path, meta, at)

    @property
    def pending(self) -> int:
        """Clips handed to the logger's thread and not yet logged (0 without one)."""
        return self._background.pending if self._background is not None else 0

    def close(self, timeout_s: float | None = None) -> bool:
        """Wait for the clips still being logged in the background, then stop its thread (harmless when repeated).

        Call it before closing the writer. Later clips are logged in the caller's thread.

        Args:
            timeout_s: how long to wait; None: until they are done.

        Returns:
            True when no clip is left pending.
        """
        return self._background.close(timeout_s) if self._background is not None else True

    def _log_item(self, item: tuple[str | None, ClipMeta, int | None]) -> None:
        self.log_now(*item)

    def log_now(self, video_path: str | None, meta: ClipMeta, at: int | None = None) -> None:
        """Log one clip in this thread (what ``__call__`` does without a background thread); never raises.

        Args:
            video_path: the clip's file, or None.
            meta: the clip's metadata.
            at: the step ``step(meta)`` gave when the clip was reported; None: the logger's default.
        """
        try:
            if not self._loggable(video_path, meta):
                self.skipped += 1
                return
            assert video_path is not None
            self._log(os.fspath(video_path), meta, at)
        except Exception as exc:  # noqa: BLE001  (whatever the logger raises must not end the user's loop)
            self._failed(meta, video_path, exc)
        else:
            self.logged += 1

    def _failed(self, meta: Any, video_path: str | None, exc: Exception) -> None:
        self.failed += 1
        name = meta.get("name", video_path) if isinstance(meta, Mapping) else video_path
        logger.warning("envrec.log: clip %s was not logged to %s: %s: %s", name, self.what, type(exc).__name__, exc,
                       exc_info=(type(exc), exc, exc.__traceback__) if self.failed == 1 else None)

    def _loggable(self, video_path: str | None, meta: Any) -> bool:
        if not isinstance(meta, Mapping):
            raise TypeError(f"meta must be the clip's metadata (a dict), not {type(meta).__name__}")
        if video_path is None:
            logger.debug("envrec.log: clip %s has no playable file (%s): not logged", meta.get("name"), meta.get("reason"))
            return False
        if meta.get("content_type", "video/mp4") != "video/mp4":
            logger.debug("envrec.log: clip %s is %s, not a video: not logged", meta.get("name"), meta.get("content_type"))
            return False
        return True

    def _log(self, video_path: str, meta: ClipMeta, at: int | None) -> None:
        """Log the clip at step ``at`` (None: the logger's default step)."""
        raise NotImplementedError

    def _step_now(self, meta: ClipMeta) -> int | None:
        """``step(meta)`` when given (an integer, checked), else None."""
        if self.step is None:
            return None
        value = self.step(meta)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"step(meta) must return an integer, not {value!r}")
        return value

    def scalar_values(self, meta: ClipMeta) -> dict[str, float]:
        """The metadata keys of ``scalars`` that hold numbers, as floats."""
        found = {}
        for key in self.scalars:
            value = meta.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                found[key] = float(value)
        return found

    def __repr__(self) -> str:
        return f"<{type(self).__name__} logged={self.logged} skipped={self.skipped} failed={self.failed}>"
