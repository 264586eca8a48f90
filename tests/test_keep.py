"""envrec.keep: the k best/worst clips of a run (discarding earlier ones), failures, successes, any_of — on real
encoders and files, the true returns read back from a trace recorded alongside."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode

import envrec
from envrec.errors import ConfigError
from envrec.formats.clip_meta import is_clip_file
from envrec.formats.ownfolder import OwnFolder
from envrec.record.clip_state import delete_clip_files

from .support.envs import ColourEnv
from .support.episodes import run_episodes
from .support.video import decode
from .support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

PREFIX = "rl-video"


def clips_on_disk(folder) -> dict[int, set[str]]:
    """episode id -> the files of its clip in ``folder`` (``.mp4``, ``.meta.json``)."""
    found: dict[int, set[str]] = {}
    for name in os.listdir(folder):
        if name.startswith(f"{PREFIX}-episode-"):
            stem = name.split(".", 1)[0]
            found.setdefault(int(stem.rsplit("-", 1)[1]), set()).add(name[len(stem):])
    return found


class ReturnsEnv(ColourEnv):
    """Episode k lasts ``length`` steps and returns ``returns[k]`` (all on its last step); ``ends[k]`` says how
    it ends ("terminated" or "truncated"), ``infos[k]`` is its last step's info."""

    def __init__(self, returns, length=4, ends=None, infos=None):
        super().__init__(episode_len=length)
        self.returns, self.ends, self.infos = list(returns), ends, infos

    def step(self, action):
        self.t += 1
        last = self.t >= self.episode_len
        end = (self.ends or ["terminated"] * len(self.returns))[self.episode]
        info = dict(self.infos[self.episode]) if self.infos and last else {}
        reward = float(self.returns[self.episode]) if last else 0.0
        return 0, reward, last and end == "terminated", last and end == "truncated", info


def record(env, keep_if, episodes, folder, **kwargs):
    env = envrec.RecordVideo(env, str(folder), episode_trigger=lambda e: True, keep_if=keep_if, **kwargs)
    run_episodes(env, episodes)
    env.close()
    return env.stats()


@pytest.mark.parametrize("preset", ["best", pytest.param("worst", marks=pytest.mark.slow)])
def test_best_and_worst_leave_exactly_the_k_clips_the_trace_ranks_so(tmp_path, preset):
    """CartPole with random actions: after close the clips on disk are the 2 best (worst) episodes by the
    returns the trace recorded, every other one evicted or discarded and counted."""
    keeper = getattr(envrec.keep, preset)(2)
    closed = []
    env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), str(tmp_path),
                             episode_trigger=lambda e: True, keep_if=keeper,
                             on_clip_closed=lambda path, meta: closed.append(meta["episode_id"]))
    env = envrec.RecordTrace(env, tmp_path)
    episodes = 10
    run_episodes(env, episodes, action_seed=0)
    env.close()
    returns = {ep.episode_id: ep.total_reward for ep in envrec.TraceReader(tmp_path)}
    assert len(returns) == episodes and len(set(returns.values())) > 2  # the returns vary
    sign = 1 if preset == "best" else -1
    expected = sorted(returns, key=lambda e: (-sign * returns[e], e))[:2]  # ties: the earlier first
    on_disk = clips_on_disk(tmp_path)
    assert set(on_disk) == set(expected), (returns, on_disk)
    assert all(files == {".mp4", ".meta.json"} for files in on_disk.values())
    for e in expected:  # whole, playable clips of those episodes: the reset frame and one a step
        assert decode(tmp_path / f"{PREFIX}-episode-{e}.mp4", 600, 400).shape[0] == returns[e] + 1
    assert keeper.discarded >= 1  # not vacuous: a clip kept earlier was displaced and deleted
    assert [o.episode_id for o in keeper.kept] == expected
    assert [o.clip for o in keeper.kept] == [f"{PREFIX}-episode-{e}" for e in expected]
    stats = env.env.stats()
    assert stats["clips_discarded"] == episodes - 2 and stats["clips_finished"] == episodes
    assert set(expected) <= set(closed)  # each clip kept at the end was reported once
    assert len(closed) == len(set(closed))


