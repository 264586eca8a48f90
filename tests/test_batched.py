"""Batched simulators (torch and JAX tensors) and numpy-vectorized envs: a chosen subset of sub-envs recorded,
only their rows copied, each sub-env's trace equal to the same env stepped one by one.

The CUDA cases skip on a machine without an NVIDIA GPU: they test what only a GPU has (device memory, pinned
copies), the one case where a skip is right. Where they ran is said in changes/batched.md.
"""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch  # the test extra installs it: its absence fails, never skips

import envrec
from envrec.errors import ConfigError, RecordError
from envrec.record.batched import BatchedEnv
from envrec.record.vector import RecordVectorTrace, RecordVectorVideo

from .support.batched_sims import BatchedSim, Jaxy, Torchy, reference
from .support.video import meta

N = 1024
CHOSEN = [0, 3, 77, 500, 1023]
STEPS = 60
STYLES = ["same-step", "next-step", "reset-mask"]


def cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine: this case tests device memory and pinned copies, which only a GPU has")
    return "cuda"


def drive(env, xp, n, style, steps=STEPS, seed=0):
    """Seeded random actions as the framework's tensors; in reset-mask style, ended sub-envs reset by mask."""
    rng = np.random.default_rng(seed)
    actions = []
    env.reset(seed=seed)
    for _ in range(steps):
        a = rng.integers(0, 3, n)
        actions.append(a)
        _, _, term, trunc, _ = env.step(xp.asarray(a, "int64"))
        if style == "reset-mask":
            done = np.asarray(envrec.record.host_arrays.to_host(term | trunc))
            if done.any():
                env.reset(options={"reset_mask": term | trunc})
    return actions


def assert_equals_reference(folder, prefix, i, style, actions, episodes=None):
    got = list(envrec.TraceReader(folder, prefix=prefix))
    want = reference(i, style, actions)
    if episodes is not None:
        want = [want[e] for e in episodes]
    assert [e.length for e in got] == [len(w["act"]) for w in want], (i, style)
    for e, w in zip(got, want, strict=True):
        assert e.observations.tobytes() == np.stack(w["obs"]).astype(np.float32).tobytes(), (i, e.episode_id)
        assert e.actions.tolist() == w["act"]
        assert e.rewards.tolist() == w["rew"]
        assert e.terminations.tolist() == w["term"] and e.truncations.tolist() == w["trunc"]
    return got


def sim(xp, n, style, **kw):
    final_obs_key = "final_observation"
    return BatchedEnv(BatchedSim(xp, n, style, final_obs_key=final_obs_key, **kw), autoreset=style, final_obs_key=final_obs_key)


@pytest.mark.variants
@pytest.mark.parametrize("style", STYLES)
def test_torch_cpu_batch_chosen_sub_envs_equal_single_envs(tmp_path, style):
    env = RecordVectorTrace(sim(Torchy(), N, style), tmp_path, name_prefix="b", sub_envs=CHOSEN)
    actions = drive(env, Torchy(), N, style)
    stats = env.stats()
    env.close()
    assert stats["records_dropped"] == 0
    for i in CHOSEN:
        assert_equals_reference(tmp_path, f"b.env{i}", i, style, actions)
    manifests = sorted(p for p in os.listdir(tmp_path) if p.endswith(".manifest.json"))
    assert manifests == sorted(f"b.env{i}.manifest.json" for i in CHOSEN)  # no file for the 1,019 others


def test_torch_cpu_clips_of_chosen_sub_envs(tmp_path):
    style = "next-step"
    env = sim(Torchy(), N, style)
    env = RecordVectorTrace(env, tmp_path, name_prefix="b", sub_envs=[3, 500])
    env = RecordVectorVideo(env, tmp_path, sub_envs=(3, 500), episode_trigger=lambda e: True)
    drive(env, Torchy(), N, style, steps=40)
    env.close()
    for j in (3, 500):
        episodes = list(envrec.TraceReader(tmp_path, prefix=f"b.env{j}"))
        assert len(episodes) > 2
        for k, ep in enumerate(episodes):
            m = meta(tmp_path, f"rl-video-env{j}-episode-{k}")
            assert m["frames_written"] == ep.length + 1, (j, k)
            assert m["frame_size"] == {"width": 16, "height": 16, "channels": 3}


