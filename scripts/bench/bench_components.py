"""Each worker against the tool it replaces, on the same work.

* Encoder: envrec's encoder worker (frames through the ring, ffmpeg fed from
  shared memory, the clip remuxed at its end) against the plain ffmpeg
  command line encoding the same raw frames from a file with the same
  settings. Target: >= 0.95x the command line's throughput.
* Serializer: frames of 210x160x3 recorded with ``RecordTrace`` as fast as the
  env side can hand them over, against the sequential write bandwidth of the
  same folder with the serializer's fsync cadence (5 MB files, 1 MiB writes,
  each file and its folder fsynced). Target: >= 0.8x.

Each pair runs interleaved ``--rounds`` times; medians and ratios are printed.
Usage: ``python scripts/bench/bench_components.py [--rounds 5] [--frames 300] [--folder DIR]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import gymnasium as gym
import numpy as np

import envrec
from envrec.bench.variants import FrameEnv
from envrec.contract.records import Status
from envrec.formats.ffmpeg import VideoSettings, encode_command, find_ffmpeg


def cartpole_frames(n: int) -> list[np.ndarray]:
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env.reset(seed=0)
    env.action_space.seed(0)
    frames = []
    for _ in range(n):
        frames.append(env.render())
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    env.close()
    return frames


def encode_cli(frames: list[np.ndarray], folder: str, fps: int) -> float:
    """Seconds the ffmpeg command line takes to encode the frames from a raw file."""
    raw = os.path.join(folder, "frames.raw")
    with open(raw, "wb") as f:
        f.writelines(fr.tobytes() for fr in frames)
    h, w, c = frames[0].shape
    exe, _ = find_ffmpeg()
    cmd = encode_command(exe, w, h, c, fps, os.path.join(folder, "cli.mp4"), VideoSettings())
    cmd[cmd.index("pipe:0")] = raw
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def encode_envrec(frames: list[np.ndarray], folder: str, fps: int) -> float:
    """Seconds from the first frame handed to envrec to its clip being finished by the worker."""
    rec = envrec.VideoRecorder(folder, fps=fps)
    deadline = time.monotonic() + 30
    while not rec._stream.ring.status(Status.READY) and time.monotonic() < deadline:
        time.sleep(0.01)  # the worker's start-up is not encoding work
    t0 = time.perf_counter()
    rec.start_clip("envrec")
    for i, fr in enumerate(frames):
        rec.add_frame(fr, i)
    rec.end_clip()
    while rec._stream.status(Status.CLIPS) < 1 and time.monotonic() < deadline + 60:
        time.sleep(0.002)
    elapsed = time.perf_counter() - t0
    rec.close()
    return elapsed


def write_bandwidth(folder: str, nbytes: int, file_bytes: int = 5_000_000) -> float:
    """Seconds to write ``nbytes`` sequentially with the serializer's fsync cadence: one file per
    ``file_bytes`` (its batch size), written in 1 MiB writes, fsynced, its folder fsynced."""
    chunk = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    paths = []
    t0 = time.perf_counter()
    left = nbytes
    while left > 0:
        path = os.path.join(folder, f"seq{len(paths)}.bin")
        paths.append(path)
        with open(path, "wb", buffering=0) as f:
            in_file = min(file_bytes, left)
            while in_file > 0:
                in_file -= f.write(chunk[: min(len(chunk), in_file)])
            os.fsync(f.fileno())
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
        left -= file_bytes
    elapsed = time.perf_counter() - t0
    for path in paths:
        os.unlink(path)
    return elapsed


def serialize_envrec(folder: str, steps: int) -> tuple[float, int]:
    """Seconds from the first step to a closed recording (everything durable), and bytes written."""
    env = envrec.RecordTrace(FrameEnv(210, 160, length=1000), folder)
    deadline = time.monotonic() + 30
    while not env.recorder._stream.ring.status(Status.READY) and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.perf_counter()
    env.reset(seed=0)
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(0)
        if term or trunc:
            env.reset()
    env.close()
    elapsed = time.perf_counter() - t0
    return elapsed, env.stats()["bytes_committed"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--frames", type=int, default=300, help="CartPole frames (600x400) per encoding run")
    p.add_argument("--steps", type=int, default=20000, help="210x160x3 steps per serializer run (~2 GB)")
    p.add_argument("--folder", default=None, help="where to write (default: a temporary folder; the disk under test)")
    p.add_argument("--only", choices=("encoder", "serializer"), default=None, help="run one comparison")
    args = p.parse_args()
    frames = cartpole_frames(args.frames) if args.only != "serializer" else []
    fps = 50
    cli, ours, seq, ser = [], [], [], []
    base = args.folder or tempfile.gettempdir()
    for r in range(args.rounds):
        work = tempfile.mkdtemp(prefix="envrec-components-", dir=base)
        try:  # alternate which of each pair goes first, so neither always inherits the other's writeback
            pair_a = [lambda w=work: cli.append(encode_cli(frames, w, fps)), lambda w=work: ours.append(encode_envrec(frames, w, fps))]
            for run in (pair_a if r % 2 == 0 else reversed(pair_a)) if args.only != "serializer" else ():
                run()
            nbytes = args.steps * 210 * 160 * 3

            def run_serializer(work: str = work) -> None:
                secs, written = serialize_envrec(os.path.join(work, "trace"), args.steps)
                ser.append(written / secs)

            pair_b = [run_serializer, lambda w=work, n=nbytes: seq.append(n / write_bandwidth(w, n))]
            for run in (pair_b if r % 2 == 0 else reversed(pair_b)) if args.only != "encoder" else ():
                run()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"  round {r + 1}/{args.rounds}", end="\r", flush=True)
    if cli:
        n = len(frames)
        c, o = statistics.median(cli), statistics.median(ours)
        print(f"encoder, {n} frames of 600x400 (CartPole-v1), default VideoSettings, medians of {args.rounds}:")
        print(f"  ffmpeg command line   {n / c:7.1f} frames/s")
        print(f"  envrec encoder worker {n / o:7.1f} frames/s   ratio {c / o:.2f}x (target >= 0.95x)")
    if ser:
        s, q = statistics.median(ser), statistics.median(seq)
        print(f"serializer, {args.steps} steps of 210x160x3 ({args.steps * 210 * 160 * 3 / 2**30:.1f} GiB of observations):")
        print(f"  sequential writes, fsync per 5 MB file {q / 2**20:7.0f} MiB/s   (runs: {', '.join(f'{x / 2**20:.0f}' for x in seq)})")
        print(f"  envrec serializer                      {s / 2**20:7.0f} MiB/s   ratio {s / q:.2f}x (target >= 0.8x)"
              f"   (runs: {', '.join(f'{x / 2**20:.0f}' for x in ser)})")


if __name__ == "__main__":
    main()
