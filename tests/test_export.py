"""Exports: Arrow tables, Parquet datasets (read back by pyarrow, pandas, Polars and DuckDB), Minari datasets."""

from __future__ import annotations

import json
import logging
import os
import sys
import urllib.parse

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from gymnasium import spaces as S

import envrec
from envrec.cli import main
from envrec.errors import ConfigError
from envrec.export import to_arrow, to_minari, to_parquet
from envrec.export.arrow_table import plain_json
from envrec.export.batches import iter_record_batches
from envrec.read.reader import TraceError

from .support.envs import SPACES, SpaceEnv
from .support.episodes import run_episodes

pytestmark = pytest.mark.timeout(120)


def _record(folder, env, episodes=4, seed0=0, options=None, **kwargs) -> None:
    env = envrec.RecordTrace(env, folder, **kwargs)
    run_episodes(env, episodes, seed0, action_seed=seed0, options=options)
    env.close()


def _leaf(arr: pa.Array):
    if isinstance(arr.type, pa.FixedShapeTensorType):
        return arr.to_numpy_ndarray()
    if pa.types.is_struct(arr.type):
        return {f.name: _leaf(arr.field(i)) for i, f in enumerate(arr.type)}
    if pa.types.is_string(arr.type):
        return arr.to_pylist()
    return arr.to_numpy(zero_copy_only=False)


def _same(actual, expected) -> None:
    """Bit for bit: dtype, shape and bytes (NaN payloads and -0.0 included)."""
    if isinstance(expected, dict):
        assert set(actual) == set(expected)
        for k in expected:
            _same(actual[k], expected[k])
    elif isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for i, item in enumerate(expected):
            _same(actual[str(i)], item)
    elif isinstance(expected, list):
        assert actual == expected
    else:
        expected = np.asarray(expected)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert actual.tobytes() == expected.tobytes()


def _rows_of(table: pa.Table, recording: str, episode_id: int) -> pa.Table:
    mask = pa.compute.and_(pa.compute.equal(table["recording"], recording), pa.compute.equal(table["episode_id"], episode_id))
    return table.filter(mask).combine_chunks()


def _slice(value, lo, hi):
    if isinstance(value, dict):
        return {k: _slice(v, lo, hi) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_slice(v, lo, hi) for v in value)
    return value[lo:hi]


def _check_against_reader(table: pa.Table, folder, recording: str) -> int:
    steps = 0
    for ep in envrec.TraceReader(folder):
        rows = _rows_of(table, recording, ep.episode_id)
        assert rows.num_rows == ep.length
        assert rows["step"].to_pylist() == list(range(ep.length))
        _same(_leaf(rows["observation"].chunk(0)), _slice(ep.observations, 0, ep.length))
        _same(_leaf(rows["next_observation"].chunk(0)), _slice(ep.observations, 1, ep.length + 1))
        _same(_leaf(rows["action"].chunk(0)), ep.actions)
        _same(_leaf(rows["reward"].chunk(0)), np.asarray(ep.rewards, np.float64))
        assert rows["terminated"].to_pylist() == [bool(x) for x in ep.terminations]
        assert rows["truncated"].to_pylist() == [bool(x) for x in ep.truncations]
        assert [json.loads(s) for s in rows["info"].to_pylist()] == [json.loads(json.dumps(plain_json(i))) for i in ep.infos[1:]]
        steps += ep.length
    return steps


@pytest.mark.variants
@pytest.mark.parametrize("space", ["box_f32_nan", "box_u8_image", "multibinary", "text", "dict", "tuple"])
def test_arrow_rows_give_back_every_step_bit_for_bit(tmp_path, space):
    _record(tmp_path, SpaceEnv(SPACES[space], action_space=S.Box(-1, 1, (2,), np.float32)), batch_bytes=2_000)
    table = to_arrow(tmp_path)
    prefix = envrec.TraceReader(tmp_path).manifests[0]["prefix"]
    assert set(table["recording"].to_pylist()) == {prefix}
    assert _check_against_reader(table, tmp_path, prefix) == table.num_rows == 4 * 7


def test_arrow_reads_compressed_traces_and_infos_of_every_kind(tmp_path):
    _record(tmp_path, SpaceEnv(SPACES["box_f64_2d"]), compression="zstd", batch_bytes=1_000)
    table = to_arrow(tmp_path)
    prefix = envrec.TraceReader(tmp_path).manifests[0]["prefix"]
    assert _check_against_reader(table, tmp_path, prefix) == table.num_rows
    info = json.loads(table["info"][0].as_py())  # step 1's info: arrays, NaN, int keys, a class
    assert info["arr"] == [0, 1, 2] and info["nan"] == "NaN" and info["7"] == "int key" and "class" in info["obj"]


