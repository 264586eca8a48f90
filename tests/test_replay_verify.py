"""``envrec verify`` and ``envrec.replay.verify``: recordings replayed from their recorded reset states and
compared step by step; the verdicts, the file they are stored in, the selection grammar, parallel jobs."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import gymnasium as gym
import pytest

import envrec
from envrec.cli import main
from envrec.errors import ConfigError, TraceError
from envrec.replay import Verdict, select_episodes, verify
from envrec.replay.selection import EpisodeRef, episode_refs, parse_selection
from envrec.replay.verdict_text import inspect_line
from envrec.replay.verdicts import read_verdicts, verdict_path

from .support.envs import register_drift

pytestmark = pytest.mark.timeout(120)


def _record(folder, env, seeds):
    """Record one episode per seed (None: an unseeded reset) of ``env`` with sampled actions; the prefix."""
    return _record_into(envrec.RecordTrace(env, folder), seeds)


def _record_into(env, seeds):
    """Step ``env`` (a ``RecordTrace``) through one episode per seed, then close it; its prefix."""
    env.action_space.seed(0)
    for seed in seeds:
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    env.close()
    return env.recorder.prefix


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    """30 CartPole episodes, only the first reset with a seed."""
    folder = tmp_path_factory.mktemp("cartpole")
    return folder, _record(folder, gym.make("CartPole-v1"), [7] + [None] * 29)


@pytest.fixture(scope="module")
def drift(tmp_path_factory):
    """A registered env drawing from Python's ``random`` at step 5: one seeded and two unseeded episodes."""
    folder = tmp_path_factory.mktemp("drift")
    return folder, _record(folder, gym.make(register_drift(), hidden_at=5), [0, None, None])


@pytest.fixture(scope="module")
def vanished(tmp_path_factory):
    """An env whose entry point's module is gone by the time it is verified (seeds 0, 1, 2)."""
    folder = tmp_path_factory.mktemp("vanished")
    (folder / "vanishing_envs.py").write_text("from tests.support.envs import DriftEnv\n")
    sys.path.insert(0, str(folder))
    try:
        gym.register("envrec-test/Vanishing-v0", entry_point="vanishing_envs:DriftEnv", max_episode_steps=50)
        prefix = _record(folder, gym.make("envrec-test/Vanishing-v0"), [0, 1, 2])
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("vanishing_envs", None)
        gym.registry.pop("envrec-test/Vanishing-v0", None)
    os.remove(folder / "vanishing_envs.py")
    return folder, prefix


def test_cartpole_reproduces_every_episode_seeded_or_not_and_stores_the_verdicts(cartpole):
    folder, prefix = cartpole
    verdicts = verify(folder)
    assert [v.status for v in verdicts] == ["reproduced"] * 30
    assert [v.start for v in verdicts] == ["seed"] + ["rng"] * 29
    lengths = [ep.length for ep in envrec.TraceReader(folder)]
    assert [v.steps for v in verdicts] == lengths and sum(lengths) > 30 * 9
    stored = read_verdicts(folder, prefix)
    assert stored is not None and stored.episodes == {v.episode_id: v for v in verdicts}
    alone = verify(folder, "17")  # no episode before it to continue np_random from: its recorded state does
    assert [(v.episode_id, v.status, v.start) for v in alone] == [(17, "reproduced", "rng")]


def test_two_jobs_give_the_verdicts_of_one_and_selection_picks_by_outcome(cartpole):
    folder, _ = cartpole
    one = verify(folder, "worst:3,best:2,failed", jobs=1)
    two = verify(folder, "worst:3,best:2,failed", jobs=2)
    assert [v.to_json() for v in two] == [v.to_json() for v in one]
    reader = envrec.TraceReader(folder)
    terminated = [ep.episode_id for ep in reader if ep.ended_by == "terminated"]
    assert [v.episode_id for v in one] == terminated  # CartPole's random episodes all fail before step 500
    read = [EpisodeRef(ep.index, ep.episode_id, ep.total_reward, ep.ended_by, ep.length, ep.first_step) for ep in reader]
    assert episode_refs(reader) == read  # listed from the batches' records, as reading each episode gives them


