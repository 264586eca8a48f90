"""The delta filter against plain zstd, and against video codecs for reference, on game frames: bytes and speed.

Per source of frames — synthetic game frames (``envrec.bench.variants.game_frame``, what
``FrameEnv(frames="game")`` shows: flat colours, which zstd alone already makes ~500x smaller),
textured synthetic frames (a static background of coloured tiles and a moving block: what
consecutive frames share, zstd alone finds only in part) and real ALE frames from a random policy (``ALE/Pong-v5``,
``Breakout``, ``MsPacman``, ``Enduro``, ``Riverraid``, default frameskip) — the frames are cut into
envrec's chunks (default ``chunk_bytes``: 41 rows of 210x160x3) and stored four ways:

* ``zstd-3``: zstd level 3 alone (``Compression(delta=False)``);
* ``xor+zstd-3``: the delta filter then zstd level 3 (``Compression()``, its filter forced on);
  both through the serializer's own ``ChunkPacker`` and the reader's own ``decompress_into``; the
  ``envrec picks`` column is what the packer chooses by itself at the first chunk;
* ``ffv1``: FFV1, lossless video (ffmpeg of imageio-ffmpeg, ``-level 3``, one file of all frames);
* ``av1-crf30``: libsvtav1 at crf 30 in yuv420p with ``-g 2`` (LeRobot's default image codec: lossy,
  4:2:0), for reference only.

Printed per source: bytes per frame, compression MB/s of raw frames, decode frames/s, and the
ratios to ``zstd-3``; medians of ``--rounds`` interleaved rounds. Sizes are exact; speeds are
indicative on a loaded machine (ffmpeg uses several threads, the envrec paths one).

Targets (issue 24): xor+zstd-3 >= 5x smaller than zstd-3 on synthetic game frames; >= 2x in
geometric mean over Breakout, MsPacman, Enduro and Riverraid; never larger than zstd-3 on any game;
compression throughput >= zstd-3's. The env-side cost is unchanged by construction (compression runs
in the serializer worker): ``scripts/bench/bench_compression.py`` measures it.

Usage: ``python scripts/bench/bench_delta.py [--frames 400] [--rounds 3] [--no-video]``
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from envrec.bench.variants import game_frame
from envrec.formats.compression import Compression, decompress_into
from envrec.workers.field_sinks import ChunkPacker
from envrec.workers.spill import Spill

GAMES = ("Pong", "Breakout", "MsPacman", "Enduro", "Riverraid")
TARGET_GAMES = ("Breakout", "MsPacman", "Enduro", "Riverraid")
WAYS = ("zstd-3", "xor+zstd-3", "ffv1", "av1-crf30")


def synthetic_frames(n: int) -> np.ndarray:
    """``n`` frames of episodes of 100 steps, as FrameEnv(frames="game") shows them."""
    return np.stack([game_frame(t // 100, t % 100) for t in range(n)])


def textured_frames(n: int, seed: int = 0) -> np.ndarray:
    """``n`` frames of a static textured background (8x8 tiles of 16 colours, drawn anew every 100 frames, as a
    new level) with a block moving across it: frames that share everything but the block, which zstd alone
    finds only in part."""
    rng = np.random.default_rng(seed)
    frames = np.empty((n, 210, 160, 3), np.uint8)
    for t in range(n):
        if t % 100 == 0:
            tiles = rng.integers(0, 16, (27, 20))
            background = rng.integers(0, 256, (16, 3), dtype=np.uint8)[np.repeat(np.repeat(tiles, 8, 0), 8, 1)[:210, :160]]
        frames[t] = background
        y, x = (t * 3) % 200, (t * 5) % 152
        frames[t, y : y + 10, x : x + 8] = (255, 255, 0)
    return frames


def ale_frames(game: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations of ``ALE/<game>-v5`` under a random policy (reset when an episode ends)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5")
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    while len(out) < n:
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        out.append(obs)
        if term or trunc:
            obs, _ = env.reset()
            out.append(obs)
    env.close()
    return np.stack(out[:n])


def envrec_way(frames: np.ndarray, folder: str, xor: bool) -> tuple[int, float, float, str]:
    """(stored bytes, compression s, decode s, what the packer chooses by itself) through envrec's own code."""
    n, row_bytes = len(frames), frames[0].nbytes
    rows = frames.reshape(n, row_bytes)
    c = Compression()
    packer = ChunkPacker(c, row_bytes, Spill(os.path.join(folder, "index")), delta=True)
    packer.choose("xor" if xor else "")
    stored = []
    t0 = time.perf_counter()
    done = 0
    while done < n:
        done += packer.add_rows(rows[done:])
        if packer.rows == packer.rows_per_chunk or done == n:
            stored.append(packer.take())
    t1 = time.perf_counter()
    chunks = packer.chunk_list()
    packer.index.close()
    data = memoryview(b"".join(stored))
    out = np.empty(rows.shape, np.uint8)
    t2 = time.perf_counter()
    decompress_into(out.data.cast("B"), data, "zstd", chunks, row_bytes, "xor" if xor else None)
    t3 = time.perf_counter()
    assert out.tobytes() == rows.tobytes(), "the round trip is not bit-exact"
    chooser = ChunkPacker(c, row_bytes, Spill(os.path.join(folder, "index2")), delta=True)
    chooser.add_rows(rows[: chooser.rows_per_chunk])
    chooser.take()
    chooser.index.close()
    return len(data), t1 - t0, t3 - t2, chooser.filter or "none"


