"""Recording inside Ray actors (as RLlib's EnvRunners do) and reading traces back with Ray Data, on a local cluster."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import psutil
import pyarrow as pa
import pytest
import ray

import envrec
from envrec.contract.shm import list_memfds
from envrec.export import to_arrow, to_parquet
from envrec.ray import read_traces, recording_env_creator

from .support.episodes import record_cartpole
from .support.waiting import committed_episodes, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    yield
    ray.shutdown()


def _cartpole(config):
    return gym.make("CartPole-v1", render_mode="rgb_array")


@ray.remote(max_concurrency=2)
class Stepper:
    """What an EnvRunner does with the env its creator makes: step it, reset it, close it."""

    def __init__(self, folder, worker_index, video=False):
        creator = recording_env_creator(_cartpole, folder, video={"episode_trigger": lambda e: True} if video else False,
                                        batch_bytes=4_000)
        self.env = creator({"worker_index": worker_index})
        self.env.reset(seed=worker_index)
        self.env.action_space.seed(worker_index)
        self.steps = 0

    def pid(self):
        return os.getpid()

    def done(self):
        return self.steps

    def folder(self):
        return self.env.directory

    def run(self, n):
        for _ in range(n):
            _, _, terminated, truncated, _ = self.env.step(self.env.action_space.sample())
            self.steps += 1
            if terminated or truncated:
                self.env.reset()
        return self.steps

    def close(self):
        self.env.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_creator_gives_every_sub_env_its_own_folder_in_or_out_of_process(tmp_path, mode):
    """RLlib builds a runner's sub-envs with one context, in-process or in AsyncVectorEnv sub-processes."""
    creator = recording_env_creator("CartPole-v1", tmp_path, batch_bytes=2_000)
    context = {"worker_index": 3}
    fns = [lambda: creator(context) for _ in range(3)]
    vec = gym.vector.SyncVectorEnv(fns) if mode == "sync" else gym.vector.AsyncVectorEnv(fns)
    vec.reset(seed=0)
    for _ in range(60):
        vec.step(vec.action_space.sample())
    vec.close()
    folders = sorted(os.listdir(tmp_path))
    assert all(f.startswith("runner-3-") for f in folders)
    steps = {f: _steps(tmp_path / f) for f in folders}  # the parent's unstepped env left no manifest
    stepped = [f for f, n in steps.items() if n]
    assert len(stepped) == 3 and all(steps[f] > 50 for f in stepped)  # 60 steps each, less autoreset steps (resets)
    # AsyncVectorEnv makes one env in the parent to read its spaces, and closes it unstepped: an empty recording
    assert len(folders) == (3 if mode == "sync" else 4)
    assert len({f.split("-")[2] for f in stepped}) == (1 if mode == "sync" else 3)  # one pid, or one per sub-process
    assert to_arrow(tmp_path).num_rows == sum(steps.values())  # every sub-env's steps, apart


def test_creator_ships_every_runner_traces_and_clips_to_one_url(tmp_path):
    url = (tmp_path / "store").as_uri()
    creator = recording_env_creator("CartPole-v1", tmp_path / "node", video={"episode_trigger": lambda e: e == 0},
                                    ship_to=url, batch_bytes=2_000)
    envs = [creator({"worker_index": i}) for i in (1, 2)]
    steps = sum(_two_episodes(env, seed=i) for i, env in enumerate(envs))
    for env in envs:
        env.close()  # a clean close ships everything committed, clips included
    ds = envrec.open_dataset(url, cache_dir=str(tmp_path / "cache"))
    traces = [r for r in ds.recorders if not r.startswith("clips.")]
    assert sorted(r.split("-")[1] for r in traces) == ["1", "2"]  # named for their runners
    assert sum(ds.episodes.column("length").to_pylist()) == steps
    assert ds.clips.num_rows == 2  # each runner's first episode, shipped with the traces' ship_to


def _two_episodes(env, seed: int) -> int:
    env.reset(seed=seed)
    env.action_space.seed(seed)
    n = 0
    for _ in range(2):
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            n, done = n + 1, terminated or truncated
        env.reset()
    return n