def test_ties_keep_the_earlier_clip_and_callbacks_see_only_clips_kept_then(tmp_path):
    keeper = envrec.keep.best(2)
    reported = []

    def on_clip_closed(path, meta):
        assert meta["name"] in [o.clip for o in keeper.kept]  # kept when reported
        assert os.path.exists(path)
        reported.append(meta["episode_id"])

    # e2 displaces e0 (5 > 3); e4 ties the kept 5s and is not kept; e5 displaces e2, the later of the two 5s
    stats = record(ReturnsEnv([3, 5, 5, 1, 5, 7]), keeper, 6, tmp_path, on_clip_closed=on_clip_closed)
    assert set(clips_on_disk(tmp_path)) == {1, 5}
    assert [(o.episode_id, o.episode_return) for o in keeper.kept] == [(5, 7.0), (1, 5.0)]
    assert keeper.discarded == 2 and stats["clips_discarded"] == 4
    assert {1, 5} <= set(reported)


def test_worst_with_fewer_episodes_than_k_keeps_them_all(tmp_path):
    stats = record(ReturnsEnv([2, 1]), envrec.keep.worst(3), 2, tmp_path)
    assert set(clips_on_disk(tmp_path)) == {0, 1} and stats["clips_discarded"] == 0


def test_nan_returns_are_the_last_kept(tmp_path):
    nan = float("nan")
    keeper = envrec.keep.best(1)
    record(ReturnsEnv([nan, 1, nan]), keeper, 3, tmp_path)
    assert set(clips_on_disk(tmp_path)) == {1}


def test_a_clip_discarded_while_still_encoding_goes_once_the_encoder_finished_it(tmp_path):
    """The encoder takes 40 ms a record: clip c0 is still being encoded when c1 displaces it; its files
    are deleted once the recorder sees it finished, with no on_clip_closed for it."""
    from envrec.contract.faults import FaultSpec

    keeper, closed = envrec.keep.best(1), []
    rec = envrec.VideoRecorder(tmp_path, fps=25, faults=FaultSpec(sleep_per_record_s=0.04),
                               on_clip_closed=lambda path, meta: closed.append(meta["name"]))
    keeper.attach(rec)
    frame = ColourEnv().render()
    for name, ret in (("c0", 1.0), ("c1", 2.0)):
        rec.start_clip(name, episode_id=int(name[1]))
        for t in range(40):
            rec.add_frame(frame, t)
        outcome = envrec.EpisodeOutcome(int(name[1]), ret, 40, True, False, {}, name)
        rec.end_clip(keep=keeper(outcome))
        if name == "c0":
            assert rec.stats()["clips_finished"] == 0  # 40 frames take the encoder over 1.6 s
    assert rec.stats()["clips_finished"] == 0  # c0 was discarded before the encoder finished it
    assert not os.path.exists(tmp_path / "c0.meta.json")
    assert wait_for(lambda: rec.poll() or rec.stats()["clips_finished"] >= 1, 30)
    rec.poll()
    assert not os.path.exists(tmp_path / "c0.mp4") and not os.path.exists(tmp_path / "c0.meta.json")
    rec.close()
    assert sorted(os.listdir(tmp_path)) == ["c1.meta.json", "c1.mp4"]
    assert closed == ["c1"]
    assert rec.stats()["clips_discarded"] == 1 and rec.stats()["clips_finished"] == 2


def test_a_clip_discarded_after_it_was_reported_goes_at_once(tmp_path):
    keeper, closed = envrec.keep.worst(1), []
    rec = envrec.VideoRecorder(tmp_path, fps=25, on_clip_closed=lambda path, meta: closed.append(meta["name"]))
    keeper.attach(rec)
    frame = ColourEnv().render()
    rec.start_clip("c0", episode_id=0)
    rec.add_frame(frame, 0)
    rec.end_clip(keep=keeper(envrec.EpisodeOutcome(0, 5.0, 1, True, False, {}, "c0")))
    assert wait_for(lambda: rec.poll() or closed == ["c0"], 30)
    assert keeper(envrec.EpisodeOutcome(1, 1.0, 1, True, False, {}, "c1"))  # worse: c0 is discarded, at once
    assert not os.path.exists(tmp_path / "c0.mp4") and not os.path.exists(tmp_path / "c0.meta.json")
    assert rec.stats()["clips_discarded"] == 1
    rec.close()  # c1 was never started: nothing else on disk
    assert os.listdir(tmp_path) == []