def test_recordings_with_the_same_prefix_in_different_folders_stay_apart(tmp_path):
    for sub, seed in (("node-a", 0), ("node-b", 100)):
        _record(tmp_path / "runs" / sub, gym.make("CartPole-v1"), episodes=3, seed0=seed, name_prefix="run")
    table = to_arrow(str(tmp_path / "runs" / "node-*"))  # a glob
    assert sorted(set(table["recording"].to_pylist())) == ["node-a/run", "node-b/run"]
    for sub in ("node-a", "node-b"):
        _check_against_reader(table, tmp_path / "runs" / sub, f"{sub}/run")
    nested = to_arrow(tmp_path / "runs")  # one folder, searched recursively
    assert nested.num_rows == table.num_rows and set(nested["recording"].to_pylist()) == {"node-a/run", "node-b/run"}


def test_different_spaces_are_refused_by_name(tmp_path):
    _record(tmp_path / "a", gym.make("CartPole-v1"), episodes=1, name_prefix="cart")
    _record(tmp_path / "b", SpaceEnv(SPACES["box_i16"]), episodes=1, name_prefix="boxes")
    with pytest.raises(TraceError, match=r"a/cart and b/boxes have different spaces"):
        to_arrow([tmp_path / "a", tmp_path / "b"])


@pytest.mark.parametrize("bad", ["missing", "file", "glob"])
def test_bad_paths_get_clear_errors(tmp_path, bad):
    (tmp_path / "f.txt").write_text("x")
    path, match = {
        "missing": (tmp_path / "nope", "does not exist"),
        "file": (tmp_path / "f.txt", "is not a folder"),
        "glob": (str(tmp_path / "z*"), "nothing matches"),
    }[bad]
    with pytest.raises(TraceError, match=match):
        to_arrow(path)
    with pytest.raises(TraceError, match="no recording"):
        to_arrow(tmp_path)


def test_export_streams_one_batch_at_a_time(tmp_path):
    _record(tmp_path, gym.make("CartPole-v1"), episodes=6, batch_bytes=1_000)
    entries = envrec.TraceReader(tmp_path).recordings[0].batches
    assert len(entries) >= 4
    _, batches = iter_record_batches(tmp_path)
    first = next(batches)
    assert first.num_rows == entries[0]["steps"]
    os.unlink(tmp_path / entries[-1]["bin"])  # not read yet: the stream finds it gone when it gets there
    seen = [first.num_rows]
    with pytest.raises(TraceError, match=entries[-1]["bin"]):
        for b in batches:
            seen.append(b.num_rows)
    assert seen == [e["steps"] for e in entries[:-1]]


@pytest.mark.slow
def test_parquet_dataset_reads_back_in_pyarrow_pandas_polars_duckdb(tmp_path):
    import duckdb
    import pandas as pd
    import polars as pl

    for sub, seed in (("a", 0), ("b", 50)):
        _record(tmp_path / "rec" / sub, gym.make("CartPole-v1"), episodes=3, seed0=seed, batch_bytes=2_000)
    out = tmp_path / "out"
    summary = to_parquet(tmp_path / "rec", out)
    table = to_arrow(tmp_path / "rec")
    assert summary.rows == table.num_rows and summary.files >= 2
    names = set(table["recording"].to_pylist())
    assert sorted(os.listdir(out)) == sorted(f"recording={urllib.parse.quote(r, safe='')}" for r in names)  # one partition each
    keys = [("recording", "ascending"), ("episode_id", "ascending"), ("step", "ascending")]
    back = pads.dataset(out, partitioning="hive").to_table().select(table.column_names).sort_by(keys)
    assert back.equals(table.sort_by(keys))  # every column, tensors included
    for rec in names:
        _check_against_reader(back, tmp_path / "rec" / rec.split("/")[0], rec)
    df = pd.read_parquet(out)
    assert len(df) == table.num_rows and df["observation"].iloc[0].shape == (4,)
    lazy = pl.scan_parquet(f"{out}/**/*.parquet", hive_partitioning=True)
    assert lazy.select(pl.len()).collect().item() == table.num_rows
    n, total = duckdb.sql(f"select count(*), sum(reward) from read_parquet('{out}/**/*.parquet', hive_partitioning=true)").fetchall()[0]
    assert n == table.num_rows and total == pytest.approx(float(pa.compute.sum(table["reward"]).as_py()))


