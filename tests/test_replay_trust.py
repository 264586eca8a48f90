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


def _options_in_batch(folder, episode, options) -> None:
    """Give ``episode`` of the crafted copy ``folder`` these recorded reset options (its checksum kept right)."""
    import json
    import zlib

    path = os.path.join(folder, "c.manifest.json")
    manifest = read_manifest(path)
    entry = manifest["batches"][0]
    batch = os.path.join(folder, entry["fn"])
    with open(batch, "rb") as f:
        doc = json.loads(f.read())
    doc["episodes"][episode]["options"] = options
    data = json.dumps(doc).encode()
    with open(batch, "wb") as f:
        f.write(data)
    entry.update(json_bytes=len(data), json_crc32=zlib.crc32(data))
    write_manifest(path, manifest)


FRAME_STACK = "gymnasium.wrappers.stateful_observation:FrameStackObservation"
CHEETAH = {"id": "HalfCheetah-v5", "entry_point": "gymnasium.envs.mujoco.half_cheetah_v5:HalfCheetahEnv"}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: s.update(**CHEETAH, kwargs={"xml_file": "/nonexistent/envrec.xml"}),
         "its kwarg xml_file='/nonexistent/envrec.xml' is refused: its key names a file, path or folder"),
        (lambda s: s["additional_wrappers"].append(
            {"name": "FrameStackObservation", "entry_point": FRAME_STACK, "kwargs": {"stack_size": 200000000}}),
         "its wrapper FrameStackObservation's kwarg stack_size=200000000 is refused: a number beyond 4096"),
        (lambda s: s["additional_wrappers"].append(
            {"name": "ResizeObservation", "entry_point": "gymnasium.wrappers.transform_observation:ResizeObservation",
             "kwargs": {"shape": [4000, 4000, 3]}}),
         "shape=[4000, 4000, 3] is refused: numbers whose product"),
        (lambda s: s["kwargs"].update(render_mode="../../frames.png"), "looks like a path, a file or a module:object"),
        (lambda s: s["kwargs"].update(render_mode="pkg.mod:fn"), "looks like a path, a file or a module:object"),
    ],
)
def test_recorded_kwargs_naming_paths_or_sizes_are_cannot_replay_saying_which(recording, tmp_path, capsys, change, said):
    folder = _crafted(recording, tmp_path, change)
    assert main(["verify", folder]) == 1
    out = capsys.readouterr().out
    assert out.count("cannot replay") == 3 and said in out and "--trust-kwargs" in out, out
    assert "Traceback" not in out


def test_kwargs_within_the_registered_defaults_are_made_and_the_user_may_trust_the_others(recording, tmp_path, capsys):
    from envrec.replay.recreate import refusal
    from envrec.replay.trust import Trust

    def manifest_with(**spec):
        manifest = read_manifest(str(recording / "c.manifest.json"))
        manifest["env"]["spec"].update(spec)
        return manifest

    cheetah = {**CHEETAH, "additional_wrappers": []}
    assert refusal(manifest_with(**cheetah, kwargs={"xml_file": "half_cheetah.xml", "width": 640, "frame_skip": 5})) is None
    assert refusal(manifest_with(**cheetah, kwargs={"width": 7681})) is not None  # 16 times the registered 480, and more
    stack = [{"name": "FrameStackObservation", "entry_point": FRAME_STACK, "kwargs": {"stack_size": 4, "padding_type": "reset"}}]
    assert refusal(manifest_with(additional_wrappers=stack)) is None
    assert refusal(manifest_with(**cheetah, kwargs={"xml_file": "/x.xml"}), Trust(trust_kwargs=True)) is None
    folder = _crafted(recording, tmp_path, lambda s: s.update(**CHEETAH, kwargs={"xml_file": "/nonexistent/envrec.xml"}))
    assert main(["verify", folder, "--trust-kwargs"]) == 1  # made as recorded: MuJoCo itself says the file is missing
    out = capsys.readouterr().out
    assert "cannot recreate the env" in out and "is refused" not in out, out


def test_render_checks_only_the_kwargs_it_does_not_replace_and_reset_options_are_checked(recording, tmp_path, capsys):
    folder = _crafted(recording, tmp_path, lambda s: s["kwargs"].update(render_mode="/tmp/x"))
    assert main(["verify", folder]) == 1 and "render_mode='/tmp/x' is refused" in capsys.readouterr().out
    assert main(["render", folder, "--episodes", "0", "--out", str(tmp_path / "clips")]) == 0  # filmed in rgb_array
    capsys.readouterr()
    _options_in_batch(folder, 1, {"low": -0.05, "path": "/etc/passwd"})
    assert main(["render", folder, "--episodes", "all", "--out", str(tmp_path / "clips")]) == 1
    out = capsys.readouterr().out
    assert "episode 0: reproduced" in out and "episode 1: cannot replay: its reset option path='/etc/passwd' is refused" in out
    first, second = envrec.replay.verify(folder)
    assert first.status == "cannot_replay" and "render_mode='/tmp/x'" in first.reason
    assert second.status == "cannot_replay" and "its reset option path='/etc/passwd' is refused" in second.reason


