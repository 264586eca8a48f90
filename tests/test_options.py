"""StreamOptions: one set of defaults, taken as an object or as keywords by every recorder and wrapper."""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest

import envrec
from envrec.errors import ConfigError
from envrec.options import StreamOptions

from .video_helpers import ColourEnv


def test_every_recorder_takes_options_as_an_object_or_by_name(tmp_path):
    opts = StreamOptions(ring_bytes=1 << 20, backpressure="drop", max_restarts=1, timing=False)
    with envrec.TraceRecorder(tmp_path / "a", gym.spaces.Discrete(2), gym.spaces.Discrete(2), options=opts) as rec:
        s = rec.stats()
        assert s["ring_bytes"] == 1 << 20 and "calls" not in s and rec._stream.backpressure == "drop"
        assert rec._stream.max_restarts == 1
    env = envrec.RecordTrace(gym.make("CartPole-v1"), tmp_path / "b", options=opts, ring_bytes=2 << 20, strict=True)
    assert env.recorder._stream.ring_bytes == 2 << 20 and env.recorder._stream.strict  # keywords win
    assert env.recorder._stream.backpressure == "drop"
    env.close()
    video = envrec.RecordVideo(ColourEnv(), str(tmp_path / "c"), options=opts, hang_timeout_s=30.0)
    assert video.recorder._stream.ring_bytes == 1 << 20 and video.recorder._stream.hang_timeout_s == 30.0
    assert video.recorder.max_restarts == 1 and video.recorder.times is None
    video.close()
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    venv = envrec.RecordVectorTrace(vec, tmp_path / "d", block_timeout_s=2.0)
    assert venv._stream.block_timeout_s == 2.0 and venv._stream.ring_bytes == 64 << 20  # the trace default
    venv.close()


def test_defaults_are_defined_once():
    """No recorder or wrapper re-declares a stream option in its signature (they forward them by name)."""
    names = {"ring_bytes", "backpressure", "block_timeout_s", "strict", "close_timeout_s", "max_restarts", "hang_timeout_s", "timing"}
    for cls in (envrec.TraceRecorder, envrec.VideoRecorder, envrec.RecordTrace, envrec.RecordVideo, envrec.RecordVectorTrace):
        params = inspect.signature(cls.__init__).parameters
        assert not names & set(params), (cls.__name__, names & set(params))
        assert "options" in params and any(p.kind is p.VAR_KEYWORD for p in params.values())


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"backpressure": "wait"}, ConfigError, "backpressure must be one of"),
        ({"ring_bytes": 0}, ConfigError, "ring_bytes must be a positive"),
        ({"block_timeout_s": -1}, ConfigError, "block_timeout_s must be positive"),
        ({"max_restarts": -1}, ConfigError, "max_restarts"),
        ({"ring_size": 5}, TypeError, "unexpected keyword argument.*ring_size.*stream options are"),
    ],
)
def test_bad_options_are_clear_errors(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        envrec.TraceRecorder(tmp_path, gym.spaces.Discrete(2), gym.spaces.Discrete(2), **kwargs)