def test_parquet_export_never_overwrites_and_leaves_nothing_half_written(tmp_path):
    _record(tmp_path / "rec", gym.make("CartPole-v1"), episodes=4, batch_bytes=1_000)
    (tmp_path / "exists").mkdir()
    with pytest.raises(ConfigError, match="exists"):
        to_parquet(tmp_path / "rec", tmp_path / "exists")
    last = envrec.TraceReader(tmp_path / "rec").recordings[0].batches[-1]
    steps = sum(e.length for e in envrec.TraceReader(tmp_path / "rec"))
    with open(tmp_path / "rec" / last["bin"], "r+b") as f:  # damage the last batch: found midway through the export
        good = f.read(8)
        f.seek(0)
        f.write(b"\xff" * 8)
    with pytest.raises(TraceError, match="CRC-32"):
        to_parquet(tmp_path / "rec", tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == ["exists", "rec"]
    with open(tmp_path / "rec" / last["bin"], "r+b") as f:  # mended: the retry into the same folder works
        f.write(good)
    assert to_parquet(tmp_path / "rec", tmp_path / "out").rows == steps


class _CountingInfo(gym.Wrapper):
    """Infos with the same keys at every step, as Minari stores them."""

    def reset(self, **kwargs):
        obs, _ = self.env.reset(**kwargs)
        self._t = 0
        return obs, {"t": 0, "pos": np.asarray(obs[:2])}

    def step(self, action):
        obs, r, term, trunc, _ = self.env.step(action)
        self._t += 1
        return obs, r, term, trunc, {"t": self._t, "pos": np.asarray(obs[:2])}


def _check_minari(dataset_id, folder) -> list:
    import minari

    ds = minari.load_dataset(dataset_id)
    episodes = list(envrec.TraceReader(folder))
    assert ds.total_episodes == len(episodes) and ds.total_steps == sum(e.length for e in episodes)
    for got, ep in zip(ds.iterate_episodes(), episodes, strict=True):
        _same_minari(got.observations, ep.observations)
        _same_minari(got.actions, ep.actions)
        _same(np.asarray(got.rewards, np.float64), np.asarray(ep.rewards, np.float64))
        assert list(got.terminations) == list(ep.terminations) and list(got.truncations) == list(ep.truncations)
    return list(ds.storage.get_episode_metadata(range(len(episodes))))


def _same_minari(actual, expected) -> None:
    if isinstance(expected, dict):
        for k in expected:
            _same_minari(actual[k], expected[k])
    elif isinstance(expected, tuple):
        for a, e in zip(actual, expected, strict=True):
            _same_minari(a, e)
    elif isinstance(expected, list):
        assert list(actual) == expected
    else:
        _same(np.asarray(actual), np.asarray(expected))


def test_minari_dataset_gives_back_every_episode(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    _record(tmp_path / "rec", _CountingInfo(gym.make("CartPole-v1")), episodes=5, seed0=7, options={"low": -0.01, "high": 0.01},
            compression="zstd", batch_bytes=3_000)
    ds = to_minari(tmp_path / "rec", "envrec/cartpole/random-v0", author="envrec tests", algorithm_name="random")
    assert ds.spec.env_spec.id == "CartPole-v1"
    meta = _check_minari("envrec/cartpole/random-v0", tmp_path / "rec")
    assert [m["seed"] for m in meta] == [7, 8, 9, 10, 11]
    assert all(m["options"] == {"low": -0.01, "high": 0.01} for m in meta)
    import minari

    first = next(minari.load_dataset("envrec/cartpole/random-v0").iterate_episodes())
    ep = envrec.TraceReader(tmp_path / "rec")[0]
    assert list(first.infos["t"]) == list(range(ep.length + 1))
    _same(np.asarray(first.infos["pos"]), np.stack([i["pos"] for i in ep.infos]))
    with pytest.raises(ConfigError, match="exists"):
        to_minari(tmp_path / "rec", "envrec/cartpole/random-v0")


@pytest.mark.variants
@pytest.mark.parametrize("space", ["dict", "tuple", "box_u8_image"])
def test_minari_unregistered_env_uses_the_recorded_spaces(tmp_path, monkeypatch, caplog, space):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    _record(tmp_path / "rec", SpaceEnv(SPACES[space], nan=False), episodes=3)
    with caplog.at_level(logging.WARNING, logger="envrec.export.minari_dataset"):
        ds = to_minari(tmp_path / "rec", f"envrec/{space}-v0")
    assert ds.spec.env_spec is None and ds.observation_space == SPACES[space]
    assert "infos change keys" in caplog.text  # SpaceEnv's infos differ from step to step: left out, and said so
    _check_minari(f"envrec/{space}-v0", tmp_path / "rec")


def test_a_recording_of_zero_step_episodes_exports_no_rows(tmp_path):
    obs = S.Dict({"grid": S.MultiBinary([2, 2]), "pos": S.Box(-1, 1, (3,), np.float32)})  # tensor columns
    rec = envrec.TraceRecorder(tmp_path, obs, S.Discrete(2), name_prefix="only-reset")
    rec.add_reset(obs.sample())
    rec.close()
    table = to_arrow(tmp_path)
    assert table.num_rows == 0 and table.schema.field("observation").type.field("grid").type.shape == [2, 2]


def test_minari_keeps_reset_options_of_every_info_type_as_plain_json(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    options = {"raw": b"\x01", "pair": (1, 2), "arr": np.arange(2)}  # bytes and tuples are not JSON, Minari stores JSON
    _record(tmp_path / "rec", gym.make("CartPole-v1"), episodes=2, options=options)
    to_minari(tmp_path / "rec", "envrec/options-v0")
    meta = _check_minari("envrec/options-v0", tmp_path / "rec")
    assert all(m["options"] == {"raw": "AQ==", "pair": [1, 2], "arr": [0, 1]} for m in meta)


def test_minari_export_that_fails_leaves_no_dataset(tmp_path, monkeypatch):
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    _record(tmp_path / "rec", gym.make("CartPole-v1"), episodes=4, batch_bytes=1_000)
    last = envrec.TraceReader(tmp_path / "rec").recordings[0].batches[-1]
    os.unlink(tmp_path / "rec" / last["fn"])
    with pytest.raises(TraceError, match="missing"):
        to_minari(tmp_path / "rec", "envrec/broken-v0")
    assert "envrec/broken-v0" not in minari.list_local_datasets()


@pytest.mark.variants
@pytest.mark.parametrize("fails_at, namespace_before", [(1, False), (2, False), (2, True)])
def test_minari_export_that_fails_midway_removes_what_it_wrote(tmp_path, monkeypatch, fails_at, namespace_before):
    """Minari's storage failing at its first write (minari 0.5.4 without Pillow: "No module named 'PIL'") or later
    (a full disk): the dataset folder goes, and the namespace folder if the export created it; the retry works."""
    from minari.dataset._storages.arrow_storage import ArrowStorage

    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    _record(tmp_path / "rec", gym.make("CartPole-v1"), episodes=4, batch_bytes=1_000)
    assert len(envrec.TraceReader(tmp_path / "rec").recordings[0].batches) >= 3  # so the second write is midway
    if namespace_before:
        to_minari(tmp_path / "rec", "envrec/other-v0")
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []
    real, calls = ArrowStorage.update_episodes, []

    def failing(self, episodes):
        calls.append(1)
        if len(calls) == fails_at:
            if fails_at == 1:
                raise ModuleNotFoundError("No module named 'PIL'", name="PIL")
            raise OSError(28, "No space left on device")
        return real(self, episodes)

    monkeypatch.setattr(ArrowStorage, "update_episodes", failing)
    with pytest.raises(OSError if fails_at > 1 else ImportError):
        to_minari(tmp_path / "rec", "envrec/cartpole-v0")
    assert len(calls) == fails_at
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before  # nothing it wrote is left
    monkeypatch.setattr(ArrowStorage, "update_episodes", real)
    to_minari(tmp_path / "rec", "envrec/cartpole-v0")  # the retry: not refused as "already exists"
    _check_minari("envrec/cartpole-v0", tmp_path / "rec")


def test_cli_export(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    _record(tmp_path / "rec", gym.make("CartPole-v1"), episodes=3)
    steps = sum(e.length for e in envrec.TraceReader(tmp_path / "rec"))
    assert main(["export", str(tmp_path / "rec"), "--parquet", str(tmp_path / "pq")]) == 0
    assert f"{steps} steps -> {tmp_path / 'pq'}" in capsys.readouterr().out
    assert main(["export", str(tmp_path / "rec"), "--parquet", str(tmp_path / "pq")]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "rec"), "--minari", "envrec/cli-v0", "--author", "me", "--algorithm", "random"]) == 0
    assert f"3 episodes, {steps} steps -> Minari dataset envrec/cli-v0" in capsys.readouterr().out
    assert main(["export", str(tmp_path / "rec"), "--parquet", str(tmp_path / "x"), "--author", "me"]) == 2
    assert "--author only apply to --minari" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nope"), "--parquet", str(tmp_path / "y")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path / "rec")])  # neither --parquet nor --minari


@pytest.mark.parametrize("module, extra, call", [
    ("pyarrow", "arrow", lambda p: to_arrow(p)),
    ("pyarrow", "arrow", lambda p: to_parquet(p, p / "out")),
    ("minari", "minari", lambda p: to_minari(p, "envrec/x-v0")),
])
def test_a_missing_extra_is_named(tmp_path, monkeypatch, module, extra, call):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ImportError, match=rf"{module} is not installed: pip install .*envrec's {extra} extra"):
        call(tmp_path)