def test_picker_records_the_episodes_it_picks(tmp_path):
    style = "same-step"
    asked = []

    def pick(indices):
        asked.append(len(indices))
        return indices[indices % 256 == 5]  # sub-envs 5, 261, 517, 773: every episode; the rest never

    env = RecordVectorTrace(sim(Torchy(), N, style), tmp_path, name_prefix="p", sub_envs=pick)
    actions = drive(env, Torchy(), N, style)
    env.close()
    assert asked[0] == N  # the first reset: every sub-env
    for i in (5, 261, 517, 773):
        assert_equals_reference(tmp_path, f"p.env{i}", i, style, actions)
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".manifest.json")) == [
        f"p.env{i}.manifest.json" for i in (261, 5, 517, 773)
    ]


@pytest.mark.parametrize("style", ["next-step", "same-step"])
def test_picker_every_other_episode(tmp_path, style):
    """A sub-env recorded for some episodes and not others: its trace holds those, numbered by its own count."""
    counts = np.zeros(8, int)

    def pick(indices):
        chosen = [i for i in indices if counts[i] % 2 == 0]
        counts[indices] += 1
        return chosen

    env = RecordVectorTrace(sim(Torchy(), 8, style), tmp_path, name_prefix="q", sub_envs=pick)
    actions = drive(env, Torchy(), 8, style, steps=80)
    env.close()
    for i in range(8):
        want = reference(i, style, actions)
        picked = list(range(0, len(want), 2))
        got = assert_equals_reference(tmp_path, f"q.env{i}", i, style, actions, episodes=picked)
        assert [e.episode_id for e in got] == picked


def test_isaac_lab_style_no_terminal_observation(tmp_path):
    """Same-step without final_obs: each episode still ends on its own step; its last observation is the reset one."""
    env = RecordVectorTrace(BatchedEnv(BatchedSim(Torchy(), 64, "same-step", final_obs=False)), tmp_path,
                            name_prefix="i", sub_envs=[9])
    actions = drive(env, Torchy(), 64, "same-step")
    env.close()
    got = list(envrec.TraceReader(tmp_path, prefix="i.env9"))
    want = reference(9, "same-step", actions)
    assert [e.length for e in got] == [len(w["act"]) for w in want]
    for e, w, nxt in zip(got[:-1], want[:-1], want[1:], strict=True):
        assert e.actions.tolist() == w["act"]
        assert e.observations[-1].tolist() == nxt["obs"][0].tolist()  # the simulator gave no terminal observation


def test_jax_cpu_arrays(tmp_path):
    import jax  # noqa: F401  (the test extra installs jax[cpu]: its absence fails, never skips)
    style = "same-step"
    xp = Jaxy()
    env = RecordVectorTrace(sim(xp, 256, style), tmp_path, name_prefix="j", sub_envs=[1, 200])
    env = RecordVectorVideo(env, tmp_path, sub_envs=(200,), episode_trigger=lambda e: e == 1)
    actions = drive(env, xp, 256, style)
    env.close()
    for i in (1, 200):
        assert_equals_reference(tmp_path, f"j.env{i}", i, style, actions)
    ep = envrec.TraceReader(tmp_path, prefix="j.env200")[1]
    assert meta(tmp_path, "rl-video-env200-episode-1")["frames_written"] == ep.length  # same-step: its last frame is the reset's


