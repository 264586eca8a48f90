"""envrec.sb3 with real Stable-Baselines3: VecRecordTrace's traces equal per-env RecordTraces recorded in the same run
(DummyVecEnv, SubprocVecEnv, VecNormalize), a real PPO's num_timesteps equal the steps recorded, and VecRecordVideo
writes the clips SB3's VecVideoRecorder writes, under the same names, with as many frames of the same size."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import imageio_ffmpeg
import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize, VecVideoRecorder

import envrec
from envrec.sb3 import VecRecordTrace, VecRecordVideo

from .support.video import meta

N_ENVS = 2
STEPS = 150
MAX_STEPS = 25  # short episodes: both terminations (the pole falls) and truncations (the time limit) occur


class InfoTag(gym.Wrapper):
    """Puts a step counter in every step's info and the episode's number in every reset's, so infos can be compared."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.episodes, self.steps = 0, 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.episodes += 1
        return obs, {**info, "episode_no": self.episodes, "options_seen": kwargs.get("options")}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, reward, terminated, truncated, {**info, "t": self.steps}


class DictObs(gym.ObservationWrapper):
    """CartPole's observation as a Dict space (SB3's MultiInputPolicy kind): positions and velocities."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = gym.spaces.Dict(
            {"pos": gym.spaces.Box(low[::2], high[::2]), "vel": gym.spaces.Box(low[1::2], high[1::2])})

    def observation(self, observation):
        return {"pos": observation[::2], "vel": observation[1::2]}


class MakeEnv:
    """A picklable make_env (SubprocVecEnv): CartPole with tagged infos, optionally recorded inside by RecordTrace."""

    def __init__(self, i: int, inner: str | None = None, render_mode: str | None = None, dict_obs: bool = False) -> None:
        self.i, self.inner, self.render_mode, self.dict_obs = i, inner, render_mode, dict_obs

    def __call__(self) -> gym.Env:
        env: gym.Env = InfoTag(gym.make("CartPole-v1", max_episode_steps=MAX_STEPS, render_mode=self.render_mode))
        if self.dict_obs:
            env = DictObs(env)
        if self.inner is not None:
            env = envrec.RecordTrace(env, self.inner, name_prefix=f"inner{self.i}")
        return env


def drive(venv, steps: int = STEPS, seed: int = 7) -> list:
    """Seeded resets with options, then random actions; what the agent was given at each episode's end."""
    venv.seed(seed)
    venv.set_options({"note": "first"})
    venv.reset()
    rng = np.random.default_rng(seed)
    terminal = []
    for _ in range(steps):
        venv.step_async(rng.integers(0, 2, venv.num_envs))
        _, _, dones, infos = venv.step_wait()
        terminal += [(i, infos[i]["terminal_observation"]) for i in np.flatnonzero(dones)]
    return terminal


def episodes(folder, prefix) -> list:
    return list(envrec.TraceReader(folder, prefix=prefix))


def as_bytes(obs) -> bytes:
    """An observation (or a batch of them) as bytes; a Dict's key by key."""
    if isinstance(obs, dict):
        return b"".join(as_bytes(obs[k]) for k in sorted(obs))
    return np.asarray(obs).tobytes()


