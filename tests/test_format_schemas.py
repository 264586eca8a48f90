"""docs/schemas/*.schema.json describe what envrec really writes: real recordings validate, broken documents do not.

Each recording below is made by the real recorders and workers (traces of
CartPole raw and compressed, with closed manifest segments, of every space
kind, of a vector env; clips of a RecordVideo), and every manifest, batch
JSON and clip ``.meta.json`` in its folder is validated against its schema
(draft 2020-12). The negative cases take a real document and break it, so
a schema that accepted anything would fail them.
"""

from __future__ import annotations

import copy
import glob
import json
import os

import gymnasium as gym
import jsonschema
import pytest

import envrec
from envrec.bench.variants import FrameEnv

from .support.batch_json import load_batch
from .support.envs import SPACES, ColourEnv, SpaceEnv
from .support.episodes import run_episodes

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
SCHEMAS = os.path.join(ROOT, "docs", "schemas")

pytestmark = pytest.mark.timeout(180)


def _validator(name: str) -> jsonschema.Draft202012Validator:
    with open(os.path.join(SCHEMAS, name)) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


MANIFEST = _validator("manifest.schema.json")
BATCH = _validator("batch.schema.json")
CLIP_META = _validator("clip-meta.schema.json")


def _load(path: str):
    with open(path) as f:
        return json.load(f)