def cartpole_one_by_one(i, actions, starts):
    """Sub-env ``i`` of a numpy-vectorized CartPole as one CartPole stepped alone: each episode from the reset
    state the vector env drew for it (``starts[k]``: the states after step k, the first reset's at -1)."""
    single = gym.make("CartPole-v1").unwrapped
    single.reset(seed=0)
    episodes, state = [], None
    for k, acts in [(-1, None), *enumerate(actions)]:
        if state is None or state == "next":
            single.state = starts[k][:, i].copy()
            single.steps_beyond_terminated = None
            episodes.append({"obs": [np.array(single.state, np.float32)], "act": [], "rew": [], "term": [], "trunc": []})
            state = "running"
            continue
        obs, r, te, _, _ = single.step(int(acts[i]))
        ep = episodes[-1]
        tr = len(ep["act"]) + 1 >= 500
        ep["obs"].append(obs), ep["act"].append(int(acts[i])), ep["rew"].append(r), ep["term"].append(te), ep["trunc"].append(tr)
        if te or tr:
            state = "next"
    return episodes


@pytest.mark.parametrize("sub_envs", [[1, 6], None])
def test_numpy_vectorized_cartpole(tmp_path, sub_envs):
    """Gymnasium's numpy-vectorized CartPole (one array for all sub-envs): each recorded sub-env's trace is
    that sub-env stepped alone (same reset states, same actions; observations to float32's rounding)."""
    n = 8
    vec = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    env = RecordVectorTrace(vec, tmp_path, name_prefix="c", sub_envs=sub_envs)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    starts, actions = {-1: vec.unwrapped.state.copy()}, []
    for k in range(300):
        actions.append(rng.integers(0, 2, n))
        env.step(actions[-1])
        starts[k] = vec.unwrapped.state.copy()
    env.close()
    for i in sub_envs or range(n):
        got = list(envrec.TraceReader(tmp_path, prefix=f"c.env{i}"))
        want = cartpole_one_by_one(i, actions, starts)
        assert [e.length for e in got] == [len(w["act"]) for w in want]
        for e, w in zip(got, want, strict=True):
            np.testing.assert_allclose(e.observations, np.stack(w["obs"]), rtol=1e-5, atol=1e-6)
            assert e.actions.tolist() == w["act"] and e.rewards.tolist() == w["rew"]
            assert e.terminations.tolist() == w["term"] and e.truncations.tolist() == w["trunc"]


def test_numpy_vectorized_cartpole_clips(tmp_path):
    vec = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point", render_mode="rgb_array")
    env = RecordVectorTrace(vec, tmp_path, name_prefix="c", sub_envs=[2])
    env = RecordVectorVideo(env, tmp_path, sub_envs=(2,), episode_trigger=lambda e: e < 2)
    env.reset(seed=0)
    while env.episode[2] < 2:
        env.step(env.action_space.sample())
    env.close()
    for k, ep in enumerate(list(envrec.TraceReader(tmp_path, prefix="c.env2"))[:2]):
        assert meta(tmp_path, f"rl-video-env2-episode-{k}")["frames_written"] == ep.length + 1


def test_bad_input_named_and_nothing_recorded_lost(tmp_path):
    xp = Torchy()
    env = RecordVectorTrace(sim(xp, 16, "same-step"), tmp_path, name_prefix="x", sub_envs=[2])
    env.reset(seed=0)
    for _ in range(5):
        env.step(xp.asarray(np.zeros(16), "int64"))
    meta_obs = torch.zeros((16, 3), device="meta")
    with pytest.raises(RecordError, match="observations: .*meta device"):
        env.record_step(np.zeros(16, np.int64), meta_obs, np.zeros(16), np.zeros(16, bool), np.zeros(16, bool), {})
    with pytest.raises(RecordError, match=r"rewards: expected a batch of 16 .* got a batch of 15"):
        env.record_step(np.zeros(16, np.int64), np.zeros((16, 3), np.float32), np.zeros(15), np.zeros(16, bool),
                        np.zeros(16, bool), {})
    with pytest.raises(RecordError, match="actions: expected a batch of 16"):
        env.record_step(np.zeros(17, np.int64), np.zeros((16, 3), np.float32), np.zeros(16), np.zeros(16, bool),
                        np.zeros(16, bool), {})
    for _ in range(5):
        env.step(xp.asarray(np.zeros(16), "int64"))
    env.close()
    eps = list(envrec.TraceReader(tmp_path, prefix="x.env2"))
    assert sum(e.length for e in eps) == 10  # every step before and after the refused ones