def assert_same_episodes(outer: list, inner: list) -> None:
    """What VecRecordTrace recorded of a sub-env is what a RecordTrace inside its make_env recorded."""
    assert [e.length for e in outer] == [e.length for e in inner]
    for o, i in zip(outer, inner, strict=True):
        assert as_bytes(o.observations) == as_bytes(i.observations)
        assert o.actions.tolist() == i.actions.tolist()
        assert o.rewards.tolist() == i.rewards.tolist()
        assert o.terminations.tolist() == i.terminations.tolist()
        # SB3 says TimeLimit.truncated only when the episode did not also terminate: the one thing it loses
        assert o.truncations.tolist() == (i.truncations & ~i.terminations).tolist()
        assert (o.seed, o.options) == (i.seed, i.options)
        assert o.infos == i.infos
    assert sum(e.terminations.any() for e in outer) and sum(e.truncations.any() for e in outer)  # both kinds of end


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["dummy", pytest.param("subproc", marks=pytest.mark.slow), "dummy-dict"])
def test_trace_equals_record_trace_inside_each_make_env(tmp_path, kind):
    """The same run recorded twice: by VecRecordTrace around the VecEnv and by a RecordTrace inside each sub-env."""
    fns = [MakeEnv(i, str(tmp_path / "inner"), dict_obs=kind.endswith("dict")) for i in range(N_ENVS)]
    base = DummyVecEnv(fns) if kind.startswith("dummy") else SubprocVecEnv(fns, start_method="spawn")  # forkserver would outlive the test
    venv = VecRecordTrace(base, tmp_path / "outer", name_prefix="outer")
    terminal = drive(venv)
    venv.close()
    for i in range(N_ENVS):
        outer, inner = episodes(tmp_path / "outer", f"outer.env{i}"), episodes(tmp_path / "inner", f"inner{i}")
        assert_same_episodes(outer, inner)
        assert outer[0].seed == 7 + i and outer[0].options == {"note": "first"} and outer[1].seed is None
        ended = [obs for j, obs in terminal if j == i]
        assert len(outer) == len(ended) + 1 and not outer[-1].complete  # the last one still ran
        for e, obs in zip(outer, ended, strict=False):
            last = {k: v[-1] for k, v in e.observations.items()} if isinstance(obs, dict) else e.observations[-1]
            assert as_bytes(last) == as_bytes(obs) and e.ended_by in ("terminated", "truncated")
    assert sum(e.length for i in range(N_ENVS) for e in episodes(tmp_path / "outer", f"outer.env{i}")) == STEPS * N_ENVS


@pytest.mark.timeout(120)
def test_vec_normalize_recorded_as_the_agent_sees_it(tmp_path):
    """Around VecNormalize the trace holds the normalized observations, each episode ending on the normalized
    terminal observation SB3 gave the agent."""
    venv = VecRecordTrace(VecNormalize(DummyVecEnv([MakeEnv(i) for i in range(N_ENVS)])), tmp_path, name_prefix="norm")
    terminal = drive(venv)
    venv.close()
    for i in range(N_ENVS):
        got = episodes(tmp_path, f"norm.env{i}")
        ended = [obs for j, obs in terminal if j == i]
        assert len(got) == len(ended) + 1
        for e, obs in zip(got, ended, strict=False):
            assert e.observations[-1].tobytes() == obs.astype(np.float32).tobytes()
            assert e.infos[0]["episode_no"] == got.index(e) + 1 and e.infos[-1]["t"] > 0
    assert sum(e.length for i in range(N_ENVS) for e in episodes(tmp_path, f"norm.env{i}")) == STEPS * N_ENVS


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_ppo_learn_records_num_timesteps_steps(tmp_path):
    venv = VecRecordTrace(SubprocVecEnv([MakeEnv(i) for i in range(N_ENVS)], start_method="spawn"), tmp_path, name_prefix="ppo")
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0).learn(256)
    stats = venv.stats()
    venv.close()
    got = [episodes(tmp_path, f"ppo.env{i}") for i in range(N_ENVS)]
    assert sum(e.length for eps in got for e in eps) == model.num_timesteps == 256
    assert all(e.complete for eps in got for e in eps[:-1]) and stats["records_dropped"] == 0
    assert [eps[0].seed for eps in got] == [0, 1]  # PPO(seed=0) seeds the VecEnv: sub-env I gets 0 + I


def frames_and_size(path: str) -> tuple[int, tuple[int, int]]:
    reader = imageio_ffmpeg.read_frames(path)
    size = next(reader)["size"]
    return sum(1 for _ in reader), size


