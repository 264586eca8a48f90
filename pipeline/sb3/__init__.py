"""Recording Stable-Baselines3 VecEnvs (``pip install 'envrec[sb3]'``).

``VecRecordTrace(venv, directory, **options)`` records a trace per sub-env of
any SB3 ``VecEnv``, SB3's autoreset followed (``envrec.sb3.trace``, through
``envrec.sb3.adapter``); ``VecRecordVideo(venv, video_folder,
record_video_trigger, video_length=200, name_prefix="rl-video")`` is SB3's
``VecVideoRecorder`` with the frames encoded in a worker (``envrec.sb3.video``).
"""

from __future__ import annotations

from . import adapter  # noqa: F401  (first: without Stable-Baselines3 it names the extra to install)
from .trace import VecRecordTrace
from .video import VecRecordVideo

__all__ = ["VecRecordTrace", "VecRecordVideo"]
