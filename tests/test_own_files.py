"""Touch only what you wrote: a recorder deletes, replaces and writes only files of its own naming, in the folder
it opened, never through a symlink planted or swapped in (``envrec.formats.ownfolder``)."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import psutil
import pytest

import envrec
import envrec.replay.render
from envrec.errors import RecordError
from envrec.formats.atomic import remove_stale_tmp, tmp_path_for, write_atomic
from envrec.formats.clip_meta import CLIP_FILE_SUFFIXES, is_clip_file
from envrec.formats.ownfolder import FolderChanged, OwnFolder
from envrec.formats.trace_format import segment_document, trace_file_names, write_manifest_into
from envrec.record.leftovers import remove_dead_recordings
from envrec.replay.render import render

render_module = sys.modules["envrec.replay.render"]
from envrec.workers.batch_writer import BatchWriter
from envrec.workers.checkpoint import Checkpoint, CheckpointFile
from envrec.workers.clip_budget import ClipBudget
from envrec.workers.spill import Spill

from .support.episodes import feed
from .support.processes import start_child
from .support.video import decode
from .support.waiting import committed_episodes, wait_for

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _frame(i: int) -> np.ndarray:
    return np.full((48, 64, 3), (i * 37) % 256, np.uint8)


def _clip(rec, name: str, frames: int = 4) -> None:
    rec.start_clip(name)
    for i in range(frames):
        rec.add_frame(_frame(i), i)
    rec.end_clip()


def _meta(folder: pathlib.Path, name: str, path: str | None, recorder: str, seq: int) -> None:
    doc = {"version": 1, "name": name, "path": path, "recorder": recorder, "finished_seq": seq}
    (folder / f"{name}.meta.json").write_text(json.dumps(doc))


# -- the helper ----------------------------------------------------------------


def test_own_folder_refuses_other_names_and_never_follows_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.mp4").write_bytes(b"keep me")
    folder = tmp_path / "clips"
    folder.mkdir()
    (folder / "c.mp4").symlink_to(outside / "victim.mp4")
    with OwnFolder(str(folder), is_clip_file) as own:
        for bad in ("../outside/victim.mp4", "sub/c.mp4", "notes.txt", ".", "..", "c\0.mp4"):
            with pytest.raises(RecordError, match="not a file this recorder writes"):
                own.unlink(bad)
        with pytest.raises(FileExistsError):
            own.open_new("c.mp4")  # a link planted at the name: never written through
        assert not own.is_regular("c.mp4")
        assert own.unlink("c.mp4")  # the link itself goes
        own.write_atomic("c.meta.json", b"{}")
        assert (folder / "c.meta.json").read_bytes() == b"{}"
    assert (outside / "victim.mp4").read_bytes() == b"keep me"
    assert sorted(os.listdir(folder)) == ["c.meta.json"]
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(FolderChanged, match="symbolic link"):
        OwnFolder(str(link), follow=False)
    with OwnFolder(str(link)) as own, pytest.raises(FolderChanged, match="no longer the folder"):
        OwnFolder(str(outside), expect=own.identity)


def test_an_atomic_write_never_writes_through_a_link_at_its_temporary_name(tmp_path):
    """Temporary names hold a pid (predictable): a symlink planted there is removed, its target untouched."""
    (tmp_path / "target").write_bytes(b"the user's")
    tmp = pathlib.Path(tmp_path_for(str(tmp_path / "t.manifest.json")))
    tmp.symlink_to(tmp_path / "target")
    write_atomic(str(tmp_path / "t.manifest.json"), b"{}")
    assert (tmp_path / "target").read_bytes() == b"the user's"
    assert sorted(os.listdir(tmp_path)) == ["t.manifest.json", "target"]


# -- the clip budget -----------------------------------------------------------


def _plant(tmp_path: pathlib.Path, folder: pathlib.Path, recorder: str) -> dict[pathlib.Path, bytes]:
    """Metadata carrying ``recorder``'s id that names what is not its clip: through a symlinked subfolder to a
    file outside, a user's file beside the clips, a clip name that is a symlink. The files that must survive."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    survivors = {outside / "victim.mp4": b"outside", folder / "mine.mp4": b"the user's own", outside / "other.mp4": b"o"}
    for path, data in survivors.items():
        path.write_bytes(data)
    (folder / "sub").symlink_to(outside)
    (folder / "z.mp4").symlink_to(outside / "other.mp4")
    _meta(folder, "x", "sub/victim.mp4", recorder, 1)
    _meta(folder, "y", "mine.mp4", recorder, 2)
    _meta(folder, "z", "z.mp4", recorder, 3)
    return survivors