class CountingVideoRecorder(VecVideoRecorder):
    """SB3's own recorder, counting the frames it hands moviepy (which may write one fewer, rounding the duration)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.counts: dict[str, int] = {}

    def _stop_recording(self) -> None:
        self.counts[self.video_name] = len(self.recorded_frames)
        super()._stop_recording()


def video_run(wrap, folder, steps: int):
    venv = wrap(DummyVecEnv([MakeEnv(i, render_mode="rgb_array") for i in range(N_ENVS)]), str(folder))
    venv.seed(3)
    venv.reset()
    rng = np.random.default_rng(3)
    for _ in range(steps):
        venv.step(rng.integers(0, 2, N_ENVS))
    venv.close()  # the last clip is still recording: both write it at close()
    return venv


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_video_names_and_frames_are_sb3s(tmp_path):
    def trigger(step):
        return step % 40 == 0

    sb3 = video_run(lambda v, f: CountingVideoRecorder(v, f, trigger, video_length=15), tmp_path / "sb3", 90)
    video_run(lambda v, f: VecRecordVideo(v, f, trigger, video_length=15), tmp_path / "envrec", 90)
    theirs = sorted(n for n in os.listdir(tmp_path / "sb3") if n.endswith(".mp4"))
    ours = sorted(n for n in os.listdir(tmp_path / "envrec") if n.endswith(".mp4"))
    assert ours == theirs == [f"rl-video-step-{s}-to-step-{s + 15}.mp4" for s in (0, 40, 80)]
    assert sb3.counts == {n: 11 if "step-80" in n else 16 for n in ours}  # the last clip cut short by close()
    for name in ours:
        m = meta(str(tmp_path / "envrec"), name[:-4])
        frames, size = frames_and_size(str(tmp_path / "envrec" / name))
        assert not m["broken"] and m["frames_written"] == frames == sb3.counts[name]
        assert (m["start_step"], m["num_envs"]) == (int(name.split("-")[3]), N_ENVS)
        assert size == frames_and_size(str(tmp_path / "sb3" / name))[1] == (600, 800)  # SB3's tiling: 2 frames, a column


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_video_of_a_subproc_vec_env(tmp_path):
    """The sub-envs render in their own processes (SB3's get_images over its pipes); the clip is tiled as SB3 tiles."""
    venv = VecRecordVideo(SubprocVecEnv([MakeEnv(i, render_mode="rgb_array") for i in range(3)], start_method="spawn"),
                          tmp_path, lambda s: s == 5, video_length=10)
    venv.reset()
    for _ in range(30):
        venv.step(np.zeros(3, np.int64))
    venv.close()
    assert sorted(os.listdir(tmp_path)) == ["rl-video-step-5-to-step-15.meta.json", "rl-video-step-5-to-step-15.mp4"]
    frames, size = frames_and_size(str(tmp_path / "rl-video-step-5-to-step-15.mp4"))
    assert frames == meta(str(tmp_path), "rl-video-step-5-to-step-15")["frames_written"] == 11
    assert size == (1200, 800)  # 3 frames of 600x400: 2 rows of 2, one cell black


@pytest.mark.timeout(120)
def test_video_keep_if_and_callbacks(tmp_path):
    seen, closed = [], []

    def keep(outcome):
        seen.append(outcome)
        return outcome.episode_id % 2 == 0

    video_run(lambda v, f: VecRecordVideo(v, f, lambda s: s % 20 == 0, video_length=9, keep_if=keep,
                                          on_clip_closed=lambda path, m: closed.append(os.path.basename(path))),
              tmp_path, 55)
    assert [o.episode_id for o in seen] == [0, 1, 2]
    for o in seen:  # CartPole pays 1 a step to each sub-env: the mean return is the clip's steps
        assert o.length == 9 and o.episode_return == 9 and o.info["sub_env_returns"] == [9.0, 9.0]
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".mp4")) == sorted(closed)
    assert sorted(closed) == ["rl-video-step-0-to-step-9.mp4", "rl-video-step-40-to-step-49.mp4"]


def test_a_non_vec_env_is_refused_naming_what_is_expected(tmp_path):
    env = gym.make("CartPole-v1")
    with pytest.raises(envrec.ConfigError, match=r"Stable-Baselines3 VecEnv.*gymnasium.*DummyVecEnv\(\[lambda: env\]\)"):
        VecRecordTrace(env, tmp_path)
    vec = gym.make_vec("CartPole-v1", num_envs=2)
    with pytest.raises(envrec.ConfigError, match="envrec.RecordVectorTrace"):
        VecRecordVideo(vec, tmp_path, lambda s: True)
    with pytest.raises(envrec.ConfigError, match="got builtins.str"):
        VecRecordTrace("CartPole-v1", tmp_path)
    env.close(), vec.close()
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"video_length": -1}, "video_length"),
    ({"record_video_trigger": 5}, "record_video_trigger"),
    ({"name_prefix": "../out"}, "name_prefix"),
    ({"fps": 0}, "fps"),
    ({"no_such_option": 1}, "no_such_option"),
])
def test_bad_video_arguments(tmp_path, kwargs, match):
    venv = DummyVecEnv([MakeEnv(0, render_mode="rgb_array")])
    args = {"record_video_trigger": lambda s: True, **kwargs}
    with pytest.raises((envrec.ConfigError, TypeError), match=match):
        VecRecordVideo(venv, tmp_path / "v", **args)
    venv.close()


