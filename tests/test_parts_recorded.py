"""Episodes the serializer wrote in parts, read back end to end: live follow, eviction, exports, inspect, viewer.

The env is ``FrameEnv(length=None, frames="game")``: an episode that never
ends, whose every frame is known (``game_frame(seed, t)``), so each
observation read back is checked against the step it claims to be.
"""

from __future__ import annotations

import contextlib
import io
import logging

import numpy as np
import pytest

import envrec
from envrec.bench.variants import FrameEnv, game_frame
from envrec.cli import main as cli_main
from envrec.viewer.catalog import Catalog

from .support.waiting import committed_episodes, wait_for

pytestmark = pytest.mark.timeout(180)

H = W = 16
SEED = 3


def _frames_are_the_steps(ep) -> None:
    """Every observation of ``ep`` is the game frame of its step number (observations[0]: step first_step)."""
    for j in range(ep.length + 1):
        np.testing.assert_array_equal(ep.observations[j], game_frame(SEED, ep.first_step + j, H, W))


def _record(folder, steps: int, **options):
    env = envrec.RecordTrace(FrameEnv(H, W, length=None, frames="game"), folder, name_prefix="fr", **options)
    env.reset(seed=SEED)
    for _ in range(steps):
        env.step(0)
    return env


def test_a_live_endless_episode_is_read_in_its_committed_parts_then_whole(tmp_path):
    env = _record(tmp_path, 200, batch_bytes=20_000, commit_interval=0.05)
    try:
        assert wait_for(lambda: sum(e.length for e in committed_episodes(tmp_path)) == 200, 20)  # the idle commit
        reader = envrec.TraceReader(tmp_path)
        assert len(reader) == 1
        live = reader[0]
        assert live.length == 200 and not live.complete and live.ended_by is None and len(live.parts) > 2
        assert live.parts[-1].continues and all(p.continues for p in live.parts)
        _frames_are_the_steps(live)
        for _ in range(100):
            env.step(0)
        assert wait_for(lambda: (reader.refresh(), reader[0].length)[1] == 300, 20)
        assert len(reader) == 1
    finally:
        env.close()
    reader.refresh()
    ep = reader[0]
    # every step was committed (by the idle commit) before the close: the last part may still say it
    # continues, but the recording ended after it, and the reader says so
    assert ep.length == 300 and ep.ended_by == "close" and not ep.complete
    _frames_are_the_steps(ep)
    assert [p.length for p in reader.iter_parts(0)] == [p.length for p in ep.parts]
    assert [p.first_step for p in ep.parts] == list(np.cumsum([0] + [p.length for p in ep.parts[:-1]]))


@pytest.fixture(scope="module")
def evicted(tmp_path_factory):
    """An endless episode (ended by a reset after 900 steps) whose oldest parts a disk budget evicted, then a short one."""
    folder = tmp_path_factory.mktemp("evicted")
    env = _record(folder, 900, batch_bytes=20_000, max_bytes=150_000, commit_interval=None)
    env.reset(seed=SEED)
    for _ in range(20):
        env.step(0)
    env.close()
    return folder


def test_evicted_parts_leave_the_newest_with_their_true_step_numbers(evicted):
    reader = envrec.TraceReader(evicted)
    assert reader.manifests[0]["evicted"]["batches"] > 0
    first, second = reader
    assert first.first_step > 0 and first.first_step + first.length == 900 and first.ended_by == "reset"
    _frames_are_the_steps(first)
    assert second.first_step == 0 and second.length == 20 and len(second.parts) == 1


def test_arrow_rows_carry_the_true_step_numbers(evicted):
    from envrec.export import to_arrow

    first = envrec.TraceReader(evicted)[0]
    table = to_arrow(evicted)
    steps = table.filter(table["episode_id"].to_numpy() == first.episode_id)["step"].to_pylist()
    assert steps == list(range(first.first_step, 900))
    obs = table["observation"].combine_chunks().to_numpy_ndarray()
    np.testing.assert_array_equal(obs[0], game_frame(SEED, first.first_step, H, W))


def test_minari_skips_an_unfinished_episode_with_a_warning(evicted, tmp_path, monkeypatch, caplog):
    from envrec.export import to_minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    with caplog.at_level(logging.WARNING, logger="envrec.export.minari_dataset"):
        ds = to_minari(evicted, "envrec/frames/endless-v0")
    assert ds.total_episodes == 1 and ds.total_steps == 20
    assert "1 unfinished episode(s) skipped" in caplog.text


def test_inspect_shows_a_long_episode_once_with_its_parts_and_first_step(evicted):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["inspect", str(evicted)]) == 0
    reader = envrec.TraceReader(evicted)
    first = reader[0]
    text = out.getvalue()
    assert "fr: env None, 2 episode(s)" in text and f"episodes: 2, steps: {first.length + 20}" in text
    assert (f"episode 0: {first.length} steps, return {first.length:.6g}, steps {first.first_step}..899 "
            f"(the {first.first_step} before not kept: evicted, or in a damaged part), in {len(first.parts)} parts") in text


def test_viewer_lists_a_long_episode_once_and_plots_it_from_its_first_step(evicted):
    catalog = Catalog(str(evicted))
    index = catalog.index()
    first = envrec.TraceReader(evicted)[0]
    rows = [(e["episode_id"], e["length"], e["first_step"], e["parts"]) for e in index["episodes"]]
    assert rows == [(0, first.length, first.first_step, len(first.parts)), (1, 20, 0, 1)]
    doc = catalog.episode(index["recordings"][0]["name"], 0, width=100000)
    assert doc["image"] is not None and doc["series"]["observations"] == []  # an image: shown, not plotted
    doc = catalog.episode(index["recordings"][0]["name"], 0, width=100000, obs_dims=[0])  # unless a pixel is asked for
    assert (doc["first_step"], doc["length"], doc["parts"], doc["ended_by"]) == (first.first_step, first.length,
                                                                                len(first.parts), "reset")
    assert doc["series"]["reward"]["x"][0] == first.first_step + 1  # step t's reward at x = t + 1
    assert doc["series"]["observations"][0]["x"][0] == first.first_step  # x: the episode's observation index
    assert doc["series"]["observations"][0]["x"][-1] == 900