def test_a_budget_adopts_only_metadata_naming_its_own_clip(tmp_path):
    folder = tmp_path / "clips"
    folder.mkdir()
    survivors = _plant(tmp_path, folder, "R")
    for k in range(3):
        (folder / f"c{k}.mp4").write_bytes(b"v" * 10)
        _meta(folder, f"c{k}", f"c{k}.mp4", "R", 10 + k)
    with OwnFolder(str(folder), is_clip_file) as own:
        budget = ClipBudget(own, "R", None, 1)
        assert [c.meta for c in budget.clips] == ["c0.meta.json", "c1.meta.json", "c2.meta.json"]
        assert sorted(budget.ignored) == ["x.meta.json", "y.meta.json", "z.meta.json"]
        assert budget.enforce()[0] == 2
    for path, data in survivors.items():
        assert path.read_bytes() == data
    assert (folder / "z.mp4").is_symlink()
    assert sorted(os.listdir(folder)) == ["c2.meta.json", "c2.mp4", "mine.mp4", "sub", "x.meta.json", "y.meta.json",
                                          "z.meta.json", "z.mp4"]


def test_a_restarted_encoder_evicts_its_own_clips_and_leaves_planted_metadata_alone(tmp_path):
    """The encoder killed at its first eviction: its successor adopts the recorder's clips by id, and only those."""
    from envrec.contract.faults import FaultSpec

    folder = tmp_path / "clips"
    rec = envrec.VideoRecorder(folder, fps=25, keep_last_clips=1, faults=FaultSpec(at="clip:evict", after=1, how="kill"))
    survivors = _plant(tmp_path, folder, rec.recorder_id)
    _clip(rec, "c0")
    assert wait_for(lambda: rec._stream.check() or rec._stream.broken is not None, 15)
    for k in (1, 2):
        _clip(rec, f"c{k}")
    rec.close()
    assert rec.stats()["restarts"] == 1 and rec.stats()["clips_evicted"] >= 1
    for path, data in survivors.items():
        assert path.read_bytes() == data
    assert sorted(n for n in os.listdir(folder) if n.startswith("c")) == ["c2.meta.json", "c2.mp4"]
    assert len(decode(folder / "c2.mp4", 64, 48)) == 4


# -- temporary files of dead writers -------------------------------------------


def test_a_video_recorder_removes_only_its_own_dead_temporaries(tmp_path):
    dead = _dead_pid()
    folder = tmp_path / "clips"
    folder.mkdir()
    (tmp_path / "target").write_bytes(b"target")
    (folder / f".a.mp4.{dead}.tmp").write_bytes(b"ours")  # removed
    (folder / f".b.meta.json.{dead}.tmp").write_bytes(b"ours")  # removed
    (folder / f".c.mp4.{dead}.tmp").symlink_to(tmp_path / "target")
    os.mkfifo(folder / f".d.mp4.{dead}.tmp")
    (folder / f".e.mp4.{dead}.tmp").write_bytes(b"another user's")
    if os.geteuid() == 0:
        os.chown(folder / f".e.mp4.{dead}.tmp", 65534, 65534)
    (folder / f".notes.txt.{dead}.tmp").write_bytes(b"not a clip's")
    (folder / f".f.mp4.{os.getpid()}.tmp").write_bytes(b"a live writer's")
    rec = envrec.VideoRecorder(folder, fps=25)
    rec.close()
    left = sorted(os.listdir(folder))
    expected = [f".c.mp4.{dead}.tmp", f".d.mp4.{dead}.tmp", f".f.mp4.{os.getpid()}.tmp", f".notes.txt.{dead}.tmp"]
    if os.geteuid() == 0:
        expected.append(f".e.mp4.{dead}.tmp")  # owned by another user: left (only root can make one here)
    assert left == sorted(expected)
    assert (tmp_path / "target").read_bytes() == b"target"
    assert remove_stale_tmp(str(folder), finals=CLIP_FILE_SUFFIXES) == []
    for name in left:  # planted by this test: its own to remove (the leak check looks for temporaries)
        os.unlink(folder / name)


