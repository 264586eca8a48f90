"""The ``envrec`` command as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import envrec

from .support.processes import child_env
from .support.video import decode

TIMEOUT_S = 90


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "envrec", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=cwd,
        env=child_env(),
    )


def test_record_with_no_arguments_records_cartpole_into_recordings(tmp_path):
    out = run("record", "-q", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "recorded 5 episode(s)" in out.stdout and "CartPole-v1" in out.stdout
    folder = tmp_path / "recordings"
    clips = sorted(folder.glob("rl-video-*-episode-*.mp4"))
    assert len(clips) == 5 and "video: 5 clip(s)" in out.stdout
    episodes = list(envrec.TraceReader(folder))
    for clip, ep in zip(sorted(clips, key=lambda p: int(p.stem.rsplit("-", 1)[1])), episodes, strict=True):
        assert len(decode(clip, 600, 400)) == ep.length + 1  # one frame per observation
    out = run("inspect", str(folder))
    assert out.returncode == 0, out.stderr
    assert "episodes: 5" in out.stdout and "clips: 5" in out.stdout and "present and complete" in out.stdout


def test_record_options_and_inspect_finds_a_damaged_batch(tmp_path):
    folder = tmp_path / "out"
    out = run("record", "-q", "--steps", "120", "--seed", "3", "--out", str(folder), "--name-prefix", "mine", "--video-every", "0")
    assert out.returncode == 0, out.stderr
    assert "120 step(s)" in out.stdout
    bins = sorted(folder.glob("mine.ep*.bin"))
    assert bins and all(p.name.startswith("mine.") for p in folder.iterdir())
    with open(bins[0], "r+b") as f:
        f.truncate(10)
    out = run("inspect", str(folder))
    assert out.returncode == 1
    assert "10 bytes, the manifest says" in out.stderr


def test_record_commit_interval_goes_into_the_manifest(tmp_path):
    out = run("record", "-q", "--episodes", "1", "--out", str(tmp_path), "--name-prefix", "ci", "--video-every", "0",
              "--commit-interval", "none")
    assert out.returncode == 0, out.stderr
    assert envrec.TraceReader(tmp_path).manifests[0]["settings"]["commit_interval"] is None
    out = run("record", "--commit-interval", "0", "--out", str(tmp_path / "x"))
    assert out.returncode == 2 and "commit interval must be positive" in out.stderr


def test_unknown_env_and_missing_folder_are_clear_errors(tmp_path):
    out = run("record", "--env", "NoSuchEnv-v9", "--out", str(tmp_path))
    assert out.returncode == 2 and "NoSuchEnv-v9" in out.stderr
    out = run("inspect", str(tmp_path / "nothing"))
    assert out.returncode == 2 and "no trace manifest" in out.stderr


def test_inspect_finds_a_changed_byte_by_its_checksum(tmp_path):
    folder = tmp_path / "out"
    out = run("record", "-q", "--episodes", "2", "--out", str(folder), "--video-every", "0")
    assert out.returncode == 0, out.stderr
    bin_path = next(folder.glob("*.bin"))
    data = bytearray(bin_path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    bin_path.write_bytes(bytes(data))
    out = run("inspect", str(folder))
    assert out.returncode == 1 and "CRC-32 differs" in out.stderr
    with pytest.raises(envrec.TraceError, match="CRC-32"):
        envrec.TraceReader(folder)[0]
    assert envrec.TraceReader(folder, verify=False)[0].length > 0  # asked not to check: read as is


def test_record_off_a_terminal_without_a_display_prints_no_bar_and_no_sdl_noise(tmp_path):
    """stdout and stderr are pipes here (as in CI or a log file), and no display is set."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")}
    env.pop("XDG_RUNTIME_DIR", None)  # what makes SDL complain when it looks for a display
    out = subprocess.run(
        [sys.executable, "-m", "envrec", "record", "--episodes", "2", "--out", str(tmp_path / "rec")],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=child_env(env),
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr  # no progress bar, no "XDG_RUNTIME_DIR is invalid", no pygame banner
    assert "recorded 2 episode(s)" in out.stdout and "video: 2 clip(s)" in out.stdout


WRAPPED = """
import gymnasium as gym, sys, envrec
env = envrec.RecordTrace(envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), sys.argv[1] + "/v"), sys.argv[1])
env.reset(seed=0)
env.step(0)
env.close()
envrec.replay.render(sys.argv[1], "0", out=sys.argv[1] + "/later")
print("done")
"""


def test_the_wrappers_and_render_without_a_display_print_no_sdl_noise(tmp_path):
    """As the CLI: pygame draws off screen, SDL's 'XDG_RUNTIME_DIR is invalid' and pygame's banner stay out."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER", "XDG_RUNTIME_DIR")}
    env.pop("PYGAME_HIDE_SUPPORT_PROMPT", None)
    out = subprocess.run([sys.executable, "-c", WRAPPED, str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT_S,
                         env=child_env(env))
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr
    assert "XDG_RUNTIME_DIR" not in out.stderr and "pygame" not in out.stderr.lower(), out.stderr
    assert (tmp_path / "later" / "rl-video-episode-0.mp4").exists()


def test_version():
    out = subprocess.run([sys.executable, "-m", "envrec", "--version"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode == 0 and out.stdout.strip() == f"envrec {envrec.__version__}", out


@pytest.mark.timeout(120)
def test_inspect_prints_each_recordings_verify_line(tmp_path, capsys):
    """Not verified (with the command), verified by a real ``verify`` (then a diverged verdict merged in),
    and a crafted verdict file: a line saying so, never a crash."""
    import json

    from envrec.cli import main
    from envrec.replay import Verdict, verify
    from envrec.replay.verdicts import verdict_path, write_verdicts

    from .support.episodes import record_cartpole

    folder = tmp_path / "my run"
    record_cartpole(folder, 3, name_prefix="cp")

    def line():
        assert main(["inspect", str(folder)]) == 0
        return next(x.strip() for x in capsys.readouterr().out.splitlines() if "verif" in x)

    assert line() == f"not verified: envrec verify '{folder}'"
    verify(folder)
    assert line().startswith("verify: 3 reproduced, 0 diverged, 0 cannot replay (verified 20")
    write_verdicts(folder, "cp", [Verdict("cp", 1, 1, "diverged", steps=5, step=5, field="observations", where="[2]",
                                          difference=0.03)], atol=0.0, infos=False)
    assert line().startswith("verify: 2 reproduced, 1 diverged (episode 1 at step 5: observations[2]; largest difference in observations: 0.03), 0 cannot replay")
    doc = json.load(open(verdict_path(folder, "cp")))
    doc["episodes"]["1"]["step"] = "\x1b[2J17"
    open(verdict_path(folder, "cp"), "w").write(json.dumps(doc))
    out = line()
    assert out.startswith("verdict file unreadable, not shown:") and "'step'" in out and "\x1b" not in out


def test_record_render_mode_and_fps(tmp_path):
    from envrec.cli import main
    from envrec.formats.clip_meta import read_clip_meta

    out = tmp_path / "text"
    assert main(["record", "--env", "FrozenLake-v1", "--render-mode", "ansi", "--episodes", "1", "--out", str(out), "-q"]) == 0
    (meta,) = [read_clip_meta(str(out / n)) for n in os.listdir(out) if n.endswith(".meta.json")]
    assert meta["path"].endswith(".cast") and meta["content_type"] == "application/x-asciicast"
    out = tmp_path / "fps"
    assert main(["record", "--episodes", "1", "--fps", "12", "--out", str(out), "-q"]) == 0
    (meta,) = [read_clip_meta(str(out / n)) for n in os.listdir(out) if n.endswith(".meta.json")]
    assert meta["fps"] == 12
    for bad in (["--fps", "0"], ["--fps", "abc"], ["--render-mode", "human"]):
        with pytest.raises(SystemExit) as exc:
            main(["record", *bad, "--out", str(tmp_path / "bad")])
        assert exc.value.code == 2


def test_record_plays_atari_clips_in_real_time():
    """ALE's v5 envs say render_fps 30 with a frameskip of 4: real time is 60 / 4 frames a second."""
    import ale_py
    import gymnasium as gym

    from envrec.cli import clip_fps

    gym.register_envs(ale_py)
    assert clip_fps(gym.make("ALE/Pong-v5")) == 15
    assert clip_fps(gym.make("ALE/Pong-v5", frameskip=2)) == 30
    assert clip_fps(gym.make("CartPole-v1")) is None


def test_record_takes_the_simulators_snapshot_by_default():
    """envrec record records ALE's and MuJoCo's state by default, so envrec verify can reproduce them."""
    import ale_py
    import gymnasium as gym

    from envrec.cli import default_snapshot

    gym.register_envs(ale_py)
    assert default_snapshot(gym.make("ALE/Pong-v5")) == "ale"
    assert default_snapshot(gym.make("HalfCheetah-v5")) == "mujoco"
    assert default_snapshot(gym.make("CartPole-v1")) is None


@pytest.mark.slow  # an Atari recording and its replay; the default above is the quick check
def test_the_readmes_atari_command_verifies(tmp_path):
    out = str(tmp_path / "pong")
    record = run("record", "--env", "ALE/Pong-v5", "--steps", "200", "--out", out, "-q", "--video-every", "0")
    assert record.returncode == 0, record.stderr
    verify = run("verify", out)
    assert verify.returncode == 0 and "1 reproduced, 0 diverged" in verify.stdout, verify.stdout + verify.stderr


def test_record_on_an_env_that_cannot_render_says_why_and_leaves_nothing(tmp_path):
    """Headless MuJoCo with MUJOCO_GL unset: the doctor's diagnosis and fix, exit 2, no folder, no 0-frame clip."""
    env = {k: v for k, v in child_env().items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "envrec", "record", "--env", "HalfCheetah-v5", "--episodes", "1",
                           "--out", str(out), "-q"], capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot render a frame here" in proc.stderr and "MUJOCO_GL" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