def _errors(validator: jsonschema.Draft202012Validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def validate_folder(folder) -> dict[str, int]:
    """Validate every manifest, batch and clip metadata under ``folder``; how many of each there were."""
    counts = {"manifests": 0, "segments": 0, "batches": 0, "clips": 0}
    problems = []
    paths = glob.glob(os.path.join(folder, "**", "*.json"), recursive=True)
    for path in sorted(paths + glob.glob(os.path.join(folder, "**", "*.json.zst"), recursive=True)):
        name = os.path.basename(path)
        doc = load_batch(path)
        if name.endswith(".meta.json"):
            validator, kind = CLIP_META, "clips"
        elif name.endswith(".manifest.json"):
            validator, kind = MANIFEST, "segments" if "segment_of" in doc else "manifests"
        else:
            validator, kind = BATCH, "batches"
        counts[kind] += 1
        problems += [f"{name}: {p}" for p in _errors(validator, doc)]
    assert not problems, "\n".join(problems)
    return counts


def _cartpole(folder, steps: int, **options) -> None:
    env = envrec.RecordTrace(gym.make("CartPole-v1"), str(folder), **options)
    env.reset(seed=0)
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.close()


@pytest.mark.parametrize("compression", [None, "auto", "zstd"])
def test_cartpole_traces_validate(tmp_path, compression):
    _cartpole(tmp_path, 600, compression=compression, batch_bytes=4096)
    counts = validate_folder(tmp_path)
    assert counts["manifests"] == 1 and counts["batches"] >= 2, counts
    manifest = _load(glob.glob(str(tmp_path / "*.manifest.json"))[0])
    assert manifest["closed_cleanly"] and (manifest["settings"]["compression"] is not None) == (compression is not None)


def test_image_traces_under_the_default_validate(tmp_path):
    """compression="auto": frames zstd with the delta filter, the rest raw, the batch JSON a .json.zst."""
    env = envrec.RecordTrace(FrameEnv(length=30, frames="game"), str(tmp_path), commit_interval=None)
    run_episodes(env, 3)
    env.close()
    counts = validate_folder(tmp_path)
    assert counts["manifests"] == 1 and counts["batches"] == 1, counts
    batch = load_batch(glob.glob(str(tmp_path / "*.ep*.json.zst"))[0])
    assert len(batch["episodes"]) == 3
    assert batch["episodes"][0]["observations"]["filter"] == "xor" and "codec" not in batch["episodes"][0]["actions"]


def test_closed_manifest_segments_validate(tmp_path):
    _cartpole(tmp_path, 300, batch_bytes=1)  # a batch per step (episodes in parts): more than one segment of 256 batches
    counts = validate_folder(tmp_path)
    assert counts["segments"] >= 1 and counts["batches"] > 256, counts


def test_every_space_kind_validates(tmp_path):
    for i, (name, space) in enumerate(SPACES.items()):
        folder = tmp_path / name
        env = envrec.RecordTrace(SpaceEnv(space, action_space=SPACES["tuple" if i % 2 else "dict"]), str(folder),
                                 compression="zstd" if i % 3 == 0 else None)
        run_episodes(env, 2)
        env.close()
    counts = validate_folder(tmp_path)
    assert counts["manifests"] == len(SPACES) and counts["batches"] >= len(SPACES), counts


def test_vector_traces_validate(tmp_path):
    envs = envrec.RecordVectorTrace(gym.make_vec("CartPole-v1", num_envs=3), str(tmp_path), batch_bytes=4096)
    envs.reset(seed=0)
    for _ in range(200):
        envs.step(envs.action_space.sample())
    envs.close()
    counts = validate_folder(tmp_path)
    assert counts["manifests"] == 3 and counts["batches"] >= 3, counts
    assert _load(str(tmp_path / f"{envs.prefix_of(2)}.manifest.json"))["settings"]["sub_env"] == 2


def test_video_clip_metadata_validates(tmp_path):
    env = envrec.RecordVideo(ColourEnv(episode_len=6), str(tmp_path), episode_trigger=lambda e: True)
    env = envrec.RecordTrace(env, str(tmp_path))
    run_episodes(env, 3)
    env.close()
    counts = validate_folder(tmp_path)
    assert counts["clips"] == 3 and counts["manifests"] == 1, counts
    meta = _load(glob.glob(str(tmp_path / "*.meta.json"))[0])
    assert meta["written_by"] == "encoder" and meta["path"].endswith(".mp4") and meta["frames_written"] == 7


def test_vector_video_clip_metadata_validates(tmp_path):
    envs = gym.make_vec("CartPole-v1", num_envs=2, render_mode="rgb_array")
    envs = envrec.RecordVectorVideo(envs, str(tmp_path), sub_envs=(0, 1), episode_trigger=lambda e: e == 0)
    envs.reset(seed=0)
    for _ in range(40):
        envs.step(envs.action_space.sample())
    envs.close()
    counts = validate_folder(tmp_path)
    assert counts["clips"] == 2, counts
    assert {_load(p)["sub_env"] for p in glob.glob(str(tmp_path / "*.meta.json"))} == {0, 1}


# -- broken documents are refused: the schemas are not vacuous ----------------------------------------------
@pytest.fixture(scope="module")
def real_documents(tmp_path_factory):
    folder = tmp_path_factory.mktemp("real")
    env = envrec.RecordVideo(ColourEnv(episode_len=4), str(folder), episode_trigger=lambda e: True)
    env = envrec.RecordTrace(env, str(folder), compression="zstd")
    run_episodes(env, 2)
    env.close()
    return {
        "manifest": _load(glob.glob(str(folder / "*.manifest.json"))[0]),
        "batch": load_batch(glob.glob(str(folder / "*.ep*.json*"))[0]),
        "clip": _load(glob.glob(str(folder / "*.meta.json"))[0]),
    }


def _set(doc, path, value):
    *parents, last = path
    for key in parents:
        doc = doc[key]
    if value is _DELETE:
        del doc[last]
    else:
        doc[last] = value


_DELETE = object()
BROKEN = [
    ("manifest", ("batches",), _DELETE, "a missing required key"),
    ("manifest", ("complete",), "yes", "a string for a bool"),
    ("manifest", ("batches", 0, "bin_crc32"), -1, "a negative CRC-32"),
    ("manifest", ("batches", 0, "fn"), 7, "a number for a file name"),
    ("manifest", ("counters", "steps"), 1.5, "a float for a count"),
    ("manifest", ("settings", "compression", "codec"), "gzip", "an unknown codec"),
    ("manifest", ("observation_space", "type"), "Graph", "an unknown space"),
    ("manifest", ("surprise",), 1, "a key the format does not have"),
    ("batch", ("episodes", 0, "rewards"), _DELETE, "a missing field"),
    ("batch", ("episodes", 0, "rewards", "shape"), "4", "a string for a shape"),
    ("batch", ("episodes", 0, "observations", "npyoff"), 3, "an unaligned offset"),
    ("batch", ("episodes", 0, "observations", "codec"), _DELETE, "chunks without a codec"),
    ("batch", ("episodes", 0, "ended_by"), "exploded", "an unknown ending"),
    ("batch", ("episodes", 0, "infos"), {"t": 1}, "infos not a list"),
    ("clip", ("name",), _DELETE, "a missing name"),
    ("clip", ("frames_written",), "7", "a string for a count"),
    ("clip", ("written_by",), "someone", "an unknown author"),
    ("clip", ("broken",), 0, "an integer for a bool"),
]


@pytest.mark.parametrize(("kind", "path", "value", "what"), BROKEN, ids=[b[3] for b in BROKEN])
def test_a_broken_document_is_refused(real_documents, kind, path, value, what):
    validator = {"manifest": MANIFEST, "batch": BATCH, "clip": CLIP_META}[kind]
    doc = copy.deepcopy(real_documents[kind])
    assert not _errors(validator, doc)  # the real one validates
    _set(doc, path, value)
    assert _errors(validator, doc), f"{kind} with {what} was accepted"
