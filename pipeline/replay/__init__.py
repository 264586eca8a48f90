"""Replaying recorded episodes: ``verify`` that a recording reproduces (and, with ``envrec render``, render
its videos later).

The env is made again from the recorded spec (``recreate``), each selected episode (``selection``)
started from its recorded reset state and stepped through its recorded actions (``engine``), the replay
compared with the recording step by step (``compare``); the verdicts are stored beside the recording
(``verdicts``), episodes replayed in parallel by fresh interpreters or Ray tasks (``jobs``).
"""

from .render import RenderedClip, render
from .selection import select_episodes
from .verdicts import Verdict
from .verify import verify

__all__ = ["RenderedClip", "Verdict", "render", "select_episodes", "verify"]
