"""What replay needs, as recorded: the env's spec and versions in the manifest, ``np_random``'s state before
each unseeded reset, a snapshot hook's states (before resets, every N steps, across parts); and what a
reader makes of these fields when a folder was crafted."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import ClipReward

import envrec
from envrec.errors import ConfigError, TraceError
from envrec.formats.trace_format import read_manifest, write_manifest

from .support.batch_json import load_batch, stored_bytes

pytestmark = pytest.mark.timeout(120)


class Walk(gym.Env):
    """Observation: (t, a position that moves by a random amount each step); the randomness is np_random's."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 12) -> None:
        self.length, self.t, self.x = length, 0, 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, float(self.np_random.normal())
        return np.array([self.t, self.x]), {}

    def step(self, action):
        self.t += 1
        self.x += float(self.np_random.normal()) + action
        return np.array([self.t, self.x]), 1.0, self.t >= self.length, False, {"t": self.t}


class WalkState:
    """A snapshot hook of Walk's own state (importable as tests.test_replay_recorded:WALK_STATE)."""

    name = "tests.test_replay_recorded:WALK_STATE"

    def take(self, env) -> np.ndarray:
        return np.array([env.unwrapped.t, env.unwrapped.x])

    def restore(self, env, state) -> None:
        env.unwrapped.t, env.unwrapped.x = int(state[0]), float(state[1])


WALK_STATE = WalkState()


def _cartpole_recording(folder: str) -> None:
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env = envrec.RecordVideo(env, os.path.join(folder, "videos"), episode_trigger=lambda e: e == 0)
    env = envrec.RecordTrace(ClipReward(env, -0.5, 0.5), folder)
    for episode in range(3):
        env.reset(seed=5 if episode == 0 else None)
        env.action_space.seed(episode)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            done = term or trunc
    env.close()


def test_cartpole_records_its_spec_versions_and_unseeded_rng_states(tmp_path):
    folder = str(tmp_path)
    _cartpole_recording(folder)
    reader = envrec.TraceReader(folder)
    described = reader.recordings[0].manifest["env"]
    spec = described["spec"]
    assert spec["id"] == "CartPole-v1" and spec["kwargs"] == {"render_mode": "rgb_array"} and described["spec_error"] is None
    wrappers = [w["entry_point"] for w in spec["additional_wrappers"]]
    assert any(w.endswith(":ClipReward") for w in wrappers) and not any("RecordVideo" in w for w in wrappers), wrappers
    assert described["versions"]["gymnasium"] == gym.__version__ and described["versions"]["numpy"] == np.__version__
    assert described["snapshot"] is None
    episodes = list(reader)
    assert [e.seed for e in episodes] == [5, None, None]
    assert episodes[0].rng is None and all(e.rng["bit_generator"] == "PCG64" for e in episodes[1:])
    assert episodes[1].rng != episodes[2].rng and all(e.reset_snapshot is None and e.snapshots == () for e in episodes)
    for e in episodes[1:]:  # the state recorded is the one the reset drew from: a fresh env given it resets the same
        fresh = gym.make("CartPole-v1").unwrapped
        fresh.np_random = np.random.Generator(np.random.PCG64())
        fresh.np_random.bit_generator.state = e.rng
        np.testing.assert_array_equal(fresh.reset()[0], e.observations[0])
    # the spec recreates the env, with the user's wrapper and without the recording ones
    remade = gym.make(gym.envs.registration.EnvSpec.from_json(json.dumps(spec)))
    assert isinstance(remade, ClipReward) and "RecordVideo" not in str(remade)
    remade.close()


