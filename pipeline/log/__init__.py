"""``envrec.log``: ready ``on_clip_closed`` callbacks that log each clip to TensorBoard or Weights & Biases.

::

    from torch.utils.tensorboard import SummaryWriter
    env = RecordVideo(env, "videos", on_clip_closed=envrec.log.to_tensorboard(SummaryWriter("runs/ppo")))

    run = wandb.init(project="ppo")
    env = RecordVideo(env, "videos", on_clip_closed=envrec.log.to_wandb(run))

* ``to_tensorboard`` (``tensorboard_clips``): the clip as an animated GIF in an
  image summary, made by ffmpeg (``gif``), not moviepy.
* ``to_wandb`` (``wandb_clips``): the clip's MP4 as a ``wandb.Video``.
* ``ClipLogger`` (``clip_logger``): what both share: the step, the scalars,
  and failures logged as warnings, never raised into the user's loop.

Neither module imports torch, tensorboard or wandb until a callback is made
(the writer or run given is checked against the classes already loaded).
This room imports only ``envrec.formats`` and the leaves.
"""

from __future__ import annotations

from .clip_logger import ClipLogger
from .tensorboard_clips import TensorBoardClips, to_tensorboard
from .wandb_clips import WandbClips, to_wandb

__all__ = ["ClipLogger", "TensorBoardClips", "WandbClips", "to_tensorboard", "to_wandb"]