def test_hidden_randomness_is_found_at_its_step_and_field(drift, capsys):
    folder, prefix = drift
    verdicts = verify(folder)
    assert [(v.status, v.start, v.step, v.field, v.where) for v in verdicts] == [
        ("diverged", start, 5, "observations", "[2]") for start in ("seed", "rng", "rng")]
    assert all(v.difference is not None and 0 < v.difference < 1 for v in verdicts)
    assert all(isinstance(v.recorded, float) and abs(v.recorded - v.replayed) == pytest.approx(v.difference) for v in verdicts)
    assert main(["verify", str(folder), "--episodes", "1"]) == 1
    out = capsys.readouterr().out
    assert f"{prefix} episode 1: diverged at step 5: observations[2]" in out and "0 reproduced, 1 diverged" in out
    assert re.search(r"replayed [0-9.]+ \(largest difference in observations: 0\.[0-9]+\)\n", out), out
    assert main(["verify", str(folder), "--episodes", "0", "--atol", "1", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["reproduced"] == 1 and printed["verdicts"][0]["status"] == "reproduced"
    assert read_verdicts(folder, prefix).episodes[0].status == "reproduced"  # the newer verdict replaced the older


def test_an_env_that_cannot_be_recreated_names_make_and_make_then_works(vanished, capsys):
    folder, _ = vanished
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out
    assert out.count(": cannot replay: ") == 3 and "'envrec-test/Vanishing-v0' is not registered here" in out, out
    assert "--make module:function" in out
    assert main(["verify", str(folder), "--make", "tests.support.envs:make_drift", "--infos", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [v["status"] for v in printed["verdicts"]] == ["reproduced"] * 3


@pytest.mark.timeout(90)
def test_a_job_whose_process_dies_gives_cannot_replay_for_that_episode_only(vanished):
    folder, _ = vanished
    verdicts = verify(folder, jobs=2, make="tests.support.envs:make_crashing")
    assert [v.status for v in verdicts] == ["reproduced", "cannot_replay", "reproduced"]
    assert "process died" in verdicts[1].reason


@pytest.mark.timeout(60)
def test_a_job_that_hangs_is_given_up_on_after_its_timeout(vanished):
    folder, _ = vanished
    verdicts = verify(folder, jobs=2, make="tests.support.envs:make_hanging", timeout=3)
    assert [v.status for v in verdicts] == ["reproduced", "cannot_replay", "reproduced"]
    assert "no result within 3 s" in verdicts[1].reason


def test_selection_grammar():
    refs = [EpisodeRef(i, i + 10, r, e, 5, 0) for i, (r, e) in enumerate(
        [(3.0, "terminated"), (1.0, "truncated"), (None, "terminated"), (9.0, "truncated"), (1.0, "terminated")])]

    def ids(sel):
        return [r.episode_id for r in select_episodes(refs, sel)]

    assert ids("all") == ids("10-14") == [10, 11, 12, 13, 14]
    assert ids("13,11") == [11, 13] and ids(" 12 , 12-13 ") == [12, 13]
    assert ids("worst:2") == [11, 14] and ids("best:1") == [13] and ids("worst:9") == [10, 11, 13, 14]
    assert ids("failed") == [10, 12, 14] and ids("last:2") == [13, 14] and ids("every:4") == [12]
    assert ids("best:1,failed,last:1") == [10, 12, 13, 14]
    for bad in ("", "worst", "worst:0", "7-5", "3,,4", "first:2", "-3", "every:x"):
        with pytest.raises(ConfigError, match="episode selection|selection must not be empty") as err:
            parse_selection(bad)
        assert "worst:K" in str(err.value) or "backwards" in str(err.value) or "at least 1" in str(err.value)
    with pytest.raises(ConfigError, match=r"no episode 9 \(the recording's ids run 10-14\)"):
        select_episodes(refs, "9")
    with pytest.raises(ConfigError, match="no episode 15, 16 "):
        select_episodes(refs, "13-16")
    for bad in ("1-99999999999999999999", "worst:9223372036854775808", "\uff11", "1-\uff12"):  # beyond 2**63 - 1, fullwidth
        with pytest.raises(ConfigError, match="beyond the largest|unknown episode selection term"):
            parse_selection(bad)
    assert ids("0000000000000000000000011") == [11]


def test_a_huge_id_range_is_not_enumerated():
    import tracemalloc

    refs = [EpisodeRef(i, i, 1.0, "truncated", 5, 0) for i in range(30)]
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=r"no episode 30, 31, 32, 33, 34 \.\.\. \(the recording's ids run 0-29\)"):
            select_episodes(refs, "12-1000000")
        assert len(select_episodes(refs, f"25-{2**63 - 1}", missing_ok=True)) == 5
        assert tracemalloc.get_traced_memory()[1] < 1 << 20  # a list of the missing ids would take ~40 MB
    finally:
        tracemalloc.stop()


def test_bad_arguments_exit_2(cartpole, capsys):
    folder, _ = cartpole
    assert main(["verify", str(folder), "--episodes", "nope:3"]) == 2
    assert "unknown episode selection term 'nope:3'" in capsys.readouterr().err
    assert main(["verify", str(folder), "--episodes", "99"]) == 2
    assert main(["verify", str(folder / "missing")]) == 2
    assert main(["verify", str(folder), "--make", "nosuch_module:make"]) == 2
    assert "cannot import 'nosuch_module'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(folder), "--jobs", "0"])
    assert exit_.value.code == 2


def test_a_crafted_verdict_file_is_a_clear_error(tmp_path, cartpole):
    folder, prefix = cartpole
    good = Verdict(prefix, 3, 3, "diverged", steps=4, step=4, field="rewards", recorded=1.0, replayed=2.0).to_json()
    path = verdict_path(tmp_path, prefix)
    for episodes, match in [({"3": {**good, "status": "fine"}}, "'status' has a wrong value"),
                            ({"3": {**good, "step": None}}, "must name its step"),
                            ({"4": good}, "holds the verdict of episode 3"),
                            ({"3": {**good, "extra": 1}}, "unknown verdict key"),
                            ({"3": {**good, "episode_id": True}}, "'episode_id' has a wrong value")]:
        with open(path, "w") as f:
            json.dump({"version": 1, "verified_at": "now", "envrec": "0", "atol": 0, "infos": False, "episodes": episodes}, f)
        with pytest.raises(TraceError, match=match):
            read_verdicts(tmp_path, prefix)
    with open(path, "w") as f:
        f.write("[1, 2")
    with pytest.raises(TraceError, match="not JSON"):
        read_verdicts(tmp_path, prefix)
    with open(path, "w") as f:
        f.write("[" * 100_000)
    with pytest.raises(TraceError, match="nested too deep"):
        read_verdicts(tmp_path, prefix)
    assert inspect_line(tmp_path, prefix, str(tmp_path), False).startswith("verdict file unreadable, not shown")
    os.remove(path)
    os.symlink(os.path.join(folder, prefix + ".manifest.json"), path)
    with pytest.raises(TraceError):
        read_verdicts(tmp_path, prefix)
    assert read_verdicts(tmp_path, "other") is None


def test_verify_refuses_to_overwrite_a_verdict_file_it_cannot_read(drift, capsys):
    folder, prefix = drift
    with open(verdict_path(folder, prefix), "w") as f:
        f.write('{"version": 7}')
    assert main(["verify", str(folder), "--episodes", "0"]) == 2
    assert "not a version 1 verdict file" in capsys.readouterr().err
    os.remove(verdict_path(folder, prefix))


@pytest.mark.timeout(180)
@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_ray_tasks_give_the_verdicts_of_one_process(cartpole):
    import ray

    folder, _ = cartpole
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    try:
        on_ray = verify(folder, "0-5", ray=True)
    finally:
        ray.shutdown()
    assert [v.to_json() for v in on_ray] == [v.to_json() for v in verify(folder, "0-5")]


def test_episodes_start_from_snapshots_at_the_reset_or_mid_episode(tmp_path):
    from envrec.replay.engine import CannotReplay, Replay, compare, plan_start, snapshot_hook
    from envrec.replay.recreate import recreate_env

    from .support.envs import DRIFT_SNAPSHOT

    env = envrec.RecordTrace(gym.make(register_drift(), episode_len=10), tmp_path, snapshot=DRIFT_SNAPSHOT, snapshot_every=3)
    _record_into(env, [4, None])
    # the recorded hook is not one of envrec's: not imported from the folder, the unseeded episode replays from its rng
    assert [(v.status, v.start) for v in verify(tmp_path)] == [("reproduced", "seed"), ("reproduced", "rng")]
    assert [(v.status, v.start) for v in verify(tmp_path, snapshot=DRIFT_SNAPSHOT.name)] == [
        ("reproduced", "seed"), ("reproduced", "snapshot")]
    with pytest.raises(ConfigError, match="tests.support.envs:NOPE"):
        verify(tmp_path, snapshot="tests.support.envs:NOPE")
    reader = envrec.TraceReader(tmp_path)
    manifest, ep = reader.recordings[0].manifest, reader[1]
    with pytest.raises(CannotReplay, match="is not one of envrec's .ale, mujoco.*--snapshot tests.support.envs:DRIFT_SNAPSHOT"):
        snapshot_hook(manifest)
    hook, made = snapshot_hook(manifest, DRIFT_SNAPSHOT.name), recreate_env(manifest)
    assert hook is DRIFT_SNAPSHOT and [s.step for s in ep.snapshots] == [3, 6, 9]

    def replayed(episode, **how):
        start = plan_start(episode, hook, **how)
        steps = list(Replay(made, episode, start, hook))
        return start.from_step, [s.step for s in steps], [compare(s) for s in steps]

    assert replayed(ep, from_step=7) == (6, [6, 7, 8, 9, 10], [None] * 5)
    rows = slice(4, None)  # as when a disk budget evicted the first 4 steps: the first kept snapshot is step 6
    evicted = dataclasses.replace(ep, observations=ep.observations[rows], actions=ep.actions[rows], rewards=ep.rewards[rows],
                                  terminations=ep.terminations[rows], truncations=ep.truncations[rows],
                                  infos=ep.infos[rows], first_step=4, length=ep.length - 4)
    assert replayed(evicted) == (6, [6, 7, 8, 9, 10], [None] * 5)
    with pytest.raises(CannotReplay, match="first 4 steps were not kept"):
        plan_start(dataclasses.replace(evicted, snapshots=()), hook)
    no_rng = dataclasses.replace(ep, snapshots=tuple(dataclasses.replace(s, rng=None) for s in ep.snapshots))
    steps = Replay(made, no_rng, plan_start(no_rng, hook, from_step=3), hook)  # np_random not restored: step 4 differs
    assert next(d for s in steps if (d := compare(s))).step == 4


def test_the_first_difference_names_where_and_by_how_much():
    import numpy as np

    from envrec.formats.infos import Unrepresentable
    from envrec.replay.compare import first_difference

    nan = float("nan")
    recorded = {"pos": np.array([0.5, 1.0, nan], np.float32), "id": 3, "names": ("a", "b")}
    assert first_difference(recorded, {"pos": np.array([0.5, 1.0, nan]), "id": 3, "names": ["a", "b"]}) is None
    assert first_difference(recorded, {**recorded, "pos": np.array([0.5, 1.25, 1.0])}) == ("['pos'][1]", 1.0, 1.25, 0.25)
    assert first_difference(recorded, {**recorded, "pos": np.array([0.5, 1.0, 1.0])}) == ("['pos'][2]", "nan", 1.0, None)
    assert first_difference(recorded["pos"], np.array([0.5, 3.0, 1.0]))[3] == 2.0  # the largest finite
    assert first_difference(recorded, {**recorded, "pos": np.array([0.5, 1.25, nan])}, atol=0.3) is None
    assert first_difference(recorded, {**recorded, "names": ("a", "c")}) == ("['names'][1]", "b", "c", None)
    assert first_difference(recorded, {**recorded, "pos": np.zeros(2)}) == ("['pos']", "shape (3,)", "shape (2,)", None)
    assert first_difference(recorded, {"pos": recorded["pos"], "id": 3}) == ("['names']", ["a", "b"], "<missing>", None)
    assert first_difference(np.arange(6).reshape(2, 3), np.array([[0, 1, 2], [3, 9, 5]])) == ("[1, 1]", 4, 9, 5.0)
    assert first_difference(2**62 + 1, 2**62) == ("", 2**62 + 1, 2**62, 1.0)  # exact beyond float64
    assert first_difference({"fn": Unrepresentable("builtins.function", "<fn>")}, {"fn": print}) is None


def _crafted_copy(folder, out, change_manifest=None, change_batch=None):
    """A copy of a one-batch recording whose manifest and first batch JSON the callbacks rewrote (its checksum
    kept right: the folder is crafted, not damaged in transit) in ``out``."""
    import zlib

    from envrec.formats.trace_format import read_manifest, write_manifest

    out.mkdir()
    for name in os.listdir(folder):
        if not name.endswith(".verify.json"):
            (out / name).write_bytes((folder / name).read_bytes())
    path = str(next(out.glob("*.manifest.json")))
    manifest = read_manifest(path)
    if change_batch:
        entry = manifest["batches"][0]
        doc = json.loads((out / entry["fn"]).read_bytes())
        change_batch(doc)
        data = json.dumps(doc).encode()
        (out / entry["fn"]).write_bytes(data)
        entry.update(json_bytes=len(data), json_crc32=zlib.crc32(data))
    if change_manifest:
        change_manifest(manifest)
    write_manifest(path, manifest)
    return out


def test_a_crafted_folder_with_one_id_twice_is_refused(cartpole, tmp_path, capsys):
    folder, _ = cartpole
    _crafted_copy(folder, tmp_path / "c", change_batch=lambda doc: doc["episodes"][1].update(episode_id=0))
    assert main(["verify", str(tmp_path / "c"), "--episodes", "0"]) == 2
    assert "two episodes have the id 0: the folder is damaged or crafted" in capsys.readouterr().err


def test_what_cannot_replay_says_at_the_reset_the_spec_once_and_its_missing_keys(cartpole, tmp_path, caplog):
    from envrec.replay import recreate

    folder, _ = cartpole

    class Failing(gym.Wrapper):
        def reset(self, **kwargs):
            raise RuntimeError("no reset")

    (v,) = verify(folder, "3", make=lambda **kw: Failing(gym.make("CartPole-v1")))
    assert v.status == "cannot_replay" and v.reason == "replaying raised RuntimeError at the reset: no reset"
    _crafted_copy(folder, tmp_path / "empty", change_manifest=lambda m: m["env"].update(spec={}))
    (v,) = verify(tmp_path / "empty", "0")
    assert "is not a Gymnasium EnvSpec: it has no 'id' and no 'additional_wrappers' key" in v.reason
    _crafted_copy(folder, tmp_path / "old", change_manifest=lambda m: m.pop("env"))  # as an older envrec's
    recreate._WARNED.clear()
    with caplog.at_level("WARNING", logger="envrec.replay.recreate"):
        assert [v.status for v in verify(tmp_path / "old", "0-2")] == ["reproduced"] * 3
    assert sum("has no recorded env spec" in r.getMessage() for r in caplog.records) == 1
