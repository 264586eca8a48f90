"""What ``envrec.log.to_tensorboard`` costs per clip: the wall time of one callback (ffmpeg making the GIF,
the summary written and flushed), ffmpeg's CPU time (what a busy machine's wall time hides), and the GIF's size, for CartPole-v1 clips of several lengths.

Each length is a clip recorded once with ``RecordVideo`` (actions that keep the pole up long enough,
``max_episode_steps`` set to the length); then ``--rounds`` calls of the callback on it, the median and
the spread reported, with the GIF's frames and bytes. ``to_wandb`` is not timed here: it copies the MP4
(W&B's own ``run.log``), which no envrec code makes slower or faster.

``--loop-steps N`` also steps CartPole N steps filming every episode, with no logger, with ``to_tensorboard``
in the background (its default) and in the loop (``background=False``): the loop's steps/s, and how long
``close()`` then waits for the GIFs still queued.

Usage: ``python scripts/bench/bench_log.py [--rounds 7] [--lengths 50 300 1000] [--max-frames 300] [--loop-steps 2000]``;
a quick check that it runs: ``--rounds 1 --lengths 20 --loop-steps 50``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import tempfile
import time

import gymnasium as gym

import envrec


def record_clip(folder: str, length: int) -> tuple[str, dict]:
    """One CartPole clip of ``length`` steps (plus the reset frame); its path and metadata."""
    found: list[tuple[str, dict]] = []
    env = gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=length)
    env = envrec.RecordVideo(env, folder, episode_trigger=lambda e: e == 0,
                             on_clip_closed=lambda path, meta: found.append((path, meta)))
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        action = int(obs[2] + 0.5 * obs[3] > 0)  # lean with the pole: it stays up for hundreds of steps
        obs, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    env.close()
    return found[0]


def measure(folder: str, path: str, meta: dict, rounds: int, max_frames: int) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    times, cpu = [], []
    for r in range(rounds):
        logdir = os.path.join(folder, f"runs-{meta['frames_written']}-{r}")
        writer = SummaryWriter(logdir)
        callback = envrec.log.to_tensorboard(writer, max_frames=max_frames, background=False)  # the call is the work
        start, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        callback(path, meta)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime)
        writer.close()
        assert callback.logged == 1, callback
    submits = []
    for r in range(rounds):  # the same clip handed to the background thread: what the loop waits for then
        writer = SummaryWriter(os.path.join(folder, f"bg-{meta['frames_written']}-{r}"))
        callback = envrec.log.to_tensorboard(writer, max_frames=max_frames)
        start = time.perf_counter()
        callback(path, meta)
        submits.append(time.perf_counter() - start)
        callback.close()
        writer.close()
    events = EventAccumulator(logdir, size_guidance={IMAGES: 0})
    events.Reload()
    (image,) = events.Images("envrec/clip")
    return {"clip_frames": meta["frames_written"], "median_s": round(statistics.median(times), 3),
            "min_s": round(min(times), 3), "max_s": round(max(times), 3),
            "ffmpeg_cpu_median_s": round(statistics.median(cpu), 3),
            "background_call_median_ms": round(statistics.median(submits) * 1e3, 3),
            "gif_frames": _frames(image.encoded_image_string), "gif_bytes": len(image.encoded_image_string),
            "mp4_bytes": os.path.getsize(path)}


def _frames(gif: bytes) -> int | None:
    try:
        from PIL import Image
    except ImportError:
        return None  # Pillow is not installed: no frame count
    return Image.open(io.BytesIO(gif)).n_frames


def loop(folder: str, steps: int) -> list[dict]:
    """CartPole filming every episode for ``steps`` steps: steps/s with no logger, and with to_tensorboard in the
    background (the default) and in the loop (``background=False``); the background's drain timed apart."""
    from torch.utils.tensorboard import SummaryWriter

    rows = []
    for variant in ("none", "background", "in-loop"):
        writer = SummaryWriter(os.path.join(folder, f"loop-{variant}"))
        callback = None if variant == "none" else envrec.log.to_tensorboard(writer, background=variant == "background")
        env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), os.path.join(folder, f"v-{variant}"),
                                 episode_trigger=lambda e: True, on_clip_closed=callback)
        env.action_space.seed(0)
        env.reset(seed=0)
        start = time.perf_counter()
        for _ in range(steps):
            if any(env.step(env.action_space.sample())[2:4]):
                env.reset()
        looped = time.perf_counter() - start
        env.close()
        drain = time.perf_counter()
        if callback is not None:
            callback.close()
        drained = time.perf_counter() - drain
        writer.close()
        rows.append({"variant": variant, "steps_per_s": round(steps / looped), "clips_logged": callback.logged if callback else 0,
                     "drain_after_close_s": round(drained, 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--lengths", type=int, nargs="+", default=[50, 300, 1000])
    parser.add_argument("--max-frames", type=int, default=300)
    parser.add_argument("--loop-steps", type=int, default=0, help="also time CartPole's loop filming every episode")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for row in loop(folder, args.loop_steps) if args.loop_steps else []:
            print(json.dumps(row))
        for length in args.lengths:
            path, meta = record_clip(os.path.join(folder, f"clips-{length}"), length)
            print(json.dumps(measure(folder, path, meta, args.rounds, args.max_frames)))


if __name__ == "__main__":
    main()
