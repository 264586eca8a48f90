"""Recording real environments through the real worker, then reading back bit for bit."""

from __future__ import annotations

import glob
import json
import math
import mmap
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.formats.infos import Unrepresentable

from .support.envs import SPACES, Capture, SpaceEnv
from .support.episodes import run_episodes


def record(env, folder, episodes=3, seed=0, **kwargs):
    cap = Capture(env)
    rec = envrec.RecordTrace(cap, folder, **kwargs)
    run_episodes(rec, episodes, seed, action_seed=seed)
    rec.close()
    return cap.episodes, rec


def assert_bit_exact(space, recorded, reference):
    if isinstance(space, S.Dict):
        assert set(recorded) == set(space.spaces)
        for k, sub in space.spaces.items():
            assert_bit_exact(sub, recorded[k], [x[k] for x in reference])
    elif isinstance(space, S.Tuple):
        assert isinstance(recorded, tuple) and len(recorded) == len(space.spaces)
        for i, sub in enumerate(space.spaces):
            assert_bit_exact(sub, recorded[i], [x[i] for x in reference])
    elif isinstance(space, S.Text):
        assert recorded == reference
    else:
        dtype = np.dtype(np.int64) if isinstance(space, S.Discrete) else space.dtype
        expected = np.stack([np.asarray(x, dtype=dtype) for x in reference])
        assert recorded.dtype == expected.dtype.newbyteorder("<") or recorded.dtype == expected.dtype
        assert recorded.shape == expected.shape
        assert recorded.tobytes() == expected.tobytes()  # bit for bit: NaN payloads and -0.0 included


def same(a, b) -> bool:
    """Equality that treats NaN as equal to NaN and compares numpy values by dtype and bytes."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, (np.ndarray, np.generic)):
        return type(a) is type(b) and a.dtype == b.dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def expected_info(info):
    out = dict(info)
    if "obj" in out:
        out["obj"] = Unrepresentable("builtins.type", repr(object))
    return out


@pytest.mark.parametrize("name", sorted(SPACES))
def test_every_space_type_reads_back_bit_exact(tmp_path, name):
    space = SPACES[name]
    env = SpaceEnv(space, action_space=space)
    reference, _rec = record(env, tmp_path, episodes=3)
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == 3
    for ref, ep in zip(reference, reader, strict=True):
        n = len(ref["act"])
        assert ep.length == n
        assert_bit_exact(space, ep.observations, ref["obs"])
        assert_bit_exact(space, ep.actions, ref["act"])
        assert ep.rewards.dtype == np.float64
        assert ep.rewards.tobytes() == np.array(ref["rew"], dtype=np.float64).tobytes()
        assert ep.terminations.tolist() == ref["term"] and ep.truncations.tolist() == ref["trunc"]
        assert ep.complete and ep.ended_by == "terminated"
        assert len(ep.infos) == n + 1
        for got, want in zip(ep.infos, ref["info"], strict=True):
            assert same(got, expected_info(want)), (got, want)
    assert [ep.seed for ep in reader] == [0, 1, 2]


def test_batch_files_are_strict_json_with_aligned_little_endian_arrays(tmp_path):
    record(SpaceEnv(SPACES["box_f32_nan"]), tmp_path, episodes=4, batch_bytes=1)
    manifests = glob.glob(str(tmp_path / "*.manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(open(manifests[0]).read(), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert manifest["complete"] and manifest["closed_cleanly"] and manifest["format"] == "envrec.trace"
    assert len(manifest["batches"]) > 4  # batch_bytes=1: a batch per step, each episode in parts (part keys: strict JSON too)
    for b in manifest["batches"]:
        text = open(tmp_path / b["fn"]).read()
        batch = json.loads(text, parse_constant=lambda c, fn=b["fn"]: pytest.fail(f"bare {c} in {fn}"))
        for ep in batch["episodes"]:
            for key in ("observations", "actions", "rewards", "terminations", "truncations"):
                d = ep[key]
                assert d["__type"] == "ndarray" and d["npyoff"] % 8 == 0 and d["npyfile"] == b["bin"]
                assert d["dtype"][0] in "<|"  # explicit little-endian (or byte-sized) dtype strings


def gym_recording_playback(folder) -> list[tuple]:
    """(observations, actions, rewards) of each episode, read the way openai/gym-recording's playback.py does."""
    got = []

    def load_npy(o, maps):
        fn = o["npyfile"]
        if fn not in maps:
            with open(os.path.join(folder, fn), "rb") as f:
                maps[fn] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return np.ndarray.__new__(np.ndarray, o["shape"], dtype=o["dtype"], buffer=maps[fn], offset=o["npyoff"], order="C")

    maps = {}
    hook = lambda o: load_npy(o, maps) if o.get("__type", None) == "ndarray" else o
    for manifest_fn in glob.glob(os.path.join(folder, "openaigym.trace.*.manifest.json")):
        for batch in json.load(open(manifest_fn))["batches"]:
            for ep in json.load(open(os.path.join(folder, batch["fn"])), object_hook=hook)["episodes"]:
                got.append((ep["observations"], ep["actions"], ep["rewards"]))
    return got