@pytest.mark.parametrize("frame", [
    pytest.param(lambda n: torch.zeros((n, 16, 16, 3), dtype=torch.float32), id="float"),
    pytest.param(lambda n: torch.zeros((n, 16, 16, 5), dtype=torch.uint8), id="channels"),
    pytest.param(lambda n: torch.zeros((n + 1, 16, 16, 3), dtype=torch.uint8), id="batch"),
])
def test_bad_frame_batch(tmp_path, frame):
    env = BatchedEnv(BatchedSim(Torchy(), 4, "same-step"), frames=lambda e: frame(4))
    env = RecordVectorVideo(env, tmp_path, sub_envs=(1,), episode_trigger=lambda e: True)
    with pytest.raises(RecordError, match="frames: "):
        env.reset(seed=0)
    env.close()


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"sub_envs \[9\]"):
        RecordVectorTrace(sim(Torchy(), 4, "same-step"), tmp_path, sub_envs=[1, 9])
    with pytest.raises(ConfigError, match="expected a list of sub-env indices or a picker"):
        RecordVectorTrace(sim(Torchy(), 4, "same-step"), tmp_path, sub_envs="0")
    with pytest.raises(ConfigError, match="named twice"):
        RecordVectorTrace(sim(Torchy(), 4, "same-step"), tmp_path, sub_envs=[1, 1])
    with pytest.raises(ConfigError, match="num_envs"):
        BatchedEnv(gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="autoreset"):
        BatchedEnv(BatchedSim(Torchy(), 4), autoreset="sometimes")


def test_env_idx_resets_as_maniskill(tmp_path):
    xp = Torchy()
    env = RecordVectorTrace(sim(xp, 8, "reset-mask"), tmp_path, name_prefix="m", sub_envs=[4])
    env.reset(seed=0)
    for _ in range(3):
        env.step(xp.asarray(np.ones(8), "int64"))
    env.reset(options={"env_idx": torch.tensor([4, 5])})
    env.step(xp.asarray(np.ones(8), "int64"))
    env.close()
    assert [e.length for e in envrec.TraceReader(tmp_path, prefix="m.env4")] == [3, 1]


