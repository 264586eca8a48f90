"""The error taxonomy: misuse of a recorder's life is a ClosedError, a bad setting a ConfigError, each with
its exact class and words; TraceError is defined once."""

from __future__ import annotations

import ast
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
import envrec.errors
from envrec.contract.ring import RingWriter
from envrec.formats.ffmpeg import VideoSettings, encode_command
from envrec.formats.trace_format import check_prefix

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = [os.path.join(ROOT, top) for top in ("pipeline", "workers", "export", "viewer")]


def test_closed_error_is_a_record_error_and_public():
    assert issubclass(envrec.ClosedError, envrec.RecordError) and issubclass(envrec.ClosedError, ValueError)
    assert envrec.ClosedError is envrec.errors.ClosedError and "ClosedError" in envrec.__all__


def test_trace_recorder_used_after_close_or_stepped_before_reset(tmp_path):
    rec = envrec.TraceRecorder(tmp_path, S.Box(-1, 1, (3,)), S.Discrete(2))
    with pytest.raises(envrec.ClosedError, match=r"add_step\(\) before any add_reset\(\)"):
        rec.add_step(0, np.zeros(3, np.float32), 0.0, False, False)
    rec.add_reset(np.zeros(3, np.float32))
    rec.close()
    with pytest.raises(envrec.ClosedError, match="this serializer stream is closed"):
        rec.add_reset(np.zeros(3, np.float32))
    with pytest.raises(envrec.ClosedError, match="this serializer stream is closed"):
        rec.add_step(0, np.zeros(3, np.float32), 0.0, False, False)


def test_video_recorder_used_after_close(tmp_path):
    rec = envrec.VideoRecorder(tmp_path)
    rec.close()
    with pytest.raises(envrec.ClosedError, match="this encoder stream is closed"):
        rec.start_clip("after-close")


def test_vector_trace_stepped_after_close(tmp_path):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    env = envrec.RecordVectorTrace(envs, tmp_path)
    env.reset(seed=0)
    env.close()
    with pytest.raises(envrec.ClosedError, match="this vector serializer stream is closed"):
        env.step(np.zeros(2, np.int64))


@pytest.mark.parametrize("prefix", ["../up", "a/b", "", "x" * 201, 7])
def test_a_prefix_that_could_leave_the_folder_is_a_config_error(prefix):
    with pytest.raises(envrec.ConfigError, match="is not allowed: use letters, digits"):
        check_prefix(prefix)


def test_a_clip_name_that_could_leave_the_folder_is_a_config_error(tmp_path):
    with envrec.VideoRecorder(tmp_path) as rec, pytest.raises(envrec.ConfigError, match=r"name prefix '\.\./clip'"):
        rec.start_clip("../clip")


def test_a_ring_too_small_is_a_config_error():
    with pytest.raises(envrec.ConfigError, match="a ring needs at least 4096 bytes, not 1024"):
        RingWriter(1024)


def test_frames_of_two_channels_are_a_config_error():
    with pytest.raises(envrec.ConfigError, match="frames must have 1, 3 or 4 channels, not 2"):
        encode_command("ffmpeg", 8, 8, 2, 30.0, "/dev/null", VideoSettings())


@pytest.mark.parametrize("render_mode", [None, "human"])
def test_a_render_mode_without_frames_is_a_config_error_in_gymnasiums_words(tmp_path, render_mode):
    env = gym.make("CartPole-v1", render_mode=render_mode)
    with pytest.raises(envrec.ConfigError, match=f"Render mode is {render_mode}, which is incompatible with RecordVideo"):
        envrec.RecordVideo(env, str(tmp_path))


def test_a_vector_env_without_frames_is_a_config_error(tmp_path):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(envrec.ConfigError, match="render_mode is None: RecordVectorVideo needs"):
        envrec.RecordVectorVideo(envs, str(tmp_path))


def test_trace_error_is_defined_once_in_errors():
    """Every error class of the sources (the package, its workers, export and viewer) is in envrec.errors."""
    assert envrec.TraceError is envrec.errors.TraceError
    defined, seen = [], 0
    for top in SOURCES:
        for root, _, files in os.walk(top):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    seen += 1
                    with open(path, encoding="utf-8") as f:
                        tree = ast.parse(f.read(), path)
                    defined += [path for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name.endswith("Error")
                                and path != os.path.join(ROOT, "pipeline", "errors.py")]
    assert seen > 80 and defined == [], f"error classes defined outside envrec.errors: {defined}"
