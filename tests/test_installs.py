"""What a plain install needs: no moviepy for video, and env namespaces loaded as Gymnasium's plugins declare them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from envrec.record.clip_triggers import capped_cubic_video_schedule

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


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


def _envrec(*args: str, env: dict | None = None, timeout: float = 100) -> subprocess.CompletedProcess:
    code = "import sys; from envrec.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_record_loads_the_ale_namespace(tmp_path):
    """"Namespace ALE not found" was what `envrec record` said with ale-py installed (bench registered it, record did not)."""
    out = _envrec("record", "--env", "ALE/Pong-v5", "--steps", "20", "--video-every", "0", "--out", str(tmp_path), "-q")
    assert out.returncode == 0, out.stderr
    assert "recorded 1 episode(s), 20 step(s) of ALE/Pong-v5" in out.stdout


def test_a_missing_namespace_package_is_named(tmp_path):
    blocked = "import sys; sys.modules['ale_py'] = None; from envrec.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", blocked, "record", "--env", "ALE/Pong-v5", "--steps", "2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "Namespace ALE not found" in out.stderr and "pip install 'ale-py>=" in out.stderr
    assert "envrec's atari extra" in out.stderr and "[atari]'" in out.stderr  # and the extra, from where envrec came


def test_record_and_bench_load_plugin_namespaces(tmp_path):
    """A package declaring Gymnasium's `gymnasium.envs` entry point (as shimmy does) is loaded for its namespace's ids."""
    site = tmp_path / "site"
    (site / "toyplugin-1.0.dist-info").mkdir(parents=True)
    (site / "toyplugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugin\nVersion: 1.0\n")
    (site / "toyplugin-1.0.dist-info" / "entry_points.txt").write_text("[gymnasium.envs]\nToy = toyplugin:register\n")
    (site / "toyplugin.py").write_text(textwrap.dedent("""
        import gymnasium as gym
        def register():
            gym.register("Toy/Cart-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=7)
    """))
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *sys.path]))
    out = _envrec("record", "--env", "Toy/Cart-v0", "--episodes", "2", "--video-every", "0", "--out", str(tmp_path / "r"), "-q", env=env)
    assert out.returncode == 0, out.stderr
    assert "recorded 2 episode(s), 14 step(s) of Toy/Cart-v0" in out.stdout  # max_episode_steps=7: the plugin's registration
    out = _envrec("bench", "--env", "Toy/Cart-v0", "--variants", "none", "--rounds", "1", "--seconds", "0.2", "--json", env=env)
    assert out.returncode == 0, out.stderr
    out = _envrec("record", "--env", "Toy/Cart-v0", "--steps", "2", "--out", str(tmp_path / "s"))  # no plugin on the path
    assert out.returncode == 2 and "Namespace Toy not found" in out.stderr
