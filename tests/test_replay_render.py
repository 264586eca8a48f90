"""``envrec render``: replayed episodes filmed later give the clips a live RecordVideo gave, frame for frame."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import jsonschema
import numpy as np
import pytest

import envrec
from envrec.cli import main
from envrec.errors import ConfigError
from envrec.replay.command import parse_env_kwargs
from envrec.replay.render import render, reset_steps
from envrec.viewer.catalog import Catalog

from .support.picture_env import register
from .support.video import decode, meta

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
with open(os.path.join(os.path.dirname(__file__), os.pardir, "docs", "schemas", "clip-meta.schema.json")) as _f:
    CLIP_META = jsonschema.Draft202012Validator(json.load(_f))

EPISODES = 6
CAP = 15  # steps: CartPole's random episodes then end either way, terminated or truncated


def _run(env, episodes: int, seed_all: bool) -> list[int]:
    """Step random actions through ``episodes`` episodes; their lengths."""
    env.action_space.seed(0)
    lengths = []
    for e in range(episodes):
        env.reset(seed=e if seed_all or e == 0 else None)
        done, n = False, 0
        while not done:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            done, n = term or trunc, n + 1
        lengths.append(n)
    env.close()
    return lengths


def _status(argv: list[str]) -> int:
    """``envrec ARGV``'s exit status, also when argparse exits."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    """CartPole recorded with RecordTrace over a RecordVideo filming every episode (into ``live/``); only the
    first reset seeded."""
    d = tmp_path_factory.mktemp("cartpole")
    env = gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=CAP)
    _run(envrec.RecordTrace(envrec.RecordVideo(env, str(d / "live"), episode_trigger=lambda e: True), d), EPISODES, False)
    with envrec.TraceReader(d) as reader:
        episodes = {ep.episode_id: (ep.length, ep.ended_by, ep.total_reward) for ep in reader}
    return d, episodes


@pytest.mark.timeout(60)
def test_rendered_clips_have_the_live_clips_frames_and_step_ranges(cartpole, tmp_path):
    d, episodes = cartpole
    closed = []
    clips = render(d, "1,4", out=tmp_path, on_clip_closed=lambda path, m: closed.append((path, m["episode_id"])))
    assert [c.episode_id for c in clips] == [1, 4] and closed == [(c.path, c.episode_id) for c in clips]
    for clip in clips:
        name = f"rl-video-episode-{clip.episode_id}"
        assert clip.verdict == "reproduced" and clip.path == str(tmp_path / f"{name}.mp4"), clip
        live, replayed = meta(d / "live", name), meta(tmp_path, name)
        length = episodes[clip.episode_id][0]
        assert replayed["frames_written"] == clip.frames == length + 1  # one frame per observation
        assert replayed["step_range"] == live["step_range"] and live["step_range"][1] - live["step_range"][0] == length
        assert replayed["episode_id"] == clip.episode_id and replayed["fps"] == live["fps"]
        CLIP_META.validate(replayed)
        assert replayed["replay"]["verdict"] == "reproduced" and replayed["replay"]["diverged_at"] is None
        ours, theirs = decode(clip.path, 600, 400), decode(d / "live" / f"{name}.mp4", 600, 400)
        assert len(ours) == length + 1 and np.array_equal(ours, theirs)  # x264 with one thread: the same pixels


@pytest.mark.timeout(60)
def test_selection_by_outcome_on_the_command_line(cartpole, tmp_path, capsys):
    d, episodes = cartpole
    failed = {e for e, (_, ended_by, _) in episodes.items() if ended_by == "terminated"}
    worst = min(episodes, key=lambda e: (episodes[e][2], e))
    assert failed and len(failed) < len(episodes)  # the cap truncated some
    assert main(["render", str(d), "--episodes", "failed,worst:1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rendered = {int(n.split("-")[-1].split(".")[0]) for n in os.listdir(tmp_path) if n.endswith(".mp4")}
    assert rendered == failed | {worst}, out
    assert f"{len(rendered)} reproduced" in out
    assert main(["render", str(d)]) == 0  # the last episode, into DIR/videos: where the viewer finds it
    assert {n.split(".")[0] for n in os.listdir(d / "videos")} == {f"rl-video-episode-{EPISODES - 1}"}
    listed = {e["episode_id"]: e["clip"] for e in Catalog(str(d)).index()["episodes"]}
    assert listed == {e: f"rl-video-episode-{e}" if e == EPISODES - 1 else None for e in episodes}


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    """Two seeded episodes of PictureEnv: one whose env moves by unseeded randomness at step 5, one that does not."""
    d = tmp_path_factory.mktemp("pictures")
    env_id = register()
    _run(envrec.RecordTrace(gym.make(env_id, hidden_step=5), d / "hidden"), 1, True)
    _run(envrec.RecordTrace(gym.make(env_id), d / "plain"), 2, True)
    return d


@pytest.mark.timeout(60)
def test_a_diverging_replay_still_writes_its_whole_clip(pictures, tmp_path):
    [clip] = render(pictures / "hidden", "0", out=tmp_path)
    assert (clip.verdict, clip.diverged_at, clip.field) == ("diverged", 5, "observations"), clip
    m = meta(tmp_path, "rl-video-episode-0")
    CLIP_META.validate(m)
    assert m["replay"]["verdict"] == "diverged" and m["replay"]["diverged_at"] == 5 and m["replay"]["where"] == "[1]"
    assert m["frames_written"] == 13 == len(decode(clip.path, 64, 48)) and m["step_range"] == [0, 12]
    [again] = render(pictures / "hidden", "0", out=tmp_path)  # a clip rendered before is replaced
    assert again.diverged_at == 5 and meta(tmp_path, "rl-video-episode-0")["recorder"] != m["recorder"]


@pytest.mark.timeout(90)
@pytest.mark.slow
def test_env_kwargs_set_the_frame_size_in_parallel_jobs(pictures, tmp_path, capsys):
    argv = ["render", str(pictures / "plain"), "--episodes", "all", "--out", str(tmp_path), "--jobs", "2"]
    assert main([*argv, "--env-kwargs", "width=40", "height=30", "--json"]) == 0, capsys.readouterr()
    printed = json.loads(capsys.readouterr().out)
    assert printed["reproduced"] == 2 and [c["episode_id"] for c in printed["clips"]] == [0, 1]
    pids = set()
    for e, step_range in ((0, [0, 12]), (1, [12, 24])):
        m = meta(tmp_path, f"rl-video-episode-{e}")
        pids.add(int(m["recorder"].split("-")[0]))  # the VideoRecorder's process
        assert m["frame_size"] == {"width": 40, "height": 30, "channels": 3} and m["step_range"] == step_range
        assert m["replay"]["env_kwargs"] == {"width": 40, "height": 30} and m["replay"]["verdict"] == "reproduced"
        assert len(decode(tmp_path / f"rl-video-episode-{e}.mp4", 40, 30)) == 13
    assert os.getpid() not in pids  # filmed by the jobs' interpreters


@pytest.mark.timeout(60)
def test_step_ranges_count_evicted_steps_and_an_evicted_start_cannot_be_filmed(tmp_path):
    """A part per step under a disk budget: the oldest episodes and the start of the last are evicted."""
    env = envrec.RecordTrace(gym.make(register()), tmp_path, batch_bytes=1, max_bytes=6000, commit_interval=None)
    lengths = _run(env, 6, True)
    with envrec.TraceReader(tmp_path) as reader:
        kept = list(reader)
        assert kept and kept[0].first_step > 0 and reader.recordings[0].manifest["evicted"]["steps"] > 0
        starts = reset_steps(reader, kept)
    assert starts == {ep.episode_id: sum(lengths[: ep.episode_id]) for ep in kept}
    [clip] = render(tmp_path, str(kept[0].episode_id), out=tmp_path / "videos")
    assert clip.verdict == "cannot_replay" and "evicted" in clip.reason and clip.path is clip.meta_path is None
    assert not os.listdir(tmp_path / "videos")


@pytest.mark.timeout(60)
def test_bad_input_is_named(cartpole, tmp_path, capsys):
    d, _ = cartpole
    assert parse_env_kwargs(["width=640", "camera_name=track", "pos=[1, 2]"]) == {"width": 640, "camera_name": "track", "pos": [1, 2]}
    with pytest.raises(ConfigError, match="width640.*KEY=VALUE"):
        parse_env_kwargs(["width640"])
    with pytest.raises(ConfigError, match="no episode 99"):
        render(d, "2,99", out=tmp_path)
    with pytest.raises(ConfigError, match=r"filmed live of the episodes to render \(rl-video-episode-1.meta.json\)"):
        render(d, "1", out=d / "live")  # what the env really showed is not replaced
    with pytest.raises(ConfigError, match="--env-kwargs.*width"):
        render(d, "0", out=tmp_path, env_kwargs={"width": 64})  # CartPole takes no width
    for argv, words in (
        (["--episodes", "99"], "no episode 99"),
        (["--episodes", "worst"], "unknown episode selection term 'worst'"),
        (["--env-kwargs", "=3"], "KEY=VALUE"),
        (["--jobs", "0"], "--jobs: '0': at least 1"),
        (["--snapshot", "no.such.module:hook"], "snapshot='no.such.module:hook'"),
        (["--make", "no.such.module:make"], "cannot import 'no.such.module'"),
    ):
        assert _status(["render", str(d), "--out", str(tmp_path), *argv]) == 2, argv
        assert words in capsys.readouterr().err, argv
    assert not os.listdir(tmp_path)  # nothing was rendered
    assert parse_env_kwargs([]) == {}