def test_a_disk_budget_no_longer_counts_a_clip_the_keeper_discarded(tmp_path):
    """keep_last_clips=2 with best(2): c1, discarded before c2 ends, is not counted, so the budget leaves c0
    (the best) alone instead of deleting it as the oldest of three."""
    keeper, closed = envrec.keep.best(2), []
    rec = envrec.VideoRecorder(tmp_path, fps=25, keep_last_clips=2, on_clip_closed=lambda p, m: closed.append(m["name"]))
    keeper.attach(rec)
    frame = ColourEnv().render()
    for k, ret in enumerate([9.0, 1.0, 2.0]):
        rec.start_clip(f"c{k}", episode_id=k)
        rec.add_frame(frame, 0)
        rec.end_clip(keep=keeper(envrec.EpisodeOutcome(k, ret, 1, True, False, {}, f"c{k}")))
        assert wait_for(lambda k=k: rec.poll() or len(closed) == k + 1, 30)
    rec.close()
    assert sorted(os.listdir(tmp_path)) == ["c0.meta.json", "c0.mp4", "c2.meta.json", "c2.mp4"]
    assert rec.stats()["clips_evicted"] == 0 and rec.stats()["clips_discarded"] == 1


def test_any_of_best_and_worst_keeps_a_clip_until_neither_holds_it(tmp_path):
    keeper = envrec.keep.any_of(envrec.keep.best(1), envrec.keep.worst(1))
    # e0 is both best and worst; e1 takes best, e0 stays (worst); e2 takes worst: e0 goes; e4 worst, e5 best
    stats = record(ReturnsEnv([4, 6, 2, 5, 1, 9]), keeper, 6, tmp_path)
    assert set(clips_on_disk(tmp_path)) == {4, 5}
    assert stats["clips_discarded"] == 4


def test_any_of_with_a_stateless_keeper_keeps_its_clips_for_good(tmp_path):
    keeper = envrec.keep.any_of(envrec.keep.best(1), envrec.keep.successes())
    ends = ["truncated", "terminated", "terminated", "terminated"]
    record(ReturnsEnv([1, 2, 3, 4], ends=ends), keeper, 4, tmp_path)
    assert set(clips_on_disk(tmp_path)) == {0, 3}  # e0 a success (kept for good though best discarded it), e3 the best


class AlternatingEnv(ColourEnv):
    """Even episodes terminate after 5 steps, odd ones are truncated after 12."""

    def step(self, action):
        self.t += 1
        short = self.episode % 2 == 0
        return 0, 1.0, short and self.t >= 5, not short and self.t >= 12, {}


def test_failures_are_terminated_episodes_and_successes_truncated_ones(tmp_path):
    stats = record(AlternatingEnv(), envrec.keep.failures(), 4, tmp_path / "f")
    assert set(clips_on_disk(tmp_path / "f")) == {0, 2} and stats["clips_discarded"] == 2
    stats = record(AlternatingEnv(), envrec.keep.successes(), 4, tmp_path / "s")
    assert set(clips_on_disk(tmp_path / "s")) == {1, 3} and stats["clips_discarded"] == 2


def test_is_success_in_the_last_info_decides_when_the_env_reports_it(tmp_path):
    # Fetch-like: every episode truncated at the time limit, info["is_success"] says how it went
    infos = [{"is_success": 1.0}, {"is_success": 0.0}, {"is_success": True}, {"is_success": False}]
    env = lambda: ReturnsEnv([0, 0, 0, 0], ends=["truncated"] * 4, infos=infos)
    record(env(), envrec.keep.successes(), 4, tmp_path / "s")
    record(env(), envrec.keep.failures(), 4, tmp_path / "f")
    assert set(clips_on_disk(tmp_path / "s")) == {0, 2}
    assert set(clips_on_disk(tmp_path / "f")) == {1, 3}


