"""A folder from anyone: its recorded env spec is made only when Gymnasium registers that env here, with
Gymnasium's (or the env package's) wrappers; an entry point or wrapper a crafted manifest names is never called."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest

import envrec
from envrec.cli import main
from envrec.formats.trace_format import read_manifest, write_manifest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trust")
    env = envrec.RecordTrace(gym.make("CartPole-v1"), str(folder), name_prefix="c")
    for seed in (0, 1):
        env.reset(seed=seed)
        for _ in range(5):
            env.step(0)
    env.close()
    return folder


def _crafted(folder, tmp_path, change) -> str:
    """A copy of the recording whose manifest's env spec ``change`` rewrote."""
    out = tmp_path / "crafted"
    out.mkdir()
    for name in os.listdir(folder):
        if not name.endswith(".verify.json"):
            (out / name).write_bytes((folder / name).read_bytes())
    path = str(out / "c.manifest.json")
    manifest = read_manifest(path)
    change(manifest["env"]["spec"])
    write_manifest(path, manifest)
    return str(out)


MARKER = "envrec-trust-marker"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: s.update(entry_point="os:system", kwargs={"command": f"touch {MARKER}"}), "not the one registered here"),
        (lambda s: s.update(id="Evil-v0", entry_point="os:system", kwargs={"command": f"touch {MARKER}"}), "is not registered here"),
        (lambda s: s["additional_wrappers"].append({"name": "x", "entry_point": "os:system", "kwargs": {"command": f"touch {MARKER}"}}),
         "os:system is neither Gymnasium's nor the env package's nor a module's you imported (gymnasium)"),
        (lambda s: s["additional_wrappers"].append({"name": "x", "entry_point": "gymnasium.envs.registration:make", "kwargs": {}}),
         "is not a gymnasium.Wrapper class"),
        (lambda s: s["additional_wrappers"].append({"name": "x", "entry_point": "antigravity:Wrapper", "kwargs": {}}),
         "a wrapper named by a folder is not imported"),
        (lambda s: s["additional_wrappers"].append({"name": "x", "entry_point": "envrec:RecordTrace", "kwargs": {"directory": MARKER}}),
         "records or renders"),
        (lambda s: s["additional_wrappers"].append(
            {"name": "x", "entry_point": "gymnasium.wrappers.rendering:RecordVideo", "kwargs": {"video_folder": MARKER}}),
         "records or renders"),
    ],
)
def test_a_crafted_spec_is_refused_and_nothing_it_names_runs(recording, tmp_path, monkeypatch, capsys, change, said):
    folder = _crafted(recording, tmp_path, change)
    monkeypatch.chdir(tmp_path)
    assert main(["verify", folder]) == 1
    out = capsys.readouterr().out
    assert out.count("cannot replay") >= 2 and said in out and "--make" in out, out
    assert not os.path.exists(tmp_path / MARKER)
    assert "antigravity" not in __import__("sys").modules


def test_an_env_id_naming_a_module_is_refused(recording, tmp_path, capsys):
    def old(spec):  # a recording of an older envrec (no env key) whose env_id names a module to import
        pass

    folder = _crafted(recording, tmp_path, old)
    path = os.path.join(folder, "c.manifest.json")
    manifest = read_manifest(path)
    del manifest["env"]
    manifest["env_id"] = "antigravity:CartPole-v1"
    write_manifest(path, manifest)
    assert main(["verify", folder]) == 1
    assert "names the module 'antigravity', and a module named by a folder is not imported" in capsys.readouterr().out
    assert "antigravity" not in __import__("sys").modules


def test_the_recorded_spec_itself_is_made(recording, capsys):
    assert main(["verify", str(recording)]) == 0


def test_render_writes_only_into_a_real_clips_folder_and_never_through_a_planted_link(recording, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    out = tmp_path / "clips"
    out.mkdir()
    os.symlink(victim, out / "rl-video-episode-1.mp4")
    assert main(["render", str(recording), "--out", str(out)]) == 0, capsys.readouterr()
    assert victim.read_text() == "mine" and not os.path.islink(out / "rl-video-episode-1.mp4")
    assert os.path.getsize(out / "rl-video-episode-1.mp4") > 0
    os.symlink(out, tmp_path / "linked")
    for bad, said in [(tmp_path / "linked", "symbolic link"), (victim, "cannot make the clips' folder"), ("", "out is empty")]:
        assert main(["render", str(recording), "--out", str(bad)]) == 2
        assert said in capsys.readouterr().err
    assert main(["render", str(recording), "--out", str(out), "--fps", "1e300"]) == 2
    assert "at most 1000" in capsys.readouterr().err
    assert victim.read_text() == "mine"


def test_a_job_trusts_only_the_very_spec_its_starting_process_checked(recording, tmp_path):
    from envrec.replay.recreate import CannotRecreate, recreate_env, spec_trusted

    good = read_manifest(str(recording / "c.manifest.json"))
    checked = spec_trusted(good)
    assert checked is not None
    recreate_env(good, trusted=checked).close()
    swapped = read_manifest(_crafted(recording, tmp_path, lambda s: s.update(entry_point="os:system")) + "/c.manifest.json")
    assert spec_trusted(swapped) is None
    with pytest.raises(CannotRecreate, match="not the one registered here"):
        recreate_env(swapped, trusted=checked)  # the folder changed after the check: checked again