def test_gym_recording_playback_algorithm_reads_envrec_traces(tmp_path):
    """Read the way openai/gym-recording's playback.py does, step by step, and compare (image observations:
    uncompressed only with compression=None)."""
    reference, _ = record(SpaceEnv(SPACES["box_u8_image"], action_space=S.Discrete(4)), tmp_path, episodes=3, compression=None)
    got = gym_recording_playback(tmp_path)
    assert len(got) == 3
    for (obs, act, rew), ref in zip(got, reference, strict=True):
        assert obs.tobytes() == np.stack(ref["obs"]).tobytes() and obs.shape == (len(ref["obs"]), 7, 5, 3)
        assert act.tolist() == [int(a) for a in ref["act"]]
        assert rew.tobytes() == np.array(ref["rew"], dtype=np.float64).tobytes()


def test_cartpole_under_the_default_compression_is_read_by_gym_recordings_playback(tmp_path):
    """compression="auto" leaves small vector arrays raw: nothing compressed, plain .json batches."""
    reference, _ = record(gym.make("CartPole-v1"), tmp_path, episodes=3, seed=5)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".zst")]
    got = gym_recording_playback(tmp_path)
    assert len(got) == 3
    for (obs, act, rew), ref in zip(got, reference, strict=True):
        assert obs.tobytes() == np.stack(ref["obs"]).tobytes()
        assert act.tolist() == [int(a) for a in ref["act"]] and rew.tolist() == [float(r) for r in ref["rew"]]


def test_scan_recorded_traces_has_gym_recordings_signature(tmp_path):
    reference, _ = record(SpaceEnv(SPACES["box_f64_2d"], nan=False), tmp_path, episodes=4)
    seen = []
    envrec.scan_recorded_traces(tmp_path, lambda o, a, r: seen.append((o.shape, a.shape, r.shape)), max_episodes=3)
    assert seen == [((len(e["obs"]), 2, 3), (len(e["act"]),), (len(e["act"]),)) for e in reference[:3]]


def test_cartpole_records_numpy_scalar_actions_and_random_access(tmp_path):
    reference, rec = record(gym.make("CartPole-v1"), tmp_path, episodes=5, seed=3)
    assert rec.directory == str(tmp_path)
    reader = envrec.TraceReader(tmp_path)
    assert len(reader) == 5
    for i in (4, 0, -1, 2):
        ep, ref = reader[i], reference[i]
        assert ep.actions.dtype == np.int64 and ep.actions.tolist() == [int(a) for a in ref["act"]]
        assert ep.observations.tobytes() == np.stack(ref["obs"]).tobytes()
        assert ep.total_reward == float(len(ref["act"]))
    with pytest.raises(IndexError):
        reader[5]
    obs = reader[0].observations
    assert not obs.flags.writeable and not obs.flags.owndata  # memory-mapped, not copied


def test_partial_episode_at_close_is_kept_and_marked(tmp_path):
    env = envrec.RecordTrace(SpaceEnv(SPACES["box_f32_nan"], episode_len=100), tmp_path)
    env.reset(seed=1)
    for _ in range(5):
        env.step(env.action_space.sample())
    env.close()
    ep = envrec.TraceReader(tmp_path)[0]
    assert ep.length == 5 and ep.observations.shape == (6, 4)
    assert not ep.complete and ep.ended_by == "close"


def test_episode_ended_by_a_new_reset_is_recorded_as_such(tmp_path):
    env = envrec.RecordTrace(SpaceEnv(SPACES["discrete"], episode_len=100), tmp_path)
    env.reset(seed=0)
    env.step(0)
    env.reset(options={"level": 2})
    env.step(1)
    env.step(2)
    env.close()
    r = envrec.TraceReader(tmp_path)
    assert [(e.length, e.ended_by, e.options) for e in r] == [(1, "reset", None), (2, "close", {"level": 2})]
