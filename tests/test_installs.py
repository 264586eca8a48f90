"""What a plain install needs: no moviepy for video, and env namespaces loaded as Gymnasium's plugins declare them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from envrec.clip_triggers import capped_cubic_video_schedule

pytestmark = pytest.mark.timeout(120)


def test_the_default_schedule_is_gymnasiums():
    """Episode for episode, far past the cap; moviepy is in the test extra, so Gymnasium's own can be imported here."""
    from gymnasium.utils.save_video import capped_cubic_video_schedule as gymnasiums

    episodes = range(20_001)
    ours = [e for e in episodes if capped_cubic_video_schedule(e)]
    assert ours == [e for e in episodes if gymnasiums(e)]
    assert len(ours) > 20  # the cubes and the thousands: a schedule that records nothing is not Gymnasium's


BLOCK_MOVIEPY = """
import importlib.abc, sys
class NoMoviepy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "moviepy" or name.startswith("moviepy."):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, NoMoviepy())
"""


def test_video_with_default_triggers_needs_no_moviepy(tmp_path):
    """RecordVideo and RecordVectorVideo with their default schedules, in an interpreter where moviepy cannot be imported."""
    script = BLOCK_MOVIEPY + textwrap.dedent(f"""
        import gymnasium as gym, envrec
        env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), {str(tmp_path / "v")!r})
        env.reset(seed=0)
        for _ in range(5):
            env.step(env.action_space.sample())
        env.close()
        envs = envrec.RecordVectorVideo(gym.make_vec("CartPole-v1", num_envs=2, render_mode="rgb_array"), {str(tmp_path / "vv")!r})
        envs.reset(seed=0)
        envs.step(envs.action_space.sample())
        envs.close()
        assert "moviepy" not in sys.modules
        print("ok", env.stats()["clips_finished"], envs.stats()["env0"]["clips_finished"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "1", "1"]  # episode 0 is in the schedule: one clip each
