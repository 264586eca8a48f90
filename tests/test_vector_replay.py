"""Vector and SB3 recordings replay like single ones (docs/replay.md, "Vector and SB3 recordings"): each sub-env
trace carries the sub-env's spec (``make_vec``'s ``max_episode_steps`` and wrappers), and the sub-envs' np_random
states read at resets and episode ends, exact with next-step autoreset, inferred with same-step autoreset (a
divergence from an inferred start is ``cannot_replay``, never ``diverged``); ``--episodes replayable`` picks the
episodes whose start was recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import ClipReward

from envrec import RecordVectorTrace, TraceReader
from envrec.replay import verify
from envrec.replay.selection import select_episodes

STEPS = 40


def _statuses(verdicts) -> Counter:
    return Counter(v.status for v in verdicts)


def _record(env, folder, steps: int = STEPS, seed: int | None = 3, **options) -> RecordVectorTrace:
    rec = RecordVectorTrace(env, folder, **options)
    rec.reset(seed=seed)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        rec.step(rng.integers(0, 2, rec.num_envs))
    rec.close()
    return rec


def _manifest(folder, sub_env: int = 0) -> dict:
    (path,) = folder.glob(f"*.env{sub_env}.manifest.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_make_vec_recordings_verify_with_their_spec_and_autoresets(tmp_path, mode):
    """The issue's case: make_vec(max_episode_steps=8) verified as 'diverged at step 8' with the registered defaults
    and every autoreset 'cannot replay'; now every episode reproduces, its spec recorded, no RNG read per step."""
    env = gym.make_vec("CartPole-v1", num_envs=2, max_episode_steps=8, vectorization_mode=mode,
                       wrappers=[lambda e: ClipReward(e, 0.0, 0.5)])
    rec = _record(env, tmp_path)
    env_doc = _manifest(tmp_path)["env"]
    assert env_doc["spec"]["max_episode_steps"] == 8
    assert [w["name"] for w in env_doc["spec"]["additional_wrappers"]] == ["ClipReward"]
    episodes = list(TraceReader(str(tmp_path), prefix=rec.prefix_of(1)))
    assert len(episodes) >= 4 and episodes[0].seed == 4  # sub-env 1 of reset(seed=3)
    assert all(ep.rng is not None and not ep.rng_inferred for ep in episodes[1:])  # exact: next-step autoreset
    verdicts = verify(str(tmp_path))
    assert _statuses(verdicts) == {"reproduced": len(verdicts)}
    assert any(v.start == "rng" for v in verdicts)
    assert max(v.steps for v in verdicts) == 8  # the recorded time limit, not the registered 500


def test_rng_is_read_at_resets_and_episode_ends_only(tmp_path):
    env = gym.make_vec("CartPole-v1", num_envs=3, max_episode_steps=10, vectorization_mode="sync")
    rec = RecordVectorTrace(env, tmp_path)
    rec.reset()  # unseeded: read before it
    assert rec._rng.reads == 1
    steps_with_an_end = 0
    for _ in range(60):
        _, _, term, trunc, _ = rec.step(env.action_space.sample())
        steps_with_an_end += bool(np.any(term | trunc))
    rec.close()
    assert rec._rng.reads == 1 + steps_with_an_end
    verdicts = verify(str(tmp_path))
    assert _statuses(verdicts) == {"reproduced": len(verdicts)}
    assert {v.start for v in verdicts} == {"rng"}  # the unseeded first reset too


def test_sub_envs_selection_keeps_replay_fields(tmp_path):
    env = gym.make_vec("CartPole-v1", num_envs=4, max_episode_steps=6, vectorization_mode="sync")
    _record(env, tmp_path, sub_envs=[1, 3])
    assert sorted(p.name.split(".env")[1].split(".")[0] for p in tmp_path.glob("*.manifest.json")) == ["1", "3"]
    verdicts = verify(str(tmp_path))
    assert len(verdicts) >= 8 and _statuses(verdicts) == {"reproduced": len(verdicts)}


def test_same_step_autoreset_infers_the_state(tmp_path):
    """CartPole draws nothing while stepping: the state after the previous reset reproduces each same-step autoreset."""
    env = gym.make_vec("CartPole-v1", num_envs=2, max_episode_steps=7, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    rec = _record(env, tmp_path, seed=None)
    episodes = list(TraceReader(str(tmp_path), prefix=rec.prefix_of(0)))
    assert not episodes[0].rng_inferred and all(ep.rng_inferred for ep in episodes[1:])
    verdicts = verify(str(tmp_path))
    assert _statuses(verdicts) == {"reproduced": len(verdicts)}


def test_an_env_that_draws_while_stepping_is_cannot_replay_never_diverged(tmp_path):
    env = gym.make_vec("FrozenLake-v1", num_envs=2, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    rec = RecordVectorTrace(env, tmp_path)
    rec.reset(seed=0)
    for _ in range(80):
        rec.step(np.array([1, 2]))
    rec.close()
    verdicts = verify(str(tmp_path))
    counts = _statuses(verdicts)
    assert counts["diverged"] == 0 and counts["cannot_replay"] >= 1, counts
    first = [v for v in verdicts if v.episode_id == 0]
    assert {v.status for v in first} == {"reproduced"}  # seeded: exact
    inferred = [v for v in verdicts if v.status == "cannot_replay"]
    assert all("read after the previous episode's reset" in v.reason for v in inferred)


class Opaque(gym.vector.VectorEnv):
    """A vector env that keeps its sub-envs to itself (as a batched simulator does), seeding them as Gymnasium's do."""

    def __init__(self, num_envs: int) -> None:
        self.inner = gym.vector.SyncVectorEnv([cartpole] * num_envs)
        self.num_envs = num_envs
        for name in ("single_observation_space", "single_action_space", "observation_space", "action_space", "metadata"):
            setattr(self, name, getattr(self.inner, name))

    def reset(self, *, seed=None, options=None):
        return self.inner.reset(seed=seed, options=options)

    def step(self, actions):
        return self.inner.step(actions)

    def close_extras(self, **kwargs):
        self.inner.close()


