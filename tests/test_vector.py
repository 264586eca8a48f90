"""Vector envs: per-sub-env traces equal to equally seeded single envs stepped one by one, in every autoreset mode."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import envrec

from .support.video import decode, meta

STEPS = 120
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


def make_vec(n, mode, mode_name="sync", render=None):
    return gym.make_vec(
        "CartPole-v1", num_envs=n, vectorization_mode=mode_name, vector_kwargs={"autoreset_mode": mode}, render_mode=render
    )


def drive(env, n, mode, seed=0):
    """Step the vector env with seeded random actions; in disabled mode reset finished sub-envs by mask."""
    rng = np.random.default_rng(seed)
    actions = []
    env.reset(seed=seed)
    env.resets = 1
    for _ in range(STEPS):
        a = rng.integers(0, 2, n)
        actions.append(a)
        _, _, term, trunc, _ = env.step(a)
        if mode == AutoresetMode.DISABLED and (term | trunc).any():
            env.reset(options={"reset_mask": term | trunc})
            env.resets += 1
    return actions


def reference(i, mode, actions, seed=0):
    """Sub-env ``i``'s episodes, by stepping one CartPole the way the vector env steps it."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed + i)
    episodes = [{"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []}]
    pending_reset = False
    for a in actions:
        if pending_reset:  # next-step: this step resets; disabled: reset by mask after the last step
            obs, _ = env.reset()
            episodes.append({"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []})
            pending_reset = False
            if mode == AutoresetMode.NEXT_STEP:
                continue
        obs, r, te, tr, _ = env.step(int(a[i]))
        ep = episodes[-1]
        ep["obs"].append(obs), ep["act"].append(int(a[i])), ep["rew"].append(r), ep["term"].append(te), ep["trunc"].append(tr)
        if te or tr:
            if mode == AutoresetMode.SAME_STEP:
                obs, _ = env.reset()
                episodes.append({"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []})
            else:
                pending_reset = True
    if mode == AutoresetMode.DISABLED and pending_reset:
        obs, _ = env.reset()
        episodes.append({"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []})
    return episodes


def assert_sub_env_equals_reference(folder, prefix, i, mode, actions):
    got = list(envrec.TraceReader(folder, prefix=prefix))
    want = reference(i, mode, actions)
    assert len(got) == len(want), [e.length for e in got]
    for e, w in zip(got, want, strict=True):
        assert e.observations.tobytes() == np.stack(w["obs"]).astype(np.float32).tobytes()
        assert e.actions.tolist() == w["act"]
        assert e.rewards.tolist() == w["rew"]
        assert e.terminations.tolist() == w["term"] and e.truncations.tolist() == w["trunc"]
    assert got[0].seed == i


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_sub_env_traces_equal_single_env_references(tmp_path, n, mode):
    env = envrec.RecordVectorTrace(make_vec(n, mode), tmp_path, name_prefix="vec")
    actions = drive(env, n, mode)
    stats = env.stats()
    env.close()
    assert stats["records_dropped"] == 0
    assert stats["records_sent"] == STEPS + env.resets  # one record per vector call, whatever the number of sub-envs
    for i in range(n):
        assert_sub_env_equals_reference(tmp_path, f"vec.env{i}", i, mode, actions)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary or checkpoint file left


def test_async_vector_env(tmp_path):
    mode = AutoresetMode.NEXT_STEP
    env = envrec.RecordVectorTrace(make_vec(2, mode, "async"), tmp_path, name_prefix="vec")
    actions = drive(env, 2, mode)
    env.close()
    for i in range(2):
        assert_sub_env_equals_reference(tmp_path, f"vec.env{i}", i, mode, actions)


@pytest.mark.parametrize("mode", MODES[:2], ids=lambda m: m.value)
def test_sub_env_videos_follow_sub_env_episodes(tmp_path, mode):
    env = make_vec(3, mode, render="rgb_array")
    env = envrec.RecordVectorTrace(env, tmp_path, name_prefix="vec")
    env = envrec.RecordVectorVideo(
        env, tmp_path, sub_envs=(0, 2), episode_trigger=lambda e: True, tiled_step_trigger=lambda s: s == 5, tiled_length=20
    )
    drive(env, 3, mode)
    env.close()
    for j in (0, 2):
        episodes = list(envrec.TraceReader(tmp_path, prefix=f"vec.env{j}"))
        for k, ep in enumerate(episodes):
            name = f"rl-video-env{j}-episode-{k}"
            m = meta(tmp_path, name)
            expected = ep.length + 1 if mode == AutoresetMode.NEXT_STEP or not ep.complete else ep.length
            assert m["frames_written"] == expected, (name, m["frames_written"], ep.length, ep.ended_by)
            assert len(decode(tmp_path / f"{name}.mp4", 600, 400)) == expected
    t = meta(tmp_path, "rl-video-tiled-step-5")
    assert t["frames_written"] == 20 and t["frame_size"] == {"width": 1200, "height": 800, "channels": 3}
    assert not os.path.exists(tmp_path / "rl-video-env1-episode-0.mp4")  # sub-env 1 was not chosen


def test_async_vector_env_video(tmp_path):
    mode = AutoresetMode.NEXT_STEP
    env = envrec.RecordVectorTrace(make_vec(2, mode, "async", render="rgb_array"), tmp_path, name_prefix="vec")
    env = envrec.RecordVectorVideo(env, tmp_path, sub_envs=(1,), episode_trigger=lambda e: e == 0)
    env.reset(seed=0)
    steps = 0
    while env.episode[1] == 0 and steps < 500:  # until sub-env 1 starts its second episode
        env.step(env.action_space.sample())
        steps += 1
    env.close()
    m = meta(tmp_path, "rl-video-env1-episode-0")
    first = envrec.TraceReader(tmp_path, prefix="vec.env1")[0]
    assert not m["broken"] and m["frames_written"] == first.length + 1
    assert len(decode(tmp_path / "rl-video-env1-episode-0.mp4", 600, 400)) == m["frames_written"]
