"""StreamOptions: one set of defaults, taken as an object or as keywords by every recorder and wrapper."""

from __future__ import annotations

import inspect

import gymnasium as gym
import numpy as np
import pytest

import envrec
from envrec.errors import ConfigError
from envrec.options import StreamOptions

from .support.envs import ColourEnv


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


def _build(kind: str, folder, **kwargs):
    """The recorder or wrapper ``kind`` with ``kwargs``, in a folder that does not exist yet."""
    folder = str(folder)
    if kind == "trace":
        return envrec.TraceRecorder(folder, gym.spaces.Discrete(2), gym.spaces.Discrete(2), **kwargs)
    if kind == "record_trace":
        return envrec.RecordTrace(gym.make("CartPole-v1"), folder, **kwargs)
    if kind == "video_recorder":
        return envrec.VideoRecorder(folder, **kwargs)
    if kind == "video":
        return envrec.RecordVideo(ColourEnv(), kwargs.pop("video_folder", folder), **kwargs)
    if kind == "settings":
        return envrec.RecordVideo(ColourEnv(), folder, settings=envrec.VideoSettings(**kwargs))
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", render_mode="rgb_array")] * 2)
    if kind == "vector_trace":
        return envrec.RecordVectorTrace(vec, folder, **kwargs)
    return envrec.RecordVectorVideo(vec, folder, **kwargs)


# (where, option, a bad value): every option, each kind of wrong (type, range, bool for int, truthy strings, callables)
BAD = [
    *[("trace", "batch_bytes", v) for v in ("5MB", 1.5, 1000.0, True, 0, -5, None)],
    *[("trace", "max_bytes", v) for v in ("20G", 2.5e7, True, 0)],
    *[("trace", "name_prefix", v) for v in ("a/b", "..", 5, "")],
    *[("trace", "on_batch_committed", v) for v in (3, "print")],
    *[("trace", "env_id", v) for v in (5,)],
    *[("trace", "ring_bytes", v) for v in (1.5, "64M", 0, True)],
    *[("trace", "backpressure", v) for v in ("wait", None, 1)],
    *[("trace", "block_timeout_s", v) for v in (-1, 0, "1", float("nan"), float("inf"), True)],
    *[("trace", "strict", v) for v in ("yes", "no", 1, None)],
    *[("trace", "close_timeout_s", v) for v in (0, None, "60")],
    *[("trace", "max_restarts", v) for v in (-1, 1.0, True, "3")],
    *[("trace", "hang_timeout_s", v) for v in ("x", 0, -1.0)],
    *[("trace", "timing", v) for v in ("no", 0, "False")],
    *[("record_trace", o, v) for o, v in (("batch_bytes", "5MB"), ("strict", "yes"), ("timing", "no"), ("hang_timeout_s", "x"))],
    *[("video_recorder", "fps", v) for v in ("fast", 0, -30, True, float("nan"), None)],
    *[("video_recorder", o, v) for o, v in (("keep_last_clips", 0), ("keep_last_clips", 2.0), ("max_bytes", "5G"),
                                            ("on_clip_closed", 1), ("settings", {"preset": "fast"}), ("ffmpeg", 5))],
    *[("video", "fps", v) for v in ("fast", 0, True)],
    *[("video", "video_length", v) for v in (-1, 2.5, "10", True)],
    *[("video", o, v) for o in ("episode_trigger", "step_trigger", "gc_trigger", "keep_if", "on_clip_closed") for v in (5, "yes")],
    *[("video", "disable_logger", v) for v in ("no", 1)],
    *[("video", "name_prefix", v) for v in ("../up", None)],
    *[("video", o, v) for o, v in (("video_folder", 5), ("strict", "yes"), ("timing", "no"), ("hang_timeout_s", "x"),
                                   ("max_bytes", 1.5), ("keep_last_clips", -1))],
    *[("settings", o, v) for o, v in (("crf", "high"), ("crf", 64), ("threads", -1), ("threads", 1.0), ("nice", 40),
                                      ("faststart", "no"), ("zero_copy", 1), ("keyframe_interval_s", 0), ("extra_args", "-an"),
                                      ("extra_args", ("-an", 3)), ("stall_timeout_s", "10"), ("codec", None), ("preset", 5),
                                      ("pix_fmt", 420), ("scaler", None), ("filter_threads", True))],
    *[("vector_trace", o, v) for o, v in (("batch_bytes", 1.5), ("name_prefix", "a/b"), ("strict", "yes"), ("max_bytes", "1G"))],
    *[("vector_video", o, v) for o, v in (("video_length", -1), ("episode_trigger", 5), ("tiled_step_trigger", "x"),
                                          ("tiled_length", 0), ("sub_envs", "0"), ("sub_envs", (0.0,)), ("fps", "fast"),
                                          ("name_prefix", "a/b"), ("keep_last_clips", 0))],
]


