"""Replay of real simulators: ALE Pong with sticky actions, MuJoCo HalfCheetah (verify, render headless, and
an episode whose start a disk budget evicted, verified from its first kept snapshot).

ALE keeps its sticky-action RNG in the emulator, outside ``np_random``: its unseeded episodes reproduce only
with ``snapshot="ale"``. HalfCheetah draws its reset noise from ``np_random`` alone: the recorded generator
state replays them. Needs ``ale-py`` and ``mujoco`` (the test extra) and, to render, Mesa's EGL or OSMesa
(``.ci/run`` installs them): under ``CI=true`` a missing one fails the test, elsewhere it skips.
"""

from __future__ import annotations

import ale_py
import gymnasium as gym
import numpy as np
import pytest

import envrec
from envrec.cli import main
from envrec.replay import verify

from .support.headless_gl import need_headless_gl, need_mujoco
from .support.video import decode, meta

pytestmark = pytest.mark.timeout(120)

gym.register_envs(ale_py)
SEEDS = [0, None, None, None]  # the first reset seeded, as a training loop does


def _record(folder, env, seeds, steps=None, **options):
    """Record one episode per seed (None: unseeded) with sampled actions (at most ``steps`` each); the reader's episodes."""
    env = envrec.RecordTrace(env, folder, **options)
    env.action_space.seed(0)
    for seed in seeds:
        env.reset(seed=seed)
        for _ in range(steps or 10**9):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                break
    env.close()
    with envrec.TraceReader(folder) as reader:
        return list(reader)


def _pong() -> gym.Env:
    return gym.make("ALE/Pong-v5", repeat_action_probability=0.25, max_episode_steps=100)


@pytest.fixture(scope="module")
def pong(tmp_path_factory):
    """Pong recorded twice, the same way: with snapshot="ale" and without."""
    with_snapshot, without = tmp_path_factory.mktemp("pong-ale"), tmp_path_factory.mktemp("pong")
    _record(with_snapshot, _pong(), SEEDS, snapshot="ale")
    _record(without, _pong(), SEEDS)
    return with_snapshot, without


def test_pong_with_sticky_actions_reproduces_from_its_ale_snapshots(pong):
    verdicts = verify(pong[0])
    assert [v.status for v in verdicts] == ["reproduced"] * 4, verdicts
    assert [v.steps for v in verdicts] == [100] * 4 and [v.start for v in verdicts] == ["seed"] + ["snapshot"] * 3


def test_pong_without_its_snapshot_says_to_record_one(pong):
    first, *unseeded = verify(pong[1])
    assert first.status == "reproduced" and first.start == "seed"  # a seeded reset seeds the emulator too
    for v in unseeded:
        assert v.start == "rng" and v.status in ("diverged", "cannot_replay"), v
        assert v.status == "cannot_replay" or (v.step is not None and v.step > 0 and v.field is not None)
        assert "snapshot='ale'" in (v.hint or ""), v
    assert any(v.status == "diverged" for v in unseeded)  # the sticky actions fall differently


@pytest.fixture(scope="module")
def cheetah(tmp_path_factory):
    """HalfCheetah (no rendering while recording), short episodes, the first reset seeded."""
    need_mujoco()
    folder = tmp_path_factory.mktemp("cheetah")
    return folder, _record(folder, gym.make("HalfCheetah-v5", max_episode_steps=30), SEEDS)


def test_halfcheetah_reproduces_from_its_seed_and_np_random_states(cheetah):
    folder, episodes = cheetah
    assert episodes[0].rng is None and all(ep.rng is not None for ep in episodes[1:])
    verdicts = verify(folder)
    assert [(v.status, v.start, v.steps) for v in verdicts] == [("reproduced", "seed", 30)] + [("reproduced", "rng", 30)] * 3


@pytest.mark.timeout(90)
@pytest.mark.slow
def test_halfcheetah_renders_headless_later(cheetah, tmp_path):
    folder, episodes = cheetah
    need_headless_gl()
    argv = ["render", str(folder), "--episodes", "0,last:1", "--out", str(tmp_path), "--env-kwargs", "width=96", "height=96"]
    assert main(argv) == 0  # 0: every clip's replay reproduced the recording
    assert meta(tmp_path, "rl-video-episode-3")["replay"]["verdict"] == "reproduced"
    clips = {e: decode(tmp_path / f"rl-video-episode-{e}.mp4", 96, 96) for e in (0, 3)}
    assert [len(f) for f in clips.values()] == [episodes[0].length + 1, episodes[3].length + 1] == [31, 31]
    assert np.abs(clips[3][-1].astype(int) - clips[3][0]).mean() > 1  # the cheetah moves: frames of the episode
    # the seeded reset's frame is what a fresh env renders after that reset (x264 is lossy)
    env = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=96, height=96)
    env.reset(seed=0)
    expected = env.render()
    env.close()
    assert np.abs(clips[0][0].astype(int) - expected).mean() < 6


@pytest.mark.timeout(90)
@pytest.mark.slow
def test_an_evicted_start_verifies_from_the_first_kept_mujoco_snapshot(tmp_path):
    need_mujoco()
    (ep,) = _record(tmp_path, gym.make("HalfCheetah-v5", max_episode_steps=600), [1], snapshot="mujoco",
                    snapshot_every=25, batch_bytes=8_000, max_bytes=150_000, commit_interval=None)
    assert ep.first_step > 0 and ep.first_step + ep.length == 600
    first_kept = min(s.step for s in ep.snapshots if s.step >= ep.first_step)
    (v,) = verify(tmp_path)
    assert (v.status, v.start, v.from_step) == ("reproduced", "snapshot", first_kept), v
    assert v.steps == 600 - first_kept and v.steps > 0