def test_video_needs_rgb_array_and_trace_options_are_checked(tmp_path):
    venv = DummyVecEnv([MakeEnv(0)])
    with pytest.raises(envrec.ConfigError, match="render_mode must be 'rgb_array', not None"):
        VecRecordVideo(venv, tmp_path, lambda s: True)
    with pytest.raises(envrec.ConfigError, match="batch_bytes"):
        VecRecordTrace(venv, tmp_path, batch_bytes=-5)
    venv.close()


def test_without_stable_baselines3_the_import_says_which_extra():
    code = "import sys; sys.modules['stable_baselines3'] = None\nimport envrec.sb3"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "pip install 'stable-baselines3>=" in out.stderr, out.stderr
    assert "envrec's sb3 extra" in out.stderr and "[sb3]'" in out.stderr


@pytest.mark.timeout(120)
def test_envrec_verify_replays_seeded_and_autoreset_episodes(tmp_path):
    """The manifest names the sub-envs' spec and each first episode's seed: envrec verify reproduces those from
    their seeds, and the episodes SB3 reset itself, unseeded, from the np_random state read after the reset
    before (SB3 resets inside step_wait), as docs/vector.md says."""
    from envrec.replay import verify

    venv = VecRecordTrace(DummyVecEnv([lambda: gym.make("CartPole-v1")] * N_ENVS), tmp_path, name_prefix="v")
    venv.seed(11)
    venv.reset()
    for a in np.random.default_rng(0).integers(0, 2, (60, N_ENVS)):
        venv.step(a)
    venv.close()
    verdicts = verify(tmp_path)
    firsts = [v for v in verdicts if v.episode_id == 0]
    assert sorted(v.recording for v in firsts) == ["v.env0", "v.env1"]
    assert all(v.status == "reproduced" and v.start == "seed" and v.steps > 0 for v in firsts), firsts
    others = [v for v in verdicts if v.episode_id != 0]
    assert others and all(v.status == "reproduced" and v.start == "rng" for v in others), others


class StepReward(gym.Wrapper):
    """Pays ``t % 7`` at the env's t-th step: clips of the same length get different returns."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.t = 0

    def step(self, action):
        obs, _, terminated, truncated, info = self.env.step(action)
        self.t += 1
        return obs, float(self.t % 7), terminated, truncated, info


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("preset", "left"), [("best", 40), ("worst", 20)])
def test_keep_presets_rank_the_clips_of_the_run(tmp_path, preset, left):
    """envrec.keep.best(1) / worst(1) on VecRecordVideo: the clip whose steps earned the most (least) is the one left.
    Clips start at steps 0, 20, 40 and tally steps S+1..S+9: returns 24, 22 and 27 a sub-env."""
    keeper = getattr(envrec.keep, preset)(1)
    fns = [lambda: StepReward(gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=MAX_STEPS))] * N_ENVS
    venv = VecRecordVideo(DummyVecEnv(fns), tmp_path, lambda s: s % 20 == 0, video_length=9, keep_if=keeper)
    venv.reset()
    for _ in range(55):
        venv.step(np.zeros(N_ENVS, np.int64))
    stats = venv.stats()
    venv.close()
    name = f"rl-video-step-{left}-to-step-{left + 9}"
    assert sorted(os.listdir(tmp_path)) == [name + ".meta.json", name + ".mp4"]
    assert [(o.clip, o.episode_return) for o in keeper.kept] == [(name, {0: 24.0, 20: 22.0, 40: 27.0}[left])]
    assert venv.stats()["clips_discarded"] == 2 and stats["clips_started"] == 3
    with pytest.raises(envrec.ConfigError):  # one ranked keeper ranks one recorder's clips
        VecRecordVideo(DummyVecEnv(fns), tmp_path / "again", lambda s: False, keep_if=keeper)