def test_an_env_the_user_imports_is_made_and_a_folder_cannot_name_it(recording, tmp_path, monkeypatch, capsys):
    name = f"userenvs_{os.getpid()}"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / f"{name}.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('UserCart-v0', entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv', max_episode_steps=500)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    folder = _crafted(recording, tmp_path, lambda s: s.update(id="UserCart-v0"))
    assert main(["verify", folder]) == 1
    out = capsys.readouterr().out
    assert "'UserCart-v0' is not registered here" in out and "--import MODULE" in out and name not in __import__("sys").modules
    assert main(["verify", folder, "--import", name]) == 0, capsys.readouterr()
    assert [v.status for v in envrec.replay.verify(folder, jobs=2, import_modules=[name])] == ["reproduced"] * 2
    path = os.path.join(folder, "c.manifest.json")
    manifest = read_manifest(path)
    del manifest["env"]  # as an older envrec's: made from its env id, here one naming a module
    manifest["env_id"] = f"{name}:UserCart-v0"
    write_manifest(path, manifest)
    assert main(["verify", folder]) == 1  # the module is loaded, but the user did not name it
    assert f"names the module '{name}'" in capsys.readouterr().out
    assert main(["verify", folder, "--import", name]) == 0
    capsys.readouterr()
    assert main(["verify", folder, "--import", "no_such_module_envrec"]) == 2
    assert "--import no_such_module_envrec: cannot import it: ModuleNotFoundError" in capsys.readouterr().err
    assert main(["verify", folder, "--import", "os:system"]) == 2
    assert "is not a module name" in capsys.readouterr().err


def test_the_viewer_names_the_modules_its_user_trusts_in_its_commands_and_never_a_folders(recording, tmp_path, capsys):
    from envrec.viewer.catalog import Catalog

    folder = _crafted(recording, tmp_path, lambda s: None)
    catalog = Catalog(folder)
    catalog.index()
    assert catalog.episode("c", 0)["render_command"] == f"envrec render {folder} --episodes 0"
    catalog.verdicts.imports = ("mypkg.envs", "other")
    assert catalog.episode("c", 0)["render_command"] == f"envrec render {folder} --episodes 0 --import mypkg.envs --import other"
    assert catalog.episode("c", 1)["verify_command"] == f"envrec verify {folder} --import mypkg.envs --import other --episodes 1"
    assert main(["view", folder, "--port", "0", "--no-browser", "--import", "os:system"]) == 2
    assert "--import 'os:system' is not a module name" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "defaults", "said"),
    [
        ({"xml_file": "half_cheetah.xml"}, {"xml_file": "half_cheetah.xml"}, None),  # the registered default
        ({"xml_file": "ant.xml"}, {"xml_file": "half_cheetah.xml"}, "other than the registered default 'half_cheetah.xml'"),
        ({"video_folders": ["clips"]}, {}, "its key names a file, path or folder"),
        ({"files": [["/etc/passwd"]]}, {}, "its key names a file"),
        ({"nested": [["/etc/passwd"]]}, {}, "looks like a path"),
        ({"camera_name": "~/.ssh/id_rsa"}, {}, "looks like a path"),
        ({"reward_fn": "pkg.mod:fn"}, {}, "module:object"),
        ({"camera_name": "track", "map_name": "8x8", "desc": ["SFFF", "FHFH"], "direction": "left"}, {}, None),
        ({"stack_size": 4, "shape": [84, 84], "frameskip": [2, 5], "gravity": -9.8, "continuous": True}, {}, None),
        ({"stack_size": 200000000}, {}, "a number beyond 4096 (with no registered default beyond it)"),
        ({"width": 8000}, {"width": 480}, "a number beyond 7680 (16 times its registered default 480)"),
        ({"shape": [5000, 5000]}, {}, "a number beyond 4096"),
        ({"shape": [4000, 4000, 3]}, {}, "product"),
        ({"options": {"size": 10**12}}, {}, "options={'size': 1000000000000} is refused: a number beyond 4096"),
        ({"max_episode_steps": 10**9}, {}, None),  # a step limit allocates nothing
        ({"a": 1e300}, {}, "a number beyond 4096"),
    ],
)
def test_which_recorded_kwargs_a_folder_may_give(kwargs, defaults, said):
    from envrec.replay.trust import kwargs_refusal

    found = kwargs_refusal(kwargs, defaults)
    assert (found is None) if said is None else (found is not None and said in found), found


def test_import_modules_must_be_module_names_that_import(recording):
    from envrec.errors import ConfigError
    from envrec.replay import verify

    for bad, said in [("json", "a list of module names"), (["os:system"], "not a module name"),
                      (["no_such_module_envrec"], "cannot import it")]:
        with pytest.raises(ConfigError, match=said):
            verify(recording, import_modules=bad)
    with pytest.raises(ConfigError, match="trust_kwargs must be True or False"):
        verify(recording, trust_kwargs="yes")


def test_a_recording_wrapper_under_another_name_is_refused(monkeypatch):
    import sys
    import types

    from envrec.replay.trust import _wrapper

    alias = types.ModuleType("gymnasium.envrec_test_alias")
    alias.Filming = gym.wrappers.RecordVideo
    monkeypatch.setitem(sys.modules, alias.__name__, alias)
    found = _wrapper(f"{alias.__name__}:Filming", ("gymnasium",))
    assert "is gymnasium.wrappers.rendering.RecordVideo, which records or renders" in found.reason
    assert _wrapper("gymnasium.wrappers.common:TimeLimit", ("gymnasium",)) is gym.wrappers.TimeLimit