def test_snapshots_before_resets_and_every_n_steps_across_parts(tmp_path):
    folder = str(tmp_path)
    env = envrec.RecordTrace(Walk(length=12), folder, snapshot="tests.test_replay_recorded:WALK_STATE", snapshot_every=5,
                             batch_bytes=300, commit_interval=None)
    for episode in range(2):
        env.reset(seed=1 if episode == 0 else None)
        states, done = {}, False
        while not done:
            _, _, done, _, _ = env.step(1)
            states[env.unwrapped.t] = (env.unwrapped.t, env.unwrapped.x)
    env.close()
    reader = envrec.TraceReader(folder)
    assert reader.recordings[0].manifest["env"]["snapshot"] == {"name": "tests.test_replay_recorded:WALK_STATE", "every": 5}
    assert reader.recordings[0].manifest["env"]["spec"] is None and "gymnasium.make" in reader.recordings[0].manifest["env"]["spec_error"]
    first, last = reader[0], reader[1]
    assert len(first.parts) >= 2, "the episode was to be cut into parts"
    assert [s.step for s in last.snapshots] == [5, 10]
    for s in last.snapshots:
        np.testing.assert_array_equal(s.state, states[s.step])
        assert s.rng["bit_generator"] == "PCG64"
        np.testing.assert_array_equal(last.observations[s.step], s.state)  # the state of observation `step`
    assert first.reset_snapshot is not None and first.reset_snapshot.shape == (2,)
    np.testing.assert_array_equal(last.reset_snapshot, first.observations[-1])  # taken before the reset: the end of the last
    assert all(info == {"t": t} for t, info in enumerate(last.infos) if t), "a snapshot leaked into the infos"
    assert [s.step for s in first.snapshots] == [5, 10]
    assert [s.step for p in reader.iter_parts(0) for s in p.snapshots] == [5, 10]


def test_bad_snapshot_options_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="snapshot_every needs a snapshot hook"):
        envrec.RecordTrace(Walk(), str(tmp_path / "a"), snapshot_every=3)
    with pytest.raises(ConfigError, match="snapshot_every must be"):
        envrec.RecordTrace(Walk(), str(tmp_path / "b"), snapshot=WALK_STATE, snapshot_every=0)
    with pytest.raises(ConfigError, match="mujoco"):
        envrec.RecordTrace(Walk(), str(tmp_path / "c"), snapshot="no-such-hook")


@pytest.mark.parametrize(
    ("where", "value", "match"),
    [
        ("rng", [1, 2], "bit generator"),
        ("reset_snapshot", "abc", "an array"),
        ("snapshots", [{"step": 5, "state": {"__type": "numpy"}}, {"step": 5, "state": {"__type": "numpy"}}], "a step after 5"),
        ("snapshots", {"step": 1}, "a list"),
    ],
)
def test_crafted_episode_fields_are_trace_errors(tmp_path, where, value, match):
    folder = str(tmp_path)
    env = envrec.RecordTrace(Walk(length=3), folder, snapshot=WALK_STATE, name_prefix="w")
    env.reset()
    for _ in range(3):
        env.step(0)
    env.close()
    (path,) = [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("w.ep") and n.endswith(".json")]
    doc = load_batch(path)
    doc["episodes"][0][where] = value
    data = stored_bytes(path, json.dumps(doc).encode())
    with open(path, "wb") as f:
        f.write(data)
    manifest_path = os.path.join(folder, "w.manifest.json")
    manifest = read_manifest(manifest_path)
    manifest["batches"][0]["json_bytes"] = len(data)
    write_manifest(manifest_path, manifest)
    with pytest.raises(TraceError, match=match):
        list(envrec.TraceReader(folder, verify=False))


@pytest.mark.parametrize(
    ("value", "match"),
    [("CartPole", "env: 'CartPole' is not an object"), ({"spec": 3}, "env.spec"), ({"snapshot": {"name": "x", "every": 0}}, "every")],
)
def test_crafted_manifest_env_is_a_trace_error(tmp_path, value, match):
    folder = str(tmp_path)
    env = envrec.RecordTrace(Walk(length=2), folder, name_prefix="w")
    env.reset(seed=0)
    env.step(0)
    env.close()
    path = os.path.join(folder, "w.manifest.json")
    manifest = read_manifest(path)
    manifest["env"] = value
    write_manifest(path, manifest)
    with pytest.raises(TraceError, match=match):
        envrec.TraceReader(folder)