def test_your_own_rule_and_clips_cut_mid_episode(tmp_path):
    record(AlternatingEnv(), envrec.keep.failures(is_failure=lambda o: o.length > 5), 4, tmp_path / "own")
    assert set(clips_on_disk(tmp_path / "own")) == {1, 3}
    # clips of 3 frames end mid-episode: neither terminated nor truncated, so neither a failure nor a success
    for name, keeper in (("f", envrec.keep.failures()), ("s", envrec.keep.successes())):
        stats = record(AlternatingEnv(), keeper, 2, tmp_path / name, video_length=3)
        assert os.listdir(tmp_path / name) == [] and stats["clips_discarded"] == 2


def test_the_default_rules_on_outcomes():
    def o(terminated, truncated, info=None):
        return envrec.EpisodeOutcome(0, 1.0, 3, terminated, truncated, info or {})

    rules = envrec.keep.is_failure, envrec.keep.is_success
    assert [tuple(r(x) for r in rules) for x in (o(True, False), o(False, True), o(True, True), o(False, False))] == [
        (True, False), (False, True), (True, False), (False, False)]
    assert [tuple(r(o(False, True, {"is_success": s})) for r in rules) for s in (1, 0)] == [(False, True), (True, False)]
    assert [r(o(False, False, {"is_success": True})) for r in rules] == [False, False]  # not ended


@pytest.mark.parametrize("k", [0, -1, 2.0, True, "3", None])
@pytest.mark.parametrize("preset", ["best", "worst"])
def test_bad_k_is_a_config_error(preset, k):
    with pytest.raises(ConfigError, match=rf"envrec.keep.{preset}\(k\): k must be a positive integer"):
        getattr(envrec.keep, preset)(k)


def test_bad_rules_and_any_of_are_config_errors():
    with pytest.raises(ConfigError, match="is_failure must be callable"):
        envrec.keep.failures(is_failure="terminated")
    with pytest.raises(ConfigError, match="is_success must be callable"):
        envrec.keep.successes(is_success=3)
    with pytest.raises(ConfigError, match="two or more"):
        envrec.keep.any_of(envrec.keep.best(1))
    with pytest.raises(ConfigError, match="not callable"):
        envrec.keep.any_of(envrec.keep.best(1), "worst")


@pytest.mark.parametrize("preset", ["best", "worst", "failures", "successes"])
def test_the_factory_itself_as_keep_if_says_what_to_pass(tmp_path, preset):
    env = envrec.RecordVideo(ColourEnv(episode_len=2), str(tmp_path), episode_trigger=lambda e: True,
                             keep_if=getattr(envrec.keep, preset))
    try:
        with pytest.raises(ConfigError, match=rf"pass keep_if=envrec.keep.{preset}\("):
            run_episodes(env, 2)  # asked when the first clip ends, at the second reset
    finally:
        env.close()


def test_any_of_refuses_the_same_keeper_twice():
    keeper = envrec.keep.best(1)
    with pytest.raises(ConfigError, match="the same keeper twice"):
        envrec.keep.any_of(keeper, keeper)


def test_an_unattached_ranked_keeper_says_how_to_use_it():
    with pytest.raises(ConfigError, match=r"best\(2\) is not attached to a recorder: pass it as RecordVideo"):
        envrec.keep.best(2)(envrec.EpisodeOutcome(0, 1.0, 1, True, False, {}, "c0"))


def test_one_keeper_on_two_recorders_is_refused_and_the_second_worker_stopped(tmp_path):
    keeper = envrec.keep.best(1)
    first = envrec.RecordVideo(ColourEnv(), str(tmp_path / "a"), keep_if=keeper)
    with pytest.raises(ConfigError, match=r"best\(1\) already decides on another recorder's clips"):
        envrec.RecordVideo(ColourEnv(), str(tmp_path / "b"), keep_if=keeper)
    first.close()  # the leak fixture checks that the refused recorder's encoder is gone too