def _steps(folder) -> int:
    return sum(e.length for e in committed_episodes(folder))


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("recording", "ascending"), ("episode_id", "ascending"), ("step", "ascending")])


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_two_actors_record_and_read_traces_counts_every_step(cluster, tmp_path):
    actors = [Stepper.remote(str(tmp_path), i) for i in (1, 2)]
    folders = ray.get([a.folder.remote() for a in actors])
    pids = ray.get([a.pid.remote() for a in actors])
    assert [os.path.basename(f).rsplit("-", 1)[0] for f in folders] == [f"runner-1-{pids[0]}", f"runner-2-{pids[1]}"]
    steps = ray.get([a.run.remote(n) for a, n in zip(actors, (700, 450), strict=True)])
    ray.get([a.close.remote() for a in actors])
    ds = read_traces(str(tmp_path))
    assert ds.count() == sum(steps) == 1150
    assert ds.sum("reward") == 1150.0  # CartPole pays 1 a step: every row was read, not only counted
    got = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    assert _sorted(got).equals(_sorted(to_arrow(tmp_path)))  # Ray's rows are envrec.to_arrow's, bit for bit
    out = tmp_path / "pq"
    to_parquet(tmp_path, out)
    assert ray.data.read_parquet(str(out)).count() == 1150
    for a in actors:
        ray.kill(a)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_killed_actor_keeps_what_it_committed_and_leaks_nothing(cluster, tmp_path):
    victim, survivor = Stepper.remote(str(tmp_path), 1, video=True), Stepper.remote(str(tmp_path), 2)
    pid = ray.get(victim.pid.remote())
    victim_folder = ray.get(victim.folder.remote())
    victim.run.remote(10**7)  # runs until killed
    assert wait_for(lambda: ray.get(victim.done.remote()) > 1500 and _steps(victim_folder) > 0, 60)
    committed_before = _steps(victim_folder)

    def family() -> list[psutil.Process]:
        return psutil.Process(pid).children(recursive=True)

    # kill it while a clip is being encoded: serializer, encoder and an ffmpeg running
    def encoding() -> bool:
        try:
            return len(family()) >= 3 and any("ffmpeg" in p.name() for p in family())
        except psutil.Error:  # a clip's ffmpeg exited as we looked
            return False

    assert wait_for(encoding, 20)
    tree = [pid, *(p.pid for p in family())]
    assert [s for s in list_memfds() if s.startswith(f"envrec_{pid}_")]
    ray.kill(victim)
    killed_at = time.monotonic()

    def gone(p):
        try:
            return psutil.Process(p).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    assert wait_for(lambda: all(gone(p) for p in tree), 5.0), [p for p in tree if not gone(p)]
    assert wait_for(lambda: not [s for s in list_memfds() if s.startswith(f"envrec_{pid}_")], 5.0 - (time.monotonic() - killed_at))
    committed = envrec.TraceReader(victim_folder)  # every batch it committed reads back, CRC-32 checked
    kept = sum(e.length for e in committed)
    assert kept >= committed_before  # nothing committed was lost
    for folder, _, names in os.walk(victim_folder):  # what its workers were writing died with them: hidden, named by them
        for n in names:
            if n.endswith(".tmp"):
                assert n.startswith(".") and int(n.rsplit(".", 2)[1]) in tree
                os.unlink(os.path.join(folder, n))
    steps = ray.get(survivor.run.remote(300))  # the other runner goes on recording
    ray.get(survivor.close.remote())
    assert read_traces(str(tmp_path)).count() == kept + steps
    ray.kill(survivor)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_read_traces_names_a_damaged_batch_and_an_unreadable_manifest(cluster, tmp_path):
    import json

    record_cartpole(tmp_path, 3, name_prefix="cp", batch_bytes=1500)
    bad = json.load(open(tmp_path / "cp.manifest.json"))["batches"][1]
    (tmp_path / bad["bin"]).write_bytes(b"\0" * bad["bin_bytes"])  # the right size, not the right bytes
    with pytest.raises(envrec.TraceError, match=f"batch {bad['fn']} .* its CRC-32 differs"):
        read_traces(tmp_path).take_all()  # raised in the read task, reaching the caller as a TraceError
    (tmp_path / "cp.manifest.json").write_text('{"batches": 5}')
    with pytest.raises(envrec.TraceError, match="cp.manifest.json: batches: 5 is not a list"):
        read_traces(tmp_path)
