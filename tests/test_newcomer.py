"""What a new user hit (issue 36), replayed as the commands they typed: fresh processes, the base install.

The packages a case needs besides (ale-py, MuJoCo, tensorboardX, SB3) come with the test extra: a case imports its
package first, so that its absence fails the case, never skips it.

Each test runs ``envrec ...`` or a short script in a fresh interpreter, as a user would, and checks what
they see: every clip kept when two commands write into one folder, an env of the user's own module verified
with ``--import``, the doctor's fix and exit 2 for an env
that cannot render here, ansi-only envs filmed as asciicast, a clip logger that loses nothing however its
writer is closed, quiet vector sub-processes, a read-only folder named as such, install hints that work
from a clone, MuJoCo's camera as documented, and the misuses Gymnasium's API leaves open (a step after
``terminated``, a step after ``close()``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from .support.processes import child_env

TIMEOUT_S = 120
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
NO_DISPLAY = ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER", "XDG_RUNTIME_DIR")
CLIP_NAME = re.compile(r"rl-video-\d{8}-\d{6}-episode-\d+(-\d+)?\.mp4")

TEXT_ENV = '''
import gymnasium as gym


class TextOnly(gym.Env):
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, render_mode=None):
        assert render_mode is None or render_mode in self.metadata["render_modes"]  # as Gymnasium's envs do
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Discrete(10)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return self.t, 1.0, self.t >= 5, False, {}

    def render(self):
        return f"step {self.t}\\n"


gym.register("TextOnly-v0", entry_point=TextOnly)
'''


def environment(*, drop: tuple[str, ...] = (), path: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    env = {k: v for k, v in child_env().items() if k not in drop}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*path, env["PYTHONPATH"]])
    return {**env, **extra}


def envrec(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envrec", *args], capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=env or child_env(), cwd=cwd)


def script(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env or child_env())


def clip_metas(folder) -> list[dict]:
    return [json.loads((folder / n).read_text()) for n in sorted(os.listdir(folder)) if n.endswith(".meta.json")]


# -- 1. every clip kept ------------------------------------------------------------------------------------------


def test_two_envrec_record_started_at_once_keep_every_clip_each_meta_beside_its_video(tmp_path):
    """Two `envrec record` in one folder, started in the same second (their clip names carry the same timestamp):
    all clips kept, each .meta.json names its own video, and the names are the documented ones."""
    out = tmp_path / "recordings"
    time.sleep(1.2 - time.time() % 1)  # both start early in one second: their clip names' timestamps agree
    procs = [subprocess.Popen([sys.executable, "-m", "envrec", "record", "--episodes", "2", "--seed", str(seed),
                               "--out", str(out), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env()) for seed in (0, 100)]
    outputs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert not any("Overwriting" in err for _, err in outputs)
    videos = sorted(n for n in os.listdir(out) if n.endswith(".mp4"))
    metas = clip_metas(out)
    assert len(videos) == len(metas) == 4, videos  # 2 episodes of each: none overwritten
    assert all(CLIP_NAME.fullmatch(v) for v in videos), videos
    for meta in metas:
        assert meta["path"] == meta["name"] + ".mp4" and not meta["broken"] and meta["frames_written"] >= 2, meta
    by_recorder: dict[str, list[int]] = {}
    for meta in metas:
        by_recorder.setdefault(meta["recorder"], []).append(meta["episode_id"])
    assert sorted(map(sorted, by_recorder.values())) == [[0, 1], [0, 1]]  # each process's own two clips
    reference = open(os.path.join(ROOT, "docs", "reference.md")).read()
    assert "`rl-video-YYYYmmdd-HHMMSS-episode-N.mp4`" in reference  # the names are documented as they are


# -- 2. and 3. recordings that verify -----------------------------------------------------------------------------

VECTOR_SCRIPT = """
import sys
import gymnasium as gym
import envrec

mode = sys.argv[2] if sys.argv[2] != "default" else None
envs = gym.make_vec("CartPole-v1", num_envs=2, max_episode_steps=8, vectorization_mode=mode)
envs = envrec.RecordVectorTrace(envs, sys.argv[1])
envs.reset()
for _ in range(40):
    envs.step(envs.action_space.sample())