# -- a FIFO at a clip's name ----------------------------------------------------


def test_a_fifo_at_a_clips_name_breaks_that_clip_and_is_never_opened(tmp_path):
    os.mkfifo(tmp_path / "c0.mp4")
    rec = envrec.VideoRecorder(tmp_path, fps=25)
    _clip(rec, "c0")
    _clip(rec, "c1")
    rec.close()
    m0 = json.loads((tmp_path / "c0.meta.json").read_text())
    assert m0["path"] is None and m0["broken"] and "not a regular file" in m0["reason"]
    assert pathlib.Path(tmp_path / "c0.mp4").is_fifo()
    assert len(decode(tmp_path / "c1.mp4", 64, 48)) == 4  # the next clip is not affected


# -- render ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    env = envrec.RecordTrace(gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=8), d)
    env.action_space.seed(0)
    for e in range(2):
        env.reset(seed=e)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            done = term or trunc
    env.close()
    return d


def _swap_for_link(videos: pathlib.Path, target: pathlib.Path) -> None:
    videos.rename(videos.with_name("videos.moved"))
    videos.symlink_to(target, target_is_directory=True)


def _target(tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / "target"
    target.mkdir()
    (target / "rl-video-episode-1.mp4").write_bytes(b"the user's clip")
    return target


def _out(recording, tmp_path) -> pathlib.Path:
    out = tmp_path / "rec"
    out.mkdir()
    for p in recording.iterdir():
        (out / p.name).write_bytes(p.read_bytes())
    return out


def test_render_into_a_folder_swapped_for_a_link_after_its_check_writes_nothing_there(recording, tmp_path, monkeypatch):
    rec_dir, target = _out(recording, tmp_path), _target(tmp_path)
    videos = rec_dir / "videos"
    make_out = render_module._make_out

    def check_then_swap(out):
        make_out(out)
        _swap_for_link(videos, target)

    monkeypatch.setattr(render_module, "_make_out", check_then_swap)
    clips = render(rec_dir, "all")
    assert [c.path for c in clips] == [None, None]
    assert all("symbolic link" in c.reason for c in clips)
    assert sorted(os.listdir(target)) == ["rl-video-episode-1.mp4"]
    assert (target / "rl-video-episode-1.mp4").read_bytes() == b"the user's clip"


def test_render_whose_folder_is_swapped_mid_run_keeps_writing_into_the_folder_it_opened(recording, tmp_path, monkeypatch):
    rec_dir, target = _out(recording, tmp_path), _target(tmp_path)
    videos = rec_dir / "videos"
    start_clip = envrec.VideoRecorder.start_clip

    def swap_at_the_second_clip(self, name, **kw):
        if name.endswith("-1"):  # once the encoder has opened the folder and written the first clip
            assert wait_for(lambda: (videos / "rl-video-episode-0.meta.json").exists(), 30)
            _swap_for_link(videos, target)
        return start_clip(self, name, **kw)

    monkeypatch.setattr(envrec.VideoRecorder, "start_clip", swap_at_the_second_clip)
    clips = render(rec_dir, "all")
    assert [c.verdict for c in clips] == ["reproduced", "reproduced"]
    assert sorted(os.listdir(target)) == ["rl-video-episode-1.mp4"]
    assert (target / "rl-video-episode-1.mp4").read_bytes() == b"the user's clip"
    moved = rec_dir / "videos.moved"
    assert sorted(os.listdir(moved)) == [f"rl-video-episode-{k}.{x}" for k in (0, 1) for x in ("meta.json", "mp4")]
    assert len(decode(moved / "rl-video-episode-1.mp4", 600, 400)) == clips[1].frames


def test_render_reports_a_fifo_at_a_clips_path_as_not_written(recording, tmp_path):
    rec_dir = _out(recording, tmp_path)
    (rec_dir / "videos").mkdir()
    os.mkfifo(rec_dir / "videos" / "rl-video-episode-0.mp4")
    clips = render(rec_dir, "all")
    assert clips[0].path is None and "not a regular file" in clips[0].reason
    assert clips[1].path is not None and os.path.isfile(clips[1].path)
    assert (rec_dir / "videos" / "rl-video-episode-0.mp4").is_fifo()


# -- a recording killed with its workers ------------------------------------------


def test_a_recording_killed_with_its_workers_is_cleaned_by_the_next_recorder_in_its_folder(tmp_path):
    child = start_child("child_recorder.py", str(tmp_path), "120", "wait", start_new_session=True)
    worker_pid = int(child.stdout.readline())
    assert child.stdout.readline().strip() == "ready"
    assert wait_for(lambda: sum(e.complete for e in committed_episodes(tmp_path)) == 2, 10)
    os.killpg(child.pid, signal.SIGKILL)  # the env process and its workers at once (a scheduler, the OOM killer)
    child.wait(10)
    child.stdout.close()
    assert wait_for(lambda: not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE, 5)
    (old,) = [p.name[: -len(".manifest.json")] for p in tmp_path.glob("*.manifest.json")]
    hidden = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert hidden and all(n.startswith(f".{old}.") for n in hidden)  # its temporaries and checkpoints
    lengths = [e.length for e in envrec.TraceReader(tmp_path)]
    user_file = tmp_path / f".{old}.notes.{worker_pid}.tmp"
    user_file.symlink_to(tmp_path / f"{old}.manifest.json")  # a link of its naming: never removed through
    rec = envrec.TraceRecorder(tmp_path, gym.spaces.Discrete(2), gym.spaces.Discrete(2), name_prefix="next")
    rec.close()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [user_file.name]
    assert [e.length for e in envrec.TraceReader(tmp_path, prefix=old)] == lengths  # what it committed is intact
    assert remove_dead_recordings(str(tmp_path), keep="next") == {}
    user_file.unlink()


def test_leftovers_removal_leaves_links_of_a_recordings_names_and_their_targets(tmp_path):
    from envrec.record.leftovers import remove_leftovers

    rec = envrec.TraceRecorder(tmp_path / "r", gym.spaces.Discrete(2), gym.spaces.Discrete(2), name_prefix="p")
    rec.add_reset(0)
    rec.add_step(1, 0, 1.0, True, False)
    rec.close()
    (tmp_path / "target").write_bytes(b"the user's")
    planted = [".p.checkpoint.a.json", "p.ep000000009.bin", f".p.spill0.{_dead_pid()}.tmp"]
    for name in planted:
        (tmp_path / "r" / name).symlink_to(tmp_path / "target")
    (tmp_path / "r" / "p.ep000000008.bin").write_bytes(b"unnamed")  # a batch file the manifest does not name: goes
    assert remove_leftovers(str(tmp_path / "r"), "p") == ["p.ep000000008.bin"]
    assert (tmp_path / "target").read_bytes() == b"the user's"
    assert all((tmp_path / "r" / name).is_symlink() for name in planted)
    for name in planted:
        (tmp_path / "r" / name).unlink()


def test_a_live_or_finished_recording_is_never_cleaned(tmp_path):
    rec = envrec.TraceRecorder(tmp_path, gym.spaces.Discrete(2), gym.spaces.Discrete(2), name_prefix="live")
    rec.add_reset(0)
    rec.add_step(1, 0, 1.0, False, False)
    assert wait_for(lambda: (tmp_path / "live.manifest.json").exists(), 10)  # written by the running serializer
    assert not json.loads((tmp_path / "live.manifest.json").read_text())["complete"]
    assert remove_dead_recordings(str(tmp_path), keep="other") == {}
    rec.close()
    assert remove_dead_recordings(str(tmp_path), keep="other") == {}  # complete


# -- the trace serializer ------------------------------------------------------------


def test_the_trace_writers_never_write_through_a_link_at_any_of_their_names(tmp_path):
    """Batch, manifest, segment, spill and checkpoint names, final and temporary (this process's pid): a link
    planted at a final name is replaced, one at a temporary name removed, one at a file kept open refused."""
    folder, outside = tmp_path / "r", tmp_path / "victim"
    folder.mkdir()
    outside.write_bytes(b"the user's")
    own = OwnFolder(str(folder), trace_file_names("p"))
    bin_name, json_name = "p.ep000000000.bin", "p.ep000000000.json"
    replaced = [bin_name, json_name, "p.manifest.json", "p.m000000.manifest.json"]
    removed = [own.tmp_name(n) for n in (bin_name, json_name, "p.manifest.json", "p.m000000.manifest.json")]
    refused = [".p.checkpoint.a.json", own.tmp_name("p.spill0")]
    for name in replaced + removed + refused:
        (folder / name).symlink_to(outside)
    with own:
        batch = BatchWriter(own, "p", 0)
        batch.write_bin(b"12345678")
        entry = batch.commit()
        write_manifest_into(own, "p.m000000.manifest.json", segment_document("p", 0, [entry]))
        write_manifest_into(own, "p.manifest.json", {"batches": [entry]})  # type: ignore[typeddict-item]
        with pytest.raises(OSError):
            CheckpointFile(own, "p").write(Checkpoint(0, 0, 0, 0, 0, None, None, False, {}, [], [], []))
        with pytest.raises(OSError):
            Spill(str(folder / own.tmp_name("p.spill0")), own)
        for bad in ("../victim", "q.manifest.json", "notes.txt"):  # not of the recording's naming: never touched
            with pytest.raises(RecordError, match="not a file this recorder writes"):
                write_manifest_into(own, bad, {"batches": []})  # type: ignore[typeddict-item]
    assert outside.read_bytes() == b"the user's"
    assert all((folder / n).is_file() and not (folder / n).is_symlink() for n in replaced)
    assert (folder / bin_name).read_bytes() == b"12345678"
    assert sorted(os.listdir(folder)) == sorted(replaced + refused)  # the refused links stay as they were
    assert all((folder / n).is_symlink() for n in refused)
    for name in refused:
        (folder / name).unlink()


OBS_16 = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
BATCH_PER_EPISODE = 9_000  # a batch per 10-step episode of 16x16x3 frames


def _swap_folder(folder: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    moved = folder.with_name(folder.name + ".moved")
    folder.rename(moved)
    folder.symlink_to(target, target_is_directory=True)
    return moved


def _user_folder(tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / "target"
    target.mkdir()
    (target / "p.manifest.json").write_bytes(b"the user's, of the recording's name")
    return target


def test_a_recording_whose_folder_is_swapped_for_a_link_keeps_writing_into_the_folder_it_opened(tmp_path):
    folder, target = tmp_path / "r", _user_folder(tmp_path)
    rec = envrec.TraceRecorder(folder, OBS_16, gym.spaces.Discrete(2), batch_bytes=BATCH_PER_EPISODE, name_prefix="p")
    feed(rec, 2)
    assert wait_for(lambda: len(committed_episodes(folder)) == 2, 20)
    moved = _swap_folder(folder, target)
    feed(rec, 3, start=2)
    rec.close()
    s = rec.stats()
    assert s["broken"] is None and s["records_lost"] == 0 and s["steps_committed"] == 50
    assert sorted(os.listdir(target)) == ["p.manifest.json"]  # nothing written there, nothing removed
    assert (target / "p.manifest.json").read_bytes() == b"the user's, of the recording's name"
    reader = envrec.TraceReader(moved)
    assert [e.seed for e in reader] == list(range(5)) and reader.manifests[0]["closed_cleanly"]
    assert not [n for n in os.listdir(moved) if n.startswith(".")]  # its checkpoints removed from where they are


def test_a_successor_finding_another_folder_writes_nothing_and_the_loss_is_reported(tmp_path):
    folder, target = tmp_path / "r", _user_folder(tmp_path)
    rec = envrec.TraceRecorder(folder, OBS_16, gym.spaces.Discrete(2), batch_bytes=BATCH_PER_EPISODE, name_prefix="p",
                               max_restarts=1)
    feed(rec, 2)
    assert wait_for(lambda: len(committed_episodes(folder)) == 2, 20)
    moved = _swap_folder(folder, target)
    os.kill(rec._stream.worker_pid, signal.SIGKILL)  # its successor opens the path again: another folder
    assert wait_for(lambda: rec._stream.check() or rec.broken is not None, 30)
    feed(rec, 1, start=2)  # the env never sees the failure
    rec.close()
    s = rec.stats()
    assert s["broken"] and "no longer the folder the recorder opened" in s["broken"]
    assert s["records_lost"] + s["records_dropped"] > 0  # the third episode, counted
    assert sorted(os.listdir(target)) == ["p.manifest.json"]
    assert (target / "p.manifest.json").read_bytes() == b"the user's, of the recording's name"
    head = json.loads((moved / "p.manifest.json").read_text())
    assert "no longer the folder the recorder opened" in head["error"]  # written into the folder the recorder opened
    assert [e.seed for e in envrec.TraceReader(moved)] == [0, 1]  # what was committed is intact
    assert not [n for n in os.listdir(moved) if n.startswith(".")]


# -- layout ---------------------------------------------------------------------

# Every module that writes or removes files in a recording folder, converted to OwnFolder.
OWN_FILE_WRITERS = [
    "workers/encoder.py", "workers/clip_budget.py", "workers/asciicast.py", "workers/meta_commit.py",
    "pipeline/record/clip_state.py", "pipeline/record/leftovers.py", "pipeline/record/video_recorder.py",
    "pipeline/replay/render.py", "pipeline/formats/clip_meta.py",
    # the trace serializer's (and the vector serializer's, through it) and the env process's manifest
    "workers/serializer.py", "workers/batch_writer.py", "workers/manifest_writer.py", "workers/checkpoint.py",
    "workers/spill.py", "workers/episode_fields.py", "workers/vector_serializer.py", "pipeline/record/recorder.py",
    "pipeline/record/vector.py",
]
# atomic's and trace_format's, by path (for tools and tests)
PATH_HELPERS = {"write_atomic", "commit_file", "discard_file", "tmp_path_for", "fsync_dir", "open_new", "write_manifest"}
RAW = {("os", "unlink"), ("os", "remove"), ("os", "replace"), ("os", "rename"), ("os", "mkfifo"), ("shutil", "rmtree")}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}


def _raw_writes(path: pathlib.Path) -> list[str]:
    return _raw_writes_in(path.read_text(), path.name)


def _raw_writes_in(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in RAW:
            found.append(f"{name}:{node.lineno}: {f.value.id}.{f.attr}")
        if isinstance(f, ast.Name) and f.id == "open" and any(
            isinstance(a, ast.Constant) and isinstance(a.value, str) and set(a.value) & set("wax+") for a in node.args[1:2]
        ):
            found.append(f"{name}:{node.lineno}: open(..., {node.args[1].value!r})")  # type: ignore[attr-defined]
        if isinstance(f, ast.Name) and f.id in PATH_HELPERS:
            found.append(f"{name}:{node.lineno}: {f.id}")
        # os.open(path, ...) with a write flag and no dir_fd: a file created or written by its path
        if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) == ("os", "open")
                and not any(k.arg == "dir_fd" for k in node.keywords)
                and {n.attr for a in node.args[1:2] for n in ast.walk(a) if isinstance(n, ast.Attribute)} & WRITE_FLAGS):
            found.append(f"{name}:{node.lineno}: os.open(..., write flags)")
    return found


def test_recording_writers_touch_files_only_through_own_folder():
    found = [hit for rel in OWN_FILE_WRITERS for hit in _raw_writes(ROOT / rel)]
    assert found == [], "raw file writes or removals outside envrec.formats.ownfolder"
    # the check finds each kind of write by path: in a snippet, and where files are still written by path
    snippet = """
os.replace(tmp, final)
open(path, "wb")
write_manifest(path, doc)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=own.fd)
fd = os.open(path, os.O_RDONLY)
"""
    assert [h.split(": ")[1] for h in _raw_writes_in(snippet, "s")] == [
        "os.replace", "open(..., 'wb')", "write_manifest", "os.open(..., write flags)"]
    assert any("os.replace" in h for h in _raw_writes(ROOT / "pipeline" / "formats" / "atomic.py"))  # write_atomic(path)
