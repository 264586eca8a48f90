"""``to_tensorboard``: each clip written into a TensorBoard event file as an animated GIF, without moviepy.

``SummaryWriter.add_video`` (torch's and tensorboardX's) encodes the GIF
through moviepy; torch's needs ``moviepy.editor``, which moviepy 2 removed,
and then prints a line and writes nothing. This callback writes the same
summary itself: an image summary (``Summary.Image``: height, width,
colorspace, the GIF's bytes) under ``tag``, the GIF made by ffmpeg from the
clip's MP4 (``envrec.log.gif``), handed to the writer's own event file
(``writer._get_file_writer().add_summary``, what ``add_video`` itself does)
and flushed, so TensorBoard's Images tab plays it at once.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..formats.clip_meta import ClipMeta
from ..formats.ffmpeg import find_ffmpeg
from ..option_checks import BOOL, POSITIVE_NUMBER, STR, Accepts, check_options, int_in, optional
from .clip_logger import DEFAULT_SCALARS, SCALARS, STEP, TAG, ClipLogger, StepFn
from .gif import MAX_GIF_FPS, Gif, clip_gif, gif_fps

__all__ = ["TensorBoardClips", "to_tensorboard"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_FRAMES = 300  # 6 s at 50 frames/s: a CartPole GIF of that many frames is about 0.6 MB (docs/logging.md)
DEFAULT_TIMEOUT_S = 60.0  # ffmpeg making one GIF (a few tenths of a second for an RL clip)
BACKGROUND_NICE = 10  # a GIF made in the background yields the CPU to the env's loop (as the encoder's ffmpeg does)
GIF_COLORSPACE = 3  # Summary.Image's colorspace: RGB (a GIF's palette entries are RGB)

# the writer classes accepted: module -> (class, the module of the Summary protobuf its event files take)
WRITERS = {
    "torch.utils.tensorboard": ("SummaryWriter", "tensorboard.compat.proto.summary_pb2"),
    "tensorboardX": ("SummaryWriter", "tensorboardX.proto.summary_pb2"),
}

_OPTIONS = {
    "tag": TAG,
    "fps": optional(Accepts(f"a number in (0, {MAX_GIF_FPS}] (a GIF's delays are hundredths of a second)",
                            lambda v: POSITIVE_NUMBER.test(v) and v <= MAX_GIF_FPS)),
    "max_frames": int_in(1, what="a positive integer"),
    "step": STEP,
    "scalars": SCALARS,
    "ffmpeg": optional(STR),
    "timeout_s": POSITIVE_NUMBER,
    "background": BOOL,
}


def summary_module(writer: Any) -> str:
    """The protobuf module of ``writer``'s summaries; ``ConfigError`` when it is no SummaryWriter envrec knows."""
    for module, (cls, proto) in WRITERS.items():
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(writer, getattr(loaded, cls, ())):
            if not callable(getattr(writer, "_get_file_writer", None)):
                raise ConfigError(f"to_tensorboard: this {module}.{cls} has no _get_file_writer(), which its own "
                                  "add_video uses and envrec needs to write a ready summary (a newer version?)")
            return proto
    raise ConfigError(
        "to_tensorboard: writer must be a torch.utils.tensorboard.SummaryWriter or a tensorboardX.SummaryWriter, "
        f"not {type(writer).__module__}.{type(writer).__qualname__}"
    )