envs.close()
"""


@pytest.mark.variants
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_issues_vector_recording_verifies(tmp_path, mode):
    """The issue's make_vec(max_episode_steps=8) recording verified as 'diverged at step 8' and its autoresets
    'cannot replay': with sub-envs that can be made one by one, every episode now reproduces."""
    made = script(VECTOR_SCRIPT, str(tmp_path), mode)
    assert made.returncode == 0, made.stderr
    proc = envrec("verify", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 diverged, 0 cannot replay" in proc.stdout and "older envrec" not in proc.stdout + proc.stderr


def test_a_numpy_vectorized_recording_says_why_it_cannot_replay_and_what_would(tmp_path):
    """make_vec's default for CartPole steps all sub-envs as one array: verify says so and names the fix."""
    made = script(VECTOR_SCRIPT, str(tmp_path), "default")
    assert made.returncode == 0, made.stderr
    proc = envrec("verify", str(tmp_path))
    assert proc.returncode == 1 and "0 reproduced, 0 diverged" in proc.stdout, proc.stdout + proc.stderr
    assert "CartPoleVectorEnv steps all its sub-envs as one array" in proc.stdout
    assert "vectorization_mode='sync'" in proc.stdout and "older envrec" not in proc.stdout + proc.stderr


@pytest.mark.slow  # two Pong episodes (~1,800 steps) recorded and replayed
def test_the_readmes_atari_command_verifies(tmp_path):
    """`envrec record --env ALE/Pong-v5` then `envrec verify`: 4 of 5 episodes diverged (sticky actions); the ALE
    snapshot is now taken by default, and every episode reproduces."""
    importlib.import_module("ale_py")
    out = tmp_path / "pong"
    rec = envrec("record", "--env", "ALE/Pong-v5", "--episodes", "2", "--video-every", "0", "--out", str(out), "-q")
    assert rec.returncode == 0, rec.stderr
    proc = envrec("verify", str(out))
    assert proc.returncode == 0 and "2 reproduced" in proc.stdout, proc.stdout + proc.stderr
    assert "started from its snapshot" in proc.stdout  # the unseeded second episode


# -- 4. envs registered by the user's own module --------------------------------------------------------------------

USER_ENVS = '''
import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class UserPole(CartPoleEnv):
    pass


gym.register("UserPole-v0", entry_point=UserPole, max_episode_steps=15)  # a class, as Gymnasium's docs show
gym.register("UserPoleNamed-v0", entry_point="userenvs:UserPole", max_episode_steps=15)
'''


@pytest.mark.variants
@pytest.mark.parametrize("env_id", ["userenvs:UserPole-v0", "userenvs:UserPoleNamed-v0"])
def test_a_users_module_env_recorded_by_envrec_record_verifies_and_renders_with_import(tmp_path, env_id):
    """`envrec record --env module:Id` records the id as given and a spec (a class entry point named module:Class);
    verify and render make it again once the user names the module (--import), and say so when not; the viewer's
    render hint says which module to trust, importing nothing."""
    (tmp_path / "userenvs.py").write_text(USER_ENVS)
    out = tmp_path / "out"
    env = environment(path=(str(tmp_path),))
    rec = envrec("record", "--env", env_id, "--episodes", "3", "--video-every", "0", "--out", str(out), "-q", env=env)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    (manifest,) = [json.loads(p.read_text()) for p in out.glob("*.manifest.json")]
    assert manifest["env_id"] == env_id and manifest["env"]["spec"]["id"] == env_id
    assert manifest["env"]["spec"]["entry_point"] == "userenvs:UserPole" and manifest["env"]["spec_error"] is None

    refused = envrec("verify", str(out), env=env)
    assert refused.returncode == 1 and "pass --import userenvs if you trust that module" in refused.stdout, refused.stdout
    ok = envrec("verify", str(out), "--import", "userenvs", env=env)
    assert ok.returncode == 0 and "3 reproduced, 0 diverged, 0 cannot replay" in ok.stdout, ok.stdout + ok.stderr
    rendered = envrec("render", str(out), "--episodes", "0", "--import", "userenvs", env=env)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    assert len(list((out / "videos").glob("*.mp4"))) == 1

    from envrec.viewer.catalog import Catalog

    catalog = Catalog(str(out))
    catalog.index()
    name = manifest["prefix"]
    hint = catalog.episode(name, 1)["render_needs"]
    assert hint is not None and "add --import userenvs if you trust it" in hint
    catalog.verdicts.imports = ("userenvs",)
    assert catalog.episode(name, 1)["render_needs"] is None
    assert "userenvs" not in sys.modules  # shown, never imported


# -- 5. envs that cannot render as asked ---------------------------------------------------------------------------


