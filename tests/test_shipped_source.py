"""A shipped run read batch by batch (what ``read_traces(URL)``'s read tasks do), without Ray: the rows equal the
local recording's, a continued part is checked from the index, a damaged object is named."""

from __future__ import annotations

import os

import gymnasium as gym
import pyarrow as pa
import pytest

import envrec
from envrec import RecordTrace
from envrec.errors import TraceError
from envrec.export import to_arrow
from envrec.export.batches import common_schema
from envrec.export.shipped_source import shipped_recordings

pytestmark = pytest.mark.timeout(120)


def _record_shipped(tmp_path, steps: int = 700) -> tuple[str, str]:
    """Pendulum (200-step episodes) in small batches, shipped to a file:// store: most episodes in parts."""
    url = (tmp_path / "store").as_uri()
    env = RecordTrace(gym.make("Pendulum-v1"), str(tmp_path / "local"), ship_to=url, batch_bytes=3_000)
    env.reset(seed=1)
    env.action_space.seed(1)
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.close()  # a clean close ships every committed batch
    return url, str(tmp_path / "local")


def _rows(url: str) -> pa.Table:
    recordings = shipped_recordings(url)
    schema = common_schema([batches[0].source for batches in recordings])
    return pa.Table.from_batches([b.rows(schema) for batches in recordings for b in batches], schema=schema)


def test_shipped_batches_read_as_the_local_recording_bit_for_bit(tmp_path):
    url, local = _record_shipped(tmp_path)
    recordings = shipped_recordings(url)
    assert len(recordings) == 1 and any(b.follows is not None for b in recordings[0])  # parts joined across batches
    assert _rows(url).equals(to_arrow(local))  # same rows, same recording name (a shipping prefix is its recorder id)
    recorder = recordings[0][0].source.name
    assert _rows(f"{url}/{recorder}").equals(to_arrow(local))  # one recorder's URL reads the same
    cached = envrec.open_dataset(url, cache_dir=str(tmp_path / "cache")).local()  # the whole-run local cache agrees
    assert to_arrow(cached).equals(to_arrow(local))


def test_a_damaged_shipped_object_is_named_by_the_task_that_reads_it(tmp_path):
    url, _ = _record_shipped(tmp_path, steps=300)
    batches = shipped_recordings(url)[0]
    schema = common_schema([batches[0].source])
    victim = batches[0]
    path = victim.paths[-1]
    with open(path, "r+b") as f:  # a file:// store's object is a file: flip a byte, size kept
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF
        f.seek(0)
        f.write(data)
    with pytest.raises(TraceError, match=os.path.basename(path)):
        victim.rows(schema)
    assert batches[1].rows(schema).num_rows == batches[1].entry["steps"]  # the others still read