def test_episodes_replayable_selects_the_recorded_starts(tmp_path):
    """A vector env that does not expose its sub-envs: no spec, no states; --episodes replayable leaves its unseeded
    autoresets out (exit 0) where --episodes all cannot replay them (exit 1)."""
    _record(Opaque(2), tmp_path, steps=80)
    env_doc = _manifest(tmp_path)["env"]
    assert env_doc["spec"] is None and "does not expose its sub-envs" in env_doc["spec_error"]
    episodes = list(TraceReader(str(tmp_path)))
    assert len(episodes) > 4
    assert [ep.episode_id for ep in select_episodes(episodes, "replayable")] == [0, 0]
    base = [sys.executable, "-m", "envrec", "verify", str(tmp_path), "--make", "tests.test_vector_replay:cartpole"]
    ok = subprocess.run([*base, "--episodes", "replayable"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "2 reproduced, 0 diverged, 0 cannot replay" in ok.stdout
    every = subprocess.run([*base, "--episodes", "all"], capture_output=True, text=True, timeout=120)
    assert every.returncode == 1 and "0 diverged" in every.stdout and "no np_random state" in every.stdout


def cartpole(render_mode=None) -> gym.Env:
    """A ``--make`` function (and the opaque vector env's sub-env): CartPole with a time limit of 30 steps."""
    return gym.make("CartPole-v1", render_mode=render_mode, max_episode_steps=30)


@pytest.mark.slow
@pytest.mark.parametrize("cls", ["DummyVecEnv", "SubprocVecEnv"])
def test_sb3_recordings_verify(tmp_path, cls):
    """SB3 resets inside step_wait (same-step): the first episodes from env.seed(), the later ones from inferred
    states (np_random read through get_attr at episode ends); SB3's Monitor is left out of the recorded spec."""
    from stable_baselines3.common import vec_env
    from stable_baselines3.common.env_util import make_vec_env

    from envrec.sb3 import VecRecordTrace

    kwargs = {"start_method": "spawn"} if cls == "SubprocVecEnv" else None  # forkserver would outlive the test
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=1, vec_env_cls=getattr(vec_env, cls), vec_env_kwargs=kwargs)
    rec = VecRecordTrace(venv, tmp_path)
    rec.reset()
    for _ in range(150):
        rec.step(np.array([venv.action_space.sample() for _ in range(2)]))
    rec.close()
    assert _manifest(tmp_path)["env"]["spec"]["additional_wrappers"] == []
    verdicts = verify(str(tmp_path))
    assert len(verdicts) >= 6 and _statuses(verdicts) == {"reproduced": len(verdicts)}