def video_way(frames: np.ndarray, folder: str, way: str) -> tuple[int, float, float, str]:
    """(file bytes, encode s, decode s, "") of all frames as one video, ffmpeg reading raw RGB from a pipe."""
    import imageio_ffmpeg

    exe = imageio_ffmpeg.get_ffmpeg_exe()
    h, w = frames.shape[1:3]
    path = os.path.join(folder, f"v-{way}.mkv")
    codec = (["-c:v", "ffv1", "-level", "3", "-pix_fmt", "rgb24"] if way == "ffv1" else
             ["-c:v", "libsvtav1", "-crf", "30", "-g", "2", "-pix_fmt", "yuv420p"])
    enc = [exe, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", "30",
           "-i", "-", *codec, path]
    t0 = time.perf_counter()
    subprocess.run(enc, input=frames.tobytes(), check=True, stderr=subprocess.DEVNULL)  # SVT-AV1 logs its settings
    t1 = time.perf_counter()
    dec = [exe, "-loglevel", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    got = subprocess.run(dec, capture_output=True, check=True).stdout
    t2 = time.perf_counter()
    if way == "ffv1":
        assert got == frames.tobytes(), "FFV1 is not lossless here"
    return os.path.getsize(path), t1 - t0, t2 - t1, ""


def measure(frames: np.ndarray, way: str, folder: str) -> tuple[int, float, float, str]:
    if way in ("zstd-3", "xor+zstd-3"):
        return envrec_way(frames, folder, xor=way == "xor+zstd-3")
    return video_way(frames, folder, way)


def report(name: str, n: int, raw: int, results: dict) -> dict:
    """Print one source's table; its medians {way: (bytes/frame, MB/s, frames/s)}."""
    med = {}
    for way, runs in results.items():
        size = runs[0][0]
        med[way] = (size / n, raw / 1e6 / statistics.median(r[1] for r in runs), n / statistics.median(r[2] for r in runs))
    base = med["zstd-3"]
    pick = results["zstd-3"][0][3]
    print(f"\n{name}: {n} frames of {raw // n} bytes, envrec picks: {pick}")
    print(f"  {'way':>11} {'bytes/frame':>12} {'vs zstd-3':>10} {'compress MB/s':>14} {'vs zstd-3':>10} {'decode fps':>11} {'vs zstd-3':>10}")
    for way, (bpf, mbs, fps) in med.items():
        print(f"  {way:>11} {bpf:12.0f} {base[0] / bpf:9.2f}x {mbs:14.0f} {mbs / base[1]:9.2f}x {fps:11.0f} {fps / base[2]:9.2f}x")
    return med


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=400, help="frames per source (default 400)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--no-video", action="store_true", help="leave out FFV1 and AV1")
    p.add_argument("--games", default=",".join(GAMES), help=f"ALE games (default {','.join(GAMES)})")
    args = p.parse_args()
    ways = WAYS[:2] if args.no_video else WAYS
    sources = {"synthetic game frames": synthetic_frames(args.frames), "textured synthetic frames": textured_frames(args.frames)}
    for game in filter(None, args.games.split(",")):
        sources[game] = ale_frames(game, args.frames)
    results: dict[str, dict[str, list]] = {s: {w: [] for w in ways} for s in sources}
    with tempfile.TemporaryDirectory(prefix="bench-delta-") as folder:
        for r in range(args.rounds):
            for name, frames in sources.items():
                for way in ways:
                    results[name][way].append(measure(frames, way, folder))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"medians of {args.rounds} interleaved rounds; envrec's chunks: {Compression().chunk_rows(210 * 160 * 3)} frames")
    meds = {name: report(name, len(frames), frames.nbytes, results[name]) for name, frames in sources.items()}
    gain = {name: m["zstd-3"][0] / m["xor+zstd-3"][0] for name, m in meds.items()}
    speed = {name: m["xor+zstd-3"][1] / m["zstd-3"][1] for name, m in meds.items()}
    games = [g for g in TARGET_GAMES if g in gain]
    print("\ntargets (xor+zstd-3 against zstd-3):")
    for name in ("synthetic game frames", "textured synthetic frames"):
        print(f"  {name} >= 5x smaller: {gain[name]:.2f}x")
    if games:
        geo = math.exp(sum(math.log(gain[g]) for g in games) / len(games))
        print(f"  geometric mean over {', '.join(games)} >= 2x: {geo:.2f}x")
    print(f"  never larger on any game: smallest gain {min(gain[g] for g in gain):.2f}x ({min(gain, key=gain.get)})")
    print(f"  compression throughput >= zstd-3's: lowest {min(speed.values()):.2f}x ({min(speed, key=speed.get)})")


if __name__ == "__main__":
    main()