def test_a_discard_deletes_only_that_clips_own_files(tmp_path):
    """A metadata file that is not this recorder's clip is left alone; one naming another file deletes only
    itself and never that file."""
    (tmp_path / "victim.mp4").write_bytes(b"keep me")
    (tmp_path / "c0.mp4").write_bytes(b"clip")
    (tmp_path / "c0.meta.json").write_text(json.dumps({"version": 1, "name": "c0", "path": "c0.mp4", "recorder": "other"}))
    own = OwnFolder(str(tmp_path), is_clip_file)
    assert not delete_clip_files(own, "c0", "mine")
    assert sorted(os.listdir(tmp_path)) == ["c0.meta.json", "c0.mp4", "victim.mp4"]
    (tmp_path / "c0.meta.json").write_text(json.dumps({"version": 1, "name": "c0", "path": "victim.mp4", "recorder": "mine"}))
    assert delete_clip_files(own, "c0", "mine")
    assert sorted(os.listdir(tmp_path)) == ["c0.mp4", "victim.mp4"]
    assert not delete_clip_files(own, "c0", "mine")  # no metadata: nothing of the clip's to delete
    inner = tmp_path / "videos"
    inner.mkdir()
    (tmp_path / "up.mp4").write_bytes(b"outside")
    (tmp_path / "up.meta.json").write_text(json.dumps({"version": 1, "name": "../up", "path": "../up.mp4", "recorder": "mine"}))
    own.close()
    with OwnFolder(str(inner), is_clip_file) as own:
        assert not delete_clip_files(own, "../up", "mine")  # a name that leaves the folder deletes nothing
    assert sorted(os.listdir(tmp_path)) == ["c0.mp4", "up.meta.json", "up.mp4", "victim.mp4", "videos"]


def vector_clips(folder) -> dict[tuple[int, int], set[str]]:
    """(sub-env, episode) -> the files of its clip in ``folder``."""
    found: dict[tuple[int, int], set[str]] = {}
    for name in os.listdir(folder):
        if name.startswith(f"{PREFIX}-env"):
            stem = name.split(".", 1)[0]
            j, k = stem[len(PREFIX) + 4:].split("-episode-")
            found.setdefault((int(j), int(k)), set()).add(name[len(stem):])
    return found


@pytest.mark.parametrize("mode", [pytest.param(AutoresetMode.NEXT_STEP, marks=pytest.mark.slow), AutoresetMode.SAME_STEP],
                         ids=lambda m: m.value)
def test_vector_best_keeps_the_k_best_clips_of_all_sub_envs_together(tmp_path, mode):
    keeper = envrec.keep.best(2)
    venv = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}, render_mode="rgb_array")
    env = envrec.RecordVectorTrace(venv, tmp_path, name_prefix="vec")
    env = envrec.RecordVectorVideo(env, tmp_path, sub_envs=(0, 1, 2), episode_trigger=lambda e: True, keep_if=keeper)
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(150):
        env.step(env.action_space.sample())
    env.close()
    returns = {(j, ep.episode_id): ep.total_reward for j in range(3) for ep in envrec.TraceReader(tmp_path, prefix=f"vec.env{j}")}
    on_disk = vector_clips(tmp_path)
    assert len(on_disk) == 2 and all(files == {".mp4", ".meta.json"} for files in on_disk.values())
    assert sorted(returns[c] for c in on_disk) == sorted(returns.values())[-2:], (returns, on_disk)
    assert {(int(o.clip.split("-env")[1].split("-")[0]), o.episode_id) for o in keeper.kept} == set(on_disk)
    discarded = sum(env.stats()[f"env{j}"]["clips_discarded"] for j in range(3))
    assert keeper.discarded >= 1 and discarded == len(returns) - 2


@pytest.mark.parametrize("mode", [pytest.param(AutoresetMode.NEXT_STEP, marks=pytest.mark.slow), AutoresetMode.SAME_STEP],
                         ids=lambda m: m.value)
