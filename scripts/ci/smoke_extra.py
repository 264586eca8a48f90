"""Smoke test of one extra, in a virtual environment where only ``pip install '.[EXTRA]'`` was run.

``python scripts/ci/smoke_extra.py EXTRA`` does, with nothing but envrec and that
extra installed, what the extra is for, and exits non-zero (with the
traceback) when something it imports is missing or fails:

* ``arrow``: a small recording to an Arrow table and a Parquet dataset
  (``envrec export --parquet``), read back with pyarrow;
* ``minari``: ``envrec export --minari``, read back with ``minari.load_dataset``;
* ``ray``: ``envrec.ray.read_traces`` on a local Ray (one CPU);
* ``lz4``: a recording compressed with lz4, read back;
* ``atari``: ``envrec record --env ALE/Pong-v5`` (ale-py ships its ROMs), trace and clip;
* ``plot``: ``envrec bench --plot`` draws its PNG;
* ``sb3``: a tiny PPO (torch comes with Stable-Baselines3) learning on a
  ``VecRecordTrace`` of two CartPoles inside a ``VecRecordVideo``: every step
  recorded (``model.num_timesteps``), the clip under SB3's file name.

``.ci/run`` runs it for every extra in setup.cfg; the base install runs
``scripts/ci/readme_examples.py`` instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable

import gymnasium as gym

import envrec
from envrec.cli import main as envrec_main


def _record(folder: str, episodes: int = 3, **options) -> int:
    """CartPole, random actions, seeded; the number of steps recorded."""
    env = envrec.RecordTrace(gym.make("CartPole-v1"), folder, **options)
    env.action_space.seed(0)
    steps = 0
    for e in range(episodes):
        env.reset(seed=e)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done, steps = terminated or truncated, steps + 1
    env.close()
    return steps


def _cli(*argv: str) -> None:
    code = envrec_main(list(argv))
    if code != 0:
        raise SystemExit(f"envrec {' '.join(argv)} exited {code}")


def smoke_arrow(tmp: str) -> str:
    import pyarrow.dataset as ds

    steps = _record(f"{tmp}/rec")
    table = envrec.to_arrow(f"{tmp}/rec")
    assert table.num_rows == steps, (table.num_rows, steps)
    _cli("export", f"{tmp}/rec", "--parquet", f"{tmp}/pq")
    back = ds.dataset(f"{tmp}/pq", format="parquet", partitioning="hive").to_table()
    assert back.num_rows == steps and back.column("reward").to_pylist() == table.column("reward").to_pylist()
    return f"{steps} steps to Arrow and Parquet and back"


def smoke_minari(tmp: str) -> str:
    os.environ["MINARI_DATASETS_PATH"] = f"{tmp}/minari"
    import minari

    steps = _record(f"{tmp}/rec")
    _cli("export", f"{tmp}/rec", "--minari", "envrec/smoke-v0")
    ds = minari.load_dataset("envrec/smoke-v0")
    assert (ds.total_episodes, ds.total_steps) == (3, steps), (ds.total_episodes, ds.total_steps, steps)
    return f"{steps} steps to a Minari dataset and back"


def smoke_ray(tmp: str) -> str:
    import ray

    from envrec.ray import read_traces

    steps = _record(f"{tmp}/rec", batch_bytes=2_000)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        count = read_traces(f"{tmp}/rec").count()
    finally:
        ray.shutdown()
    assert count == steps, (count, steps)
    return f"{steps} steps read by Ray Data"


def smoke_s3(tmp: str) -> str:
    import s3fs

    steps = _record(f"{tmp}/rec", ship_to=f"file://{tmp}/store", batch_bytes=2_000)
    ds = envrec.open_dataset(f"file://{tmp}/store", cache_dir=f"{tmp}/cache")
    shipped = sum(ds.episodes.column("length").to_pylist())
    assert (ds.episodes.num_rows, shipped) == (3, steps), (ds.episodes.num_rows, shipped, steps)
    assert s3fs.S3FileSystem(anon=True).protocol  # the S3 file system imports and builds (no store here)
    return f"{steps} steps shipped to file:// and read back with open_dataset"


def smoke_lz4(tmp: str) -> str:
    steps = _record(f"{tmp}/rec", compression="lz4")
    reader = envrec.TraceReader(f"{tmp}/rec")
    assert reader.recordings[0].manifest["settings"]["compression"]["codec"] == "lz4"
    episodes = list(reader)
    assert sum(e.length for e in episodes) == steps and all(len(e.observations) == e.length + 1 for e in episodes)
    return f"{steps} steps compressed with lz4 and read back"


def smoke_atari(tmp: str) -> str:
    _cli("record", "--env", "ALE/Pong-v5", "--steps", "30", "--out", f"{tmp}/pong", "-q")
    steps = sum(e.length for e in envrec.TraceReader(f"{tmp}/pong"))
    clips = [n for n in os.listdir(f"{tmp}/pong") if n.endswith(".mp4")]
    assert steps == 30 and len(clips) == 1, (steps, clips)
    return f"ALE/Pong-v5: {steps} steps and a clip"


def smoke_plot(tmp: str) -> str:
    out = f"{tmp}/bench.png"
    _cli("bench", "--frames", "32x32", "--variants", "none,envrec-trace", "--rounds", "1", "--seconds", "0.2", "--plot", out, "-q")
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    return f"envrec bench --plot drew {os.path.getsize(out)} bytes of PNG"


def smoke_sb3(tmp: str) -> str:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from envrec.sb3 import VecRecordTrace, VecRecordVideo

    def make() -> gym.Env:
        return gym.make("CartPole-v1", render_mode="rgb_array")

    venv = VecRecordTrace(DummyVecEnv([make] * 2), f"{tmp}/rec", name_prefix="ppo")
    venv = VecRecordVideo(venv, f"{tmp}/videos", lambda step: step == 0, video_length=10)
    model = PPO("MlpPolicy", venv, n_steps=64, seed=0).learn(128)
    venv.close()
    episodes = [e for i in range(2) for e in envrec.TraceReader(f"{tmp}/rec", prefix=f"ppo.env{i}")]
    steps = sum(e.length for e in episodes)
    assert steps == model.num_timesteps == 128, (steps, model.num_timesteps)
    clip = f"{tmp}/videos/rl-video-step-0-to-step-10.mp4"
    assert os.path.getsize(clip) > 0, os.listdir(f"{tmp}/videos")
    return f"PPO: {steps} steps = num_timesteps in {len(episodes)} episodes, and {os.path.basename(clip)}"


SMOKES: dict[str, Callable[[str], str]] = {
    "arrow": smoke_arrow, "minari": smoke_minari, "ray": smoke_ray, "s3": smoke_s3, "lz4": smoke_lz4, "atari": smoke_atari, "plot": smoke_plot,
    "sb3": smoke_sb3,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("extra", choices=sorted(SMOKES))
    args = p.parse_args()
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    with tempfile.TemporaryDirectory(prefix=f"envrec-smoke-{args.extra}-") as tmp:
        said = SMOKES[args.extra](tmp)
    print(f"smoke [{args.extra}]: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