def test_an_ansi_only_env_is_recorded_as_asciicast(tmp_path):
    (tmp_path / "textenv.py").write_text(TEXT_ENV)
    out = tmp_path / "out"
    env = environment(path=(str(tmp_path),))
    proc = envrec("record", "--env", "textenv:TextOnly-v0", "--episodes", "2", "--out", str(out), "-q", env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "video: 2 clip(s)" in proc.stdout and ".cast" in proc.stdout
    casts = sorted(n for n in os.listdir(out) if n.endswith(".cast"))
    assert len(casts) == 2 and not [n for n in os.listdir(out) if n.endswith(".mp4")]
    header, *events = (out / casts[0]).read_text().splitlines()
    assert json.loads(header)["version"] == 2 and "step 0" in json.loads(events[0])[2]
    assert [m["frames_written"] for m in clip_metas(out)] == [6, 6]  # the reset's frame and one per step

    refused = envrec("record", "--env", "textenv:TextOnly-v0", "--render-mode", "rgb_array", "--out",
                     str(tmp_path / "refused"), "-q", env=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert "declares the render modes ['ansi']" in refused.stderr and "fix: --render-mode ansi" in refused.stderr
    assert not (tmp_path / "refused").exists()  # nothing left behind


@pytest.mark.slow  # MuJoCo's GL probes; tests/test_cli.py's headless MuJoCo test is the quick one of this path
def test_headless_mujoco_without_mujoco_gl_gets_the_doctors_fix_and_leaves_nothing(tmp_path):
    importlib.import_module("mujoco")
    out = tmp_path / "out"
    proc = envrec("record", "--env", "HalfCheetah-v5", "--episodes", "1", "--out", str(out), "-q",
                  env=environment(drop=("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "cannot render a frame here" in proc.stderr and "MUJOCO_GL" in proc.stderr and "fix:" in proc.stderr
    assert not out.exists()  # no folder, no 0-frame .meta.json


# -- 7. a clip logger's clips, whatever the order of the closes ----------------------------------------------------


@pytest.mark.slow  # tensorboardX and a recording; tests/test_clip_callbacks.py's drain tests are the quick ones
def test_closing_the_writer_right_after_the_env_loses_no_clip(tmp_path):
    importlib.import_module("tensorboardX")
    proc = script("""
        import sys, gymnasium as gym, envrec
        from tensorboardX import SummaryWriter
        writer = SummaryWriter(sys.argv[1])
        tb = envrec.log.to_tensorboard(writer)
        env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), sys.argv[2],
                                 episode_trigger=lambda e: True, on_clip_closed=tb)
        for e in range(3):
            env.reset(seed=e)
            done = False
            while not done:
                *_, te, tr, _ = env.step(env.action_space.sample())
                done = te or tr
        env.close()
        writer.close()  # before the logger's close(): the order the docs once warned against
        print("pending", env.stats()["callbacks_pending"])
    """, str(tmp_path / "runs"), str(tmp_path / "videos"))
    assert proc.returncode == 0, proc.stderr
    assert "pending 0" in proc.stdout
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(tmp_path / "runs"), size_guidance={ea.IMAGES: 0})
    acc.Reload()
    assert sum(len(acc.Images(tag)) for tag in acc.Tags()["images"]) == 3  # every clip's GIF, none lost


# -- 8. noise and small misdirections -----------------------------------------------------------------------------


VECTOR_VIDEO = """
    import sys
    import envrec  # first, as the README says: the sub-processes inherit what it sets
    import gymnasium as gym
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async", render_mode="rgb_array")
    envs = envrec.RecordVectorVideo(envs, sys.argv[1], episode_trigger=lambda e: e == 0)
    envs.reset(seed=0)
    for _ in range(10):
        envs.step(envs.action_space.sample())
    envs.close()
"""

SB3_VIDEO = """
    import sys
    from envrec.sb3 import VecRecordVideo
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv
    if __name__ == "__main__":
        venv = make_vec_env("CartPole-v1", n_envs=2, vec_env_cls=SubprocVecEnv, env_kwargs={"render_mode": "rgb_array"})
        venv = VecRecordVideo(venv, sys.argv[1], lambda s: s == 0, video_length=10)
        venv.reset()
        for _ in range(12):
            venv.step([venv.action_space.sample() for _ in range(2)])
        venv.close()
"""


@pytest.mark.parametrize("code", [
    pytest.param(VECTOR_VIDEO, id="async-vector-env"),
    pytest.param(SB3_VIDEO, id="sb3-subproc-vec-env", marks=pytest.mark.slow),
])
def test_vector_video_sub_processes_print_no_sdl_complaint(tmp_path, code):
    if "stable_baselines3" in code:
        importlib.import_module("stable_baselines3")
    proc = script(code, str(tmp_path / "videos"), env=environment(drop=NO_DISPLAY))
    assert proc.returncode == 0, proc.stderr
    assert "XDG_RUNTIME_DIR" not in proc.stderr, proc.stderr
    assert [n for n in os.listdir(tmp_path / "videos") if n.endswith(".mp4")]


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_doctor_on_a_read_only_file_system_says_so_with_its_fix(tmp_path):
    """`envrec doctor --folder` on a read-only mount (a tmpfs mounted read-only in a user namespace of its own)."""
    if not _unshare_works():
        reason = "a read-only mount needs unshare -rm (user namespaces), which does not work here"
        if os.environ.get("CI") == "true":  # util-linux's unshare is in every Debian; CI's sandbox allows it (seen in .ci/run)
            pytest.fail(reason + ": under CI=true this is a failure")
        pytest.skip(reason)
    mount = tmp_path / "ro"
    mount.mkdir()
    command = (f"mount -t tmpfs -o ro tmpfs {mount} && {sys.executable} -m envrec doctor --only folder "
               f"--folder {mount} && echo unexpected; {sys.executable} -m envrec doctor --only folder --folder {mount}/new")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=child_env())
    assert "unexpected" not in proc.stdout and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "bug of envrec doctor" not in proc.stdout, proc.stdout
    fails = [line for line in proc.stdout.splitlines() if line.startswith("FAIL  folder:")]
    assert len(fails) == 2 and all("read-only file system" in line for line in fails), proc.stdout
    assert proc.stdout.count(f"mount -o remount,rw {mount}") == 2


def test_a_missing_extras_hint_works_from_a_clone(tmp_path):
    """`envrec record --env ALE/Pong-v5` without ale-py: the hint names ale-py, then the extra from this clone."""
    (tmp_path / "ale_py.py").write_text("raise ModuleNotFoundError(\"No module named 'ale_py'\", name='ale_py')\n")
    proc = envrec("record", "--env", "ALE/Pong-v5", "--out", str(tmp_path / "out"), "-q",
                  env=environment(path=(str(tmp_path),)))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "pip install 'ale-py>=" in proc.stderr and "envrec's atari extra" in proc.stderr, proc.stderr
    from envrec.extras import installed_from

    how, where = installed_from()
    if how == "editable":  # a clone's checkout (the development setup): its folder, not an index's envrec
        assert f"pip install -e '{where}[atari]'" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # ALE's first reset and a short recording; tests/test_cli.py checks clip_fps quickly
def test_atari_clips_play_in_real_time(tmp_path):
    importlib.import_module("ale_py")
    proc = envrec("record", "--env", "ALE/Pong-v5", "--steps", "20", "--out", str(tmp_path), "-q", "--snapshot", "none")
    assert proc.returncode == 0, proc.stderr
    assert [m["fps"] for m in clip_metas(tmp_path)] == [15]  # 60 / frameskip 4, not ale-py 0.12's render_fps of 30


def test_mujoco_aims_its_camera_once_per_env_as_documented(tmp_path):
    """The README and docs/replay.md say why HalfCheetah's live clips after the first differ from envrec render's:
    Gymnasium's MuJoCo renderer aims its camera at the first render and keeps it. This checks the env still does."""
    importlib.import_module("mujoco")
    from .support.headless_gl import need_headless_gl

    backend = need_headless_gl()
    proc = script("""
        import numpy as np, gymnasium as gym
        def render_at(env, seed):
            env.reset(seed=seed)
            return env.render(), env.unwrapped.mujoco_renderer._get_viewer("rgb_array").cam.lookat.copy()
        live = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=96, height=64)
        _, first = render_at(live, 0)
        for _ in range(100):
            live.step(live.action_space.sample())
        frame, kept = render_at(live, 1)
        fresh = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=96, height=64)
        fresh_frame, aimed = render_at(fresh, 1)
        print(np.array_equal(first, kept), np.array_equal(kept, aimed), np.array_equal(frame, fresh_frame))
    """, env=environment(MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "False"], proc.stdout  # kept across episodes; a fresh env aims anew


def test_a_step_after_terminated_is_warned_and_counted_and_a_step_after_close_raises(tmp_path):
    proc = script("""
        import sys, gymnasium as gym, envrec
        env = envrec.RecordTrace(gym.make("CartPole-v1"), sys.argv[1] + "/trace")
        env.reset(seed=0)
        done = False
        while not done:
            *_, te, tr, _ = env.step(0)
            done = te or tr
        env.step(0)
        env.step(0)  # two steps after the episode ended, no reset
        print("steps_after_end", env.stats()["steps_after_end"])
        env.close()
        video = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), sys.argv[1] + "/videos")
        video.reset(seed=0)
        video.close()
        try:
            video.step(0)
        except envrec.ClosedError as exc:
            print("ClosedError", exc)
    """, str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "steps_after_end 2" in proc.stdout and proc.stderr.count("without reset()") == 1, proc.stdout + proc.stderr
    assert "ClosedError RecordVideo.step() after close()" in proc.stdout, proc.stdout
