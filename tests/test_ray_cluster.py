"""Ray across nodes with no shared file system: runners ship to one URL, a node dies mid-run, nothing it shipped is lost.

A ``ray.cluster_utils.Cluster`` of a head and two worker nodes (raylets) on this machine; each worker node gets a
folder of its own for its runners' recordings (its "local disk") and a custom resource that pins one runner
actor to it. The actors make their envs with ``recording_env_creator(ship_to=URL)`` and step them; one worker
node is removed mid-run (its raylet and workers killed, its envrec processes with them, its disk deleted). The
shipped dataset then holds every batch that node's ledger says it shipped, each exactly once, and the surviving
runner's whole recording; ``read_traces(URL)``, its read tasks fetching their batches from the store, counts
the dataset's steps. The store: a ``file://`` folder, and moto's S3 server on 127.0.0.1 (its endpoint and keys given
as ``storage_options``, which travel to every runner's shipper and every read task).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import time

import gymnasium as gym
import psutil
import pytest
import ray
from ray.cluster_utils import Cluster

import envrec
from envrec.formats.shipped import batch_key
from envrec.formats.store import Store
from envrec.ray import read_traces, recording_env_creator
from envrec.read.reader import TraceReader

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(180)]

NODES = ("node_a", "node_b")
SHIPPED_BEFORE_KILL = 3  # batches the doomed runner must have shipped before its node goes


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path):
    """``(url, storage_options)`` of an empty store. Unlike ``tests/support/s3_server.py``, the S3 server's endpoint
    and keys are given only as ``storage_options``, never in the environment: the test sees them travel to every
    runner's shipper and every read task."""
    if request.param == "file":
        yield (tmp_path / "store").as_uri(), None
        return
    import boto3  # the test extra's (moto[server]): never skipped
    from moto import server as moto_server
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing",
                   "client_kwargs": {"region_name": "us-east-1"}}
        boto3.client("s3", endpoint_url=options["endpoint_url"], aws_access_key_id="testing",
                     aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket="envrec-test")
        yield "s3://envrec-test/run", options
    finally:
        server.stop()


@pytest.fixture
def cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {name: c.add_node(num_cpus=1, resources={name: 1}) for name in NODES}
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, logging_level="warning")
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


def _pendulum(config):
    return gym.make("Pendulum-v1")  # 200-step episodes: with small batches, most are cut into parts


@ray.remote(num_cpus=0)
class Runner:
    """What an EnvRunner does: make its env with the creator, on its own node's disk, and step it."""

    def __init__(self, folder, url, storage_options, worker_index):
        creator = recording_env_creator(_pendulum, folder, ship_to=url, storage_options=storage_options,
                                        batch_bytes=4_000)
        self.env = creator({"worker_index": worker_index})
        self.env.reset(seed=worker_index)
        self.env.action_space.seed(worker_index)

    def pids(self):
        me = psutil.Process()
        return [me.pid] + [p.pid for p in me.children(recursive=True)]

    def folder(self):
        return self.env.directory

    def run(self, n):
        for _ in range(n):
            _, _, terminated, truncated, _ = self.env.step(self.env.action_space.sample())
            if terminated or truncated:
                self.env.reset()
        return self.env.stats().get("ship_batches", 0)

    def close(self):
        self.env.close()


def _shipped_keys(folder) -> set[str]:
    """The keys the recorder's local ledger says were shipped (appended after each remote commit)."""
    keys = set()
    for path in glob.glob(os.path.join(folder, ".*.shipped-*")):
        with open(path) as f:
            keys |= {line.strip() for line in f if line.endswith("\n")}
    return keys


def _committed_keys(folder) -> set[str]:
    with TraceReader(folder) as reader:
        return {batch_key(b) for rec in reader.recordings for b in rec.batches}


def _kill_node(cluster, node, pids) -> None:
    """The node dies whole: its raylet and workers (``remove_node``) and the envrec processes of its runner."""
    cluster.remove_node(node, allow_graceful=False)
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                              for p in pids):
        time.sleep(0.05)


def test_node_removed_mid_run_keeps_every_batch_it_shipped_exactly_once(store, cluster, tmp_path):
    c, nodes = cluster
    url, options = store
    disks = {name: tmp_path / name for name in NODES}
    runners = {name: Runner.options(resources={name: 1}).remote(str(disks[name]), url, options, k + 1)
               for k, name in enumerate(NODES)}
    folders = dict(zip(NODES, ray.get([runners[n].folder.remote() for n in NODES]), strict=True))
    assert all(folders[n].startswith(str(disks[n])) for n in NODES)  # each runner writes on its own node's disk
    doomed_pids = ray.get(runners["node_b"].pids.remote())

    deadline = time.monotonic() + 60
    while min(ray.get([r.run.remote(150) for r in runners.values()])) < SHIPPED_BEFORE_KILL:
        assert time.monotonic() < deadline, "the runners shipped too little"
        time.sleep(0.2)  # a runner pausing (a learner update): the shipper catches up, few batches to read later
    _kill_node(c, nodes["node_b"], doomed_pids)
    shipped_b = _shipped_keys(folders["node_b"])
    committed_b = _committed_keys(folders["node_b"])
    shutil.rmtree(disks["node_b"])  # its disk went with it

    ray.get(runners["node_a"].run.remote(300))  # the other node goes on
    ray.get(runners["node_a"].close.remote())
    committed_a = _committed_keys(folders["node_a"])

    ds = envrec.open_dataset(url, options, cache_dir=str(tmp_path / "cache"))
    by_runner = {rec.split("-")[1]: rec for rec in ds.recorders}
    assert sorted(by_runner) == ["1", "2"] and len(ds.recorders) == 2
    keys = {n: set(ds.cache.recorders[by_runner[i]].commits) for n, i in (("node_a", "1"), ("node_b", "2"))}
    assert len(shipped_b) >= SHIPPED_BEFORE_KILL
    assert shipped_b <= keys["node_b"] <= committed_b  # every batch it shipped is there; nothing it had not committed
    assert keys["node_a"] == committed_a  # the survivor, closed cleanly, shipped everything it committed
    for name in ds.recorders:  # exactly once: one commit object per key, each read, none left out; no part twice
        rec = ds.cache.recorders[name]
        listed = [n for n in Store(url, options).names(f"{name}/commits") if n.endswith(".json")]  # (a killed
        assert sorted(listed) == sorted(f"{k}.json" for k in rec.commits) and not rec.broken  # shipper's temp aside)
    parts = ds.parts
    assert len({(r["recorder"], r["episode_id"], r["part"]) for r in parts.to_pylist()}) == parts.num_rows
    assert max(parts.column("part").to_pylist()) > 0  # episodes were cut into parts across batches...
    episodes = ds.episodes
    assert episodes.num_rows < parts.num_rows  # ...and stitched
    steps = sum(parts.column("length").to_pylist())
    assert steps == sum(episodes.column("length").to_pylist())

    table = read_traces(url, storage_options=options)
    assert table.count() == steps  # the commits' step counts (Ray counts from the read tasks' metadata)...
    rows = table.select_columns(["recording", "episode_id", "step"]).take_all()  # ...and the rows read: each read
    assert len({(r["recording"], r["episode_id"], r["step"]) for r in rows}) == len(rows) == steps  # task fetched
    assert {r["recording"] for r in rows} == set(ds.recorders)  # its batch from the store, on the node that ran it