@pytest.mark.slow
def test_vector_failures_are_each_sub_envs_terminated_episodes(tmp_path, mode):
    venv = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}, render_mode="rgb_array")
    env = envrec.RecordVectorTrace(venv, tmp_path, name_prefix="vec")
    seen = []
    keeper = envrec.keep.failures(is_failure=lambda o: seen.append(o) or envrec.keep.is_failure(o))
    env = envrec.RecordVectorVideo(env, tmp_path, sub_envs=(0, 1), episode_trigger=lambda e: True, keep_if=keeper)
    env.reset(seed=1)
    env.action_space.seed(1)
    for _ in range(80):
        env.step(env.action_space.sample())
    env.close()
    episodes = [(j, ep) for j in range(2) for ep in envrec.TraceReader(tmp_path, prefix=f"vec.env{j}")]
    assert any(not ep.complete for _, ep in episodes)  # the last ones, cut by close: not failures
    assert set(vector_clips(tmp_path)) == {(j, ep.episode_id) for j, ep in episodes if ep.ended_by == "terminated"}
    # each outcome is its sub-env's episode as the trace has it (the next-step reset step belongs to none)
    assert sorted((o.clip, o.length, o.episode_return, o.terminated, o.truncated) for o in seen) == sorted(
        (f"{PREFIX}-env{j}-episode-{ep.episode_id}", ep.length, ep.total_reward, ep.ended_by == "terminated",
         ep.ended_by == "truncated") for j, ep in episodes)


@pytest.mark.parametrize("mode", [pytest.param(AutoresetMode.NEXT_STEP, marks=pytest.mark.slow), AutoresetMode.SAME_STEP],
                         ids=lambda m: m.value)
@pytest.mark.slow
def test_vector_is_success_comes_from_each_sub_envs_last_info(tmp_path, mode):
    """Same-step autoreset puts an episode's last info in info["final_info"]; next-step in the step's info."""
    flags = [[True, False, False, True, True, False], [False, True, True, False, False, False]]
    venv = gym.vector.SyncVectorEnv(
        [lambda f=f: ReturnsEnv([0] * 6, ends=["truncated"] * 6, infos=[{"is_success": x} for x in f]) for f in flags],
        autoreset_mode=mode)
    env = envrec.RecordVectorVideo(venv, tmp_path, sub_envs=(0, 1), episode_trigger=lambda e: True,
                                   keep_if=envrec.keep.successes())
    env.reset(seed=0)
    while min(env.episode.values()) < 4:  # until both sub-envs ended 4 episodes
        env.step(env.action_space.sample())
    env.close()
    assert set(vector_clips(tmp_path)) == {(j, k) for j in range(2) for k in range(4) if flags[j][k]}


def test_a_keep_if_that_raises_still_lets_close_stop_every_encoder(tmp_path):
    venv = gym.vector.SyncVectorEnv([ColourEnv, ColourEnv])
    env = envrec.RecordVectorVideo(venv, str(tmp_path), sub_envs=(0, 1), episode_trigger=lambda e: True,
                                   keep_if=lambda o: 1 / 0)
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    with pytest.raises(ZeroDivisionError):
        env.close()  # the leak fixture checks that both encoders are gone
    assert all(rec.closed for rec in env.recorders.values())


def test_one_keeper_on_two_vector_recorders_is_refused(tmp_path):
    keeper = envrec.keep.worst(1)
    make = lambda: gym.vector.SyncVectorEnv([ColourEnv, ColourEnv])
    first = envrec.RecordVectorVideo(make(), str(tmp_path / "a"), keep_if=keeper)
    second_env = make()
    with pytest.raises(ConfigError, match=r"worst\(1\) already decides on another recorder's clips"):
        envrec.RecordVectorVideo(second_env, str(tmp_path / "b"), keep_if=keeper)
    second_env.close()
    first.close()


def test_the_old_names_of_discarding_still_work_for_one_release_and_say_so(tmp_path):
    """``keeper.evicted`` and ``VideoRecorder.evict_clip`` (a keeper discards; a disk budget evicts) warn and still work."""
    keeper = envrec.keep.best(1)
    rec = envrec.VideoRecorder(str(tmp_path), fps=30)
    try:
        keeper.attach(rec)
        assert keeper(envrec.EpisodeOutcome(0, 1.0, 1, True, False, {}, "c0"))
        assert keeper(envrec.EpisodeOutcome(1, 2.0, 1, True, False, {}, "c1"))  # better: c0 is discarded
        with pytest.warns(DeprecationWarning, match="discarded"):
            assert keeper.evicted == keeper.discarded == 1
        with pytest.warns(DeprecationWarning, match="discard_clip"):
            rec.evict_clip("c1")  # no such clip on disk: nothing to delete, and no error
    finally:
        rec.close()
    from envrec.record.clip_triggers import ClipDiscarder, Evictor
    assert Evictor is ClipDiscarder
