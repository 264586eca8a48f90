"""``to_wandb``: each clip logged to a Weights & Biases run as a ``wandb.Video`` of its MP4.

A ``wandb.Video`` made from a file path needs neither moviepy nor a
re-encode: W&B copies the MP4 into the run's media folder
(``files/media/videos/``, in offline mode too) and its player plays it.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

from ..errors import ConfigError
from ..formats.clip_meta import ClipMeta
from ..option_checks import check_options
from .clip_logger import DEFAULT_SCALARS, SCALARS, STEP, TAG, ClipLogger, StepFn

__all__ = ["WandbClips", "to_wandb"]

logger = logging.getLogger(__name__)

_OPTIONS = {"key": TAG, "step": STEP, "scalars": SCALARS}


def check_run(run: Any) -> None:
    """``ConfigError`` unless ``run`` is a ``wandb`` run (what ``wandb.init()`` returns)."""
    wandb = sys.modules.get("wandb")
    run_class = getattr(wandb, "Run", None) or getattr(getattr(getattr(wandb, "sdk", None), "wandb_run", None), "Run", None)
    if run_class is None or not isinstance(run, run_class):
        raise ConfigError(
            "to_wandb: run must be a wandb run (run = wandb.init(...)), "
            f"not {type(run).__module__}.{type(run).__qualname__}"
        )


class WandbClips(ClipLogger):
    """The callback ``to_wandb`` returns: each clip as ``run.log({key: wandb.Video(path), ...})``.

    ``logged``, ``skipped``, ``failed`` count the clips (see ``ClipLogger``).
    """

    what = "W&B"

    def __init__(self, run: Any, key: str, *, step: StepFn | None, scalars: tuple[str, ...]) -> None:
        check_run(run)
        check_options("to_wandb", _OPTIONS, locals())
        super().__init__(step, scalars)
        self.run = run
        self.key = key

    def _log(self, video_path: str, meta: ClipMeta, at: int | None) -> None:
        wandb = importlib.import_module("wandb")
        data: dict[str, Any] = {self.key: wandb.Video(video_path, caption=meta.get("name"), format="mp4")}
        episode = meta.get("episode_id")
        if isinstance(episode, int) and not isinstance(episode, bool):
            data[f"{self.key}/episode"] = episode
        data.update({f"{self.key}/{k}": v for k, v in self.scalar_values(meta).items()})
        if at is None:
            self.run.log(data)
            return
        current = getattr(self.run, "step", None)
        if isinstance(current, int) and at < current:  # W&B would drop it with a warning of its own
            raise ValueError(f"step {at} is below the run's current step {current}; W&B keeps only increasing steps")
        self.run.log(data, step=at)


def to_wandb(
    run: Any,
    key: str = "video",
    *,
    step: StepFn | None = None,
    scalars: tuple[str, ...] = DEFAULT_SCALARS,
) -> WandbClips:
    """An ``on_clip_closed`` callback logging each clip to a W&B run as a ``wandb.Video``.

    ``RecordVideo(env, "videos", on_clip_closed=envrec.log.to_wandb(run))``. One
    ``run.log`` per clip, with ``KEY`` (the video, captioned with the clip's
    name), ``KEY/episode`` (its ``episode_id``) and ``KEY/NAME`` for each of
    ``scalars`` the clip's metadata holds as a number. Works offline
    (``WANDB_MODE=offline``) and with or without moviepy. A failure (a
    finished run, the network) is logged as a warning and counted in
    ``failed``, never raised into your loop.

    Args:
        run: the run, ``wandb.init(...)``'s result.
        key: the video's key in the run's history. Default ``"video"``.
        step: ``step(meta) -> int``, the step to log a clip at (e.g.
            ``lambda meta: model.num_timesteps``); W&B keeps only steps that
            never go down: a clip whose step is below the run's is not logged
            (a warning). Default None: W&B's own step (each clip's
            ``run.log`` advances it, as ``wandb.log`` does).
        scalars: keys of the clip's metadata logged beside it when they hold
            numbers. Default ``("episode_return", "length")``.

    Returns:
        A ``WandbClips``: call it as ``callback(video_path, meta)``.

    Raises:
        ConfigError: ``run`` is not a wandb run, or a bad option (naming it).
    """
    return WandbClips(run, key, step=step, scalars=scalars)