class TensorBoardClips(ClipLogger):
    """The callback ``to_tensorboard`` returns: each clip as an animated GIF in ``writer``'s event file.

    ``logged``, ``skipped``, ``failed`` count the clips (see ``ClipLogger``).
    """

    what = "TensorBoard"

    def __init__(self, writer: Any, tag: str, *, fps: float | None, max_frames: int, step: StepFn | None,
                 scalars: tuple[str, ...], ffmpeg: str | None, timeout_s: float, background: bool) -> None:
        self._proto = importlib.import_module(summary_module(writer))
        check_options("to_tensorboard", _OPTIONS, locals())
        super().__init__(step, scalars, background)
        self.writer = writer
        self.tag = tag
        self.fps = fps
        self.max_frames = max_frames
        self.timeout_s = timeout_s
        self.ffmpeg = find_ffmpeg(ffmpeg)[0]

    def _log(self, video_path: str, meta: ClipMeta, at: int | None) -> None:
        rate = gif_fps(_number(meta.get("fps")), _count(meta.get("frames_written")), self.fps, self.max_frames)
        gif = clip_gif(self.ffmpeg, video_path, fps=rate, max_frames=self.max_frames, crop=_crop(meta),
                       timeout_s=self.timeout_s, nice=BACKGROUND_NICE if self._background is not None else 0)
        episode = meta.get("episode_id")
        step = at if at is not None else episode if isinstance(episode, int) else self.logged
        self.writer._get_file_writer().add_summary(self.summary(gif), step)  # what add_video does (no public way)
        for key, value in self.scalar_values(meta).items():
            self.writer.add_scalar(f"{self.tag}/{key}", value, step)
        self.writer.flush()

    def summary(self, gif: Gif) -> Any:
        """The image summary TensorBoard plays as a video: ``tag`` and the GIF."""
        image = self._proto.Summary.Image(height=gif.height, width=gif.width, colorspace=GIF_COLORSPACE,
                                          encoded_image_string=gif.data)
        return self._proto.Summary(value=[self._proto.Summary.Value(tag=self.tag, image=image)])


def to_tensorboard(
    writer: Any,
    tag: str = "envrec/clip",
    *,
    fps: float | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
    step: StepFn | None = None,
    scalars: tuple[str, ...] = DEFAULT_SCALARS,
    ffmpeg: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    background: bool = True,
) -> TensorBoardClips:
    """An ``on_clip_closed`` callback logging each clip to TensorBoard as an animated GIF (Images tab).

    ``RecordVideo(env, "videos", on_clip_closed=envrec.log.to_tensorboard(writer))``.
    Works with moviepy 2 or without moviepy: ffmpeg (the one envrec encodes
    with) turns the clip's MP4 into the GIF, a few tenths of a second of CPU
    per clip, in a thread of this callback's (``background=True``) so the
    ``step()`` that reports a clip does not wait for it: call ``close()``
    before ``writer.close()`` (clips still queued at exit are logged then).
    A failure (ffmpeg, the writer) is logged as a warning and counted in
    ``failed``, never raised into your loop.

    Args:
        writer: a ``torch.utils.tensorboard.SummaryWriter`` or a ``tensorboardX.SummaryWriter``.
        tag: the summary's tag. Default ``"envrec/clip"``.
        fps: the GIF's frames per second, at most 50 (GIF delays are hundredths
            of a second; browsers slow shorter ones down). Default None: the
            clip's own (capped at 50), every frame kept.
        max_frames: at most this many frames per GIF; a longer clip is subsampled
            in time (it still plays its whole length, with fewer frames), or cut
            when its frame count is unknown. Default 300.
        step: ``step(meta) -> int``, the global step of a clip (e.g.
            ``lambda meta: model.num_timesteps``). Default None: the clip's
            ``episode_id``, or the count of clips logged before it when it has none.
        scalars: keys of the clip's metadata logged as scalars ``TAG/KEY`` at the
            same step when they hold numbers (``VideoRecorder.end_clip(extra=...)``
            writes such keys). Default ``("episode_return", "length")``.
        ffmpeg: the ffmpeg executable. Default None: found as ``RecordVideo`` finds it.
        timeout_s: ffmpeg is killed (the clip not logged, a warning) after this long. Default 60.
        background: make the GIFs in this callback's thread, in order, ffmpeg at niceness 10. Default True;
            False: inside the ``step()`` or ``reset()`` that reports the clip, which waits for it.

    Returns:
        A ``TensorBoardClips``: call it as ``callback(video_path, meta)``.

    Raises:
        ConfigError: ``writer`` is not such a SummaryWriter, a bad option (naming it), no ffmpeg found.
    """
    return TensorBoardClips(writer, tag, fps=fps, max_frames=max_frames, step=step, scalars=scalars, ffmpeg=ffmpeg,
                            timeout_s=timeout_s, background=background)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _crop(meta: ClipMeta) -> tuple[int, int] | None:
    """The frames' own size when the encoder padded them (odd sizes are padded to even ones), else None."""
    frame, encoded = meta.get("frame_size"), meta.get("encoded_size")
    if not isinstance(frame, Mapping) or not isinstance(encoded, Mapping):
        return None
    size = (_count(frame.get("width")), _count(frame.get("height")))
    if None in size or 0 in size or size == (encoded.get("width"), encoded.get("height")):
        return None
    return size  # type: ignore[return-value]  # both ints, checked above