def test_numpy_only_imports_no_framework(tmp_path):
    code = (
        "import sys, gymnasium as gym\n"
        "from envrec.record.vector import RecordVectorTrace\n"
        f"env = RecordVectorTrace(gym.make_vec('CartPole-v1', num_envs=4, vectorization_mode='vector_entry_point'), {str(tmp_path)!r}, sub_envs=[1])\n"
        "env.reset(seed=0)\n"
        "for _ in range(20): env.step(env.action_space.sample())\n"
        "env.close()\n"
        "print(sorted(m for m in ('torch', 'jax', 'cupy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("style", ["same-step", "next-step"])
def test_cuda_torch_batch(tmp_path, style):
    device = cuda_or_skip()
    xp = Torchy(device)
    env = RecordVectorTrace(sim(xp, N, style), tmp_path, name_prefix="g", sub_envs=CHOSEN)
    env = RecordVectorVideo(env, tmp_path, sub_envs=(3,), episode_trigger=lambda e: True)
    actions = drive(env, xp, N, style)
    env.close()
    for i in CHOSEN:
        assert_equals_reference(tmp_path, f"g.env{i}", i, style, actions)


def test_cuda_jax_batch(tmp_path):
    import jax

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("no JAX GPU device on this machine: this case tests arrays in device memory, which only a GPU has")
    xp = Jaxy()
    env = RecordVectorTrace(sim(xp, N, "same-step"), tmp_path, name_prefix="h", sub_envs=CHOSEN)
    actions = drive(env, xp, N, "same-step")
    env.close()
    for i in CHOSEN:
        assert_equals_reference(tmp_path, f"h.env{i}", i, "same-step", actions)


@pytest.mark.slow
@pytest.mark.timeout(300)  # ~65 s alone on 2 cores, its worker catching up in close(); beside the suite's load, twice that
def test_rss_flat_over_100k_batched_steps(tmp_path):
    import psutil

    xp = Torchy()
    n = 256
    env = RecordVectorTrace(sim(xp, n, "same-step"), tmp_path, name_prefix="r", sub_envs=list(range(0, n, 16)),
                            max_bytes=20_000_000, batch_bytes=1_000_000)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    pool = [xp.asarray(rng.integers(0, 3, n), "int64") for _ in range(64)]
    proc = psutil.Process()
    samples = []
    lapped = None  # the step by which the ring's pages were all reserved and mapped (its first lap maps them)
    for k in range(100_000):
        env.step(pool[k % 64])
        if lapped is None and env._stream.ring.all_reserved:
            lapped = k
        if k % 10_000 == 9_999:
            samples.append(proc.memory_info().rss)
    env.close()
    assert lapped is not None and lapped < 50_000, lapped
    warm = max(1, lapped // 10_000 + 1)  # the first sample after that, and after 20,000 steps warmed every cache
    growth = samples[-1] - samples[warm]
    assert growth < 8 * 2**20, ([s >> 20 for s in samples], lapped)


def test_sb3_vec_env_chosen_sub_envs_equal_all(tmp_path):
    """``envrec.sb3.VecRecordTrace(sub_envs=...)``: the chosen sub-envs' traces equal those of a run recording all."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from envrec.sb3 import VecRecordTrace

    def run(folder, sub_envs):
        venv = VecRecordTrace(DummyVecEnv([lambda: gym.make("CartPole-v1")] * 4), folder, name_prefix="s", sub_envs=sub_envs)
        venv.seed(3)
        venv.reset()
        rng = np.random.default_rng(0)
        for _ in range(150):
            venv.step(rng.integers(0, 2, 4))
        venv.close()

    run(tmp_path / "all", None)
    run(tmp_path / "two", [1, 3])
    for i in (1, 3):
        every = list(envrec.TraceReader(tmp_path / "all", prefix=f"s.env{i}"))
        chosen = list(envrec.TraceReader(tmp_path / "two", prefix=f"s.env{i}"))
        assert [e.length for e in chosen] == [e.length for e in every] and len(every) > 2
        for a, b in zip(every, chosen, strict=True):
            assert a.observations.tobytes() == b.observations.tobytes() and a.seed == b.seed
    assert sorted(os.listdir(tmp_path / "two")) == sorted(
        f for f in os.listdir(tmp_path / "all") if ".env1." in f or ".env3." in f
    )


def test_more_sub_env_traces_than_files_may_be_open_is_a_config_error(tmp_path, monkeypatch):
    """Recording every sub-env of a large batch kept one file set per sub-env open in one worker, which died with
    'Too many open files' (4,096 sub-envs against a limit of 20,000): refused at once, naming sub_envs=."""
    from envrec.record import vector

    monkeypatch.setattr(vector, "open_files_limit", lambda: 200)  # room for 17 sub-env traces
    env = gym.make_vec("CartPole-v1", num_envs=32, vectorization_mode="sync")
    with pytest.raises(ConfigError, match=r"sub_envs: recording 32 sub-envs' traces .* record at most 17 of them"):
        envrec.RecordVectorTrace(env, tmp_path / "all")
    assert not (tmp_path / "all").exists() or not list((tmp_path / "all").iterdir())
    rec = envrec.RecordVectorTrace(env, tmp_path / "some", sub_envs=list(range(17)))
    rec.reset(seed=0)
    rec.step(env.action_space.sample())
    rec.close()
    assert len(list((tmp_path / "some").glob("*.manifest.json"))) == 17