@pytest.mark.parametrize("where, option, value", BAD, ids=[f"{w}-{o}={v!r}" for w, o, v in BAD])
def test_a_bad_option_is_a_config_error_naming_it_before_anything_starts(tmp_path, where, option, value):
    with pytest.raises(ConfigError, match=rf"\b{option} must be \S") as raised:
        _build(where, tmp_path / "out", **{option: value})
    assert repr(value) in str(raised.value)  # what it got, after what it accepts
    assert not (tmp_path / "out").exists()  # refused before a folder, a ring or a worker exists


def test_the_issues_cases_are_refused_at_construction(tmp_path):
    """The cases of issue 21 as users met them: a raw TypeError, accepted silently, or refused only at the first reset."""
    cases = [("trace", "batch_bytes", "5MB"), ("trace", "hang_timeout_s", "x"), ("video", "fps", "fast"),
             ("trace", "batch_bytes", 1.5), ("trace", "strict", "yes"), ("trace", "timing", "no"),
             ("video", "video_length", -1), ("video", "episode_trigger", 5)]
    for where, option, value in cases:
        with pytest.raises(ConfigError, match=rf"{option} must be"):
            _build(where, tmp_path / "out", **{option: value})


def test_a_message_says_what_the_option_accepts(tmp_path):
    with pytest.raises(ConfigError) as raised:
        _build("trace", tmp_path, batch_bytes="5MB")
    assert str(raised.value) == "TraceRecorder: batch_bytes must be a positive integer, not '5MB'"
    with pytest.raises(ConfigError, match=r"RecordVideo: fps must be a positive number or None, not 'fast'"):
        _build("video", tmp_path, fps="fast")
    with pytest.raises(ConfigError, match=r"StreamOptions: backpressure must be one of 'block', 'drop', not 'wait'"):
        StreamOptions(backpressure="wait")
    with pytest.raises(ConfigError, match=r"VideoSettings: crf must be a number in \[0, 63\] or None, not 64"):
        envrec.VideoSettings(crf=64)
    with pytest.raises(ConfigError, match="options must be a StreamOptions or None"):
        _build("trace", tmp_path, options={"strict": True})
    with pytest.raises(TypeError, match="unexpected keyword argument.*ring_size.*stream options are"):
        _build("trace", tmp_path, ring_size=5)


# Good values, at the edges of what each option accepts: they still build (and record, for the wrappers).
GOOD = [
    ("trace", {"batch_bytes": 1, "max_bytes": 2, "name_prefix": "a.b_c-1", "on_batch_committed": print, "env_id": "X-v0"}),
    ("trace", {"ring_bytes": 1 << 20, "backpressure": "drop", "block_timeout_s": 0.5, "strict": True, "close_timeout_s": 1,
               "max_restarts": 0, "hang_timeout_s": None, "timing": False}),
    ("trace", {"block_timeout_s": 2, "hang_timeout_s": np.float64(30.0), "compression": "zstd:1"}),
    ("video_recorder", {"fps": 0.5, "keep_last_clips": 1, "max_bytes": 1, "settings": None, "on_clip_closed": None}),
    ("video", {"video_length": 0, "episode_trigger": lambda e: True, "fps": 12.5, "disable_logger": False,
               "keep_if": lambda o: True, "gc_trigger": None, "name_prefix": "clip"}),
    ("video", {"step_trigger": lambda s: s == 2, "video_length": 3, "fps": None}),
    ("settings", {"crf": 0, "threads": 0, "nice": -20, "faststart": False, "zero_copy": False, "keyframe_interval_s": 0.25,
                  "extra_args": ["-tune", "zerolatency"], "preset": None, "scaler": "", "filter_threads": 0}),
    ("settings", {"crf": 23.5, "nice": 19}),
    ("vector_trace", {"batch_bytes": 1000, "name_prefix": "v"}),
    ("vector_video", {"sub_envs": [0, 1], "video_length": 2, "tiled_step_trigger": lambda s: s == 1, "tiled_length": 1}),
]


@pytest.mark.parametrize("where, kwargs", GOOD, ids=[f"{w}-{i}" for i, (w, _) in enumerate(GOOD)])
def test_good_values_still_work(tmp_path, where, kwargs):
    rec = _build(where, tmp_path / "out", **kwargs)
    try:
        if hasattr(rec, "step"):  # a wrapper: a few steps through it
            rec.reset(seed=0)
            for _ in range(3):
                rec.step(rec.action_space.sample())
    finally:
        rec.close()
