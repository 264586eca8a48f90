"""Every clip kept whatever else writes into its folder (issue: two processes overwrote each other's clips).

A clip's name is claimed when it starts (its video created exclusively, envrec.record.clip_names): two
recorders, in one process or two, never write the same file, and each ``.meta.json`` names its own video.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from envrec.formats.ownfolder import OwnFolder
from envrec.record.clip_names import claim_clip_name

SCRIPT = """
import sys, gymnasium as gym, envrec
env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), sys.argv[1],
                         episode_trigger=lambda e: True)
for e in range(3):
    env.reset(seed=int(sys.argv[2]) + e)
    done = False
    while not done:
        *_, te, tr, _ = env.step(env.action_space.sample())
        done = te or tr
env.close()
"""


def test_a_taken_name_gets_the_next_number_and_a_free_one_is_kept(tmp_path):
    with OwnFolder(str(tmp_path)) as own:
        assert claim_clip_name(own, "rl-video-episode-0", ".mp4") == "rl-video-episode-0"
        assert claim_clip_name(own, "rl-video-episode-0", ".mp4") == "rl-video-episode-0-2"
        (tmp_path / "other.meta.json").write_text("{}")  # metadata alone takes its name too
        assert claim_clip_name(own, "other", ".mp4") == "other-2"
        os.symlink("/etc/hostname", tmp_path / "planted.mp4")  # left to the encoder, which replaces it
        assert claim_clip_name(own, "planted", ".mp4") == "planted"
    assert sorted(os.listdir(tmp_path)) == ["other-2.mp4", "other.meta.json", "planted.mp4", "rl-video-episode-0-2.mp4",
                                            "rl-video-episode-0.mp4"]


def test_two_processes_writing_clips_into_one_folder_keep_every_clip(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), str(seed)]) for seed in (0, 100)]
    assert [p.wait(120) for p in procs] == [0, 0]
    metas = [json.loads((tmp_path / n).read_text()) for n in sorted(os.listdir(tmp_path)) if n.endswith(".meta.json")]
    videos = sorted(n for n in os.listdir(tmp_path) if n.endswith(".mp4"))
    assert len(metas) == len(videos) == 6  # 3 episodes of each process: none overwritten
    for meta in metas:
        assert meta["path"] == meta["name"] + ".mp4" and not meta["broken"], meta
        assert meta["frames_written"] >= 2
    assert len({m["recorder"] for m in metas}) == 2
    by_recorder = {}
    for m in metas:
        by_recorder.setdefault(m["recorder"], []).append(m["name"])
    for names in by_recorder.values():  # each process's three clips, whichever names it got
        assert len(names) == 3


def test_replace_clips_says_overwriting_only_for_a_file_envrec_did_not_write(tmp_path, caplog):
    from envrec.record.clip_names import warn_if_replacing_a_stranger

    (tmp_path / "ours.mp4").write_bytes(b"x")
    (tmp_path / "ours.meta.json").write_text("{}")
    (tmp_path / "theirs.mp4").write_bytes(b"x")
    with OwnFolder(str(tmp_path)) as own:
        assert not warn_if_replacing_a_stranger(own, "new", ".mp4")  # nothing there
        assert not warn_if_replacing_a_stranger(own, "ours", ".mp4")  # an earlier render of envrec's
        assert warn_if_replacing_a_stranger(own, "theirs", ".mp4")
    assert [r.getMessage() for r in caplog.records if "Overwriting" in r.getMessage()] == [
        f"envrec: Overwriting existing video theirs.mp4 in {tmp_path}: envrec did not write it (no theirs.meta.json beside it)"]
