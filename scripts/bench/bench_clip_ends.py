"""How fast does the encoder get through short clips? Its real worker loop in this process, fed by a thread.

A producer thread writes ``--clips`` clips of ``--frames`` noise frames each (600x400 by default, as
CartPole's) into a 128 MiB ring as fast as it can; the encoder's worker loop (``envrec.workers.loop``)
encodes them with envrec's default settings (faststart remux included). Prints the seconds per clip
and the frames per second the encoder kept up, the median of ``--rounds`` rounds. With short clips
(CartPole's episodes are ~20 steps) each clip's end (ffmpeg finishing, the remux, the metadata) is a
large part of the encoder's time; a full ring makes the env wait for it.

With two interpreters (the installs before and after a change), runs each in turn, ``--pairs``
times, and prints both and after/before.
Usage: ``python scripts/bench/bench_clip_ends.py [BEFORE/bin/python AFTER/bin/python] [--clips 30]
[--frames 20] [--size 400x600] [--rounds 3] [--pairs 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def one_round(clips: int, frames: int, shape: tuple[int, int, int]) -> float:
    """Seconds the encoder took for every clip, from the first record to the last clip's metadata."""
    import numpy as np

    from envrec.contract.protocol import EncoderConfig, Kind
    from envrec.contract.ring import RingWriter
    from envrec.contract.ring_reader import RingReader
    from envrec.formats.ffmpeg import VideoSettings, find_ffmpeg
    from envrec.record.packer import frame_packer
    from envrec.workers import loop
    from envrec.workers.encoder import Encoder

    class Conn:
        def send(self, msg) -> None:
            self.last = msg

    folder = tempfile.mkdtemp()
    ring = RingWriter(128 << 20)
    reader = RingReader(ring.spec)
    ffmpeg, backend = find_ffmpeg()
    encoder = Encoder(EncoderConfig(folder, ffmpeg, backend, settings=VideoSettings()), status=reader.set_status)
    frame = np.random.default_rng(0).integers(0, 255, shape, np.uint8)
    packer = frame_packer(shape)

    def produce() -> None:
        for c in range(clips):
            ring.write(Kind.CLIP_START, c, 0, (json.dumps({"name": f"clip{c}", "fps": 30, "episode_id": c}).encode(),))
            for i in range(frames):
                packer.write_single(ring, c, i, frame, shape)
            ring.write(Kind.CLIP_END, c, 0, (b"{}",))
        ring.write(Kind.CLOSE, 0, 0, (b"{}",))

    producer = threading.Thread(target=produce)
    start = time.perf_counter()
    producer.start()
    loop.handle_records(reader, encoder, Conn(), os.getppid())
    took = time.perf_counter() - start
    producer.join()
    reader.close()
    ring.close()
    assert encoder.summary()["clips"] == clips, encoder.summary()
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("interpreters", nargs="*", help="BEFORE and AFTER interpreters to compare (none: this one)")
    p.add_argument("--clips", type=int, default=30)
    p.add_argument("--frames", type=int, default=20)
    p.add_argument("--size", default="400x600", help="HxW of the frames")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pairs", type=int, default=3)
    a = p.parse_args()
    h, w = (int(x) for x in a.size.split("x"))
    if not a.interpreters:
        took = statistics.median(one_round(a.clips, a.frames, (h, w, 3)) for _ in range(a.rounds))
        print(json.dumps({"s_per_clip": took / a.clips, "frames_per_s": a.clips * a.frames / took}))
        return
    if len(a.interpreters) != 2:
        raise SystemExit("give two interpreters (before, after) or none")
    args = ["--clips", str(a.clips), "--frames", str(a.frames), "--size", a.size, "--rounds", str(a.rounds)]
    results: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(a.pairs):
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            py = a.interpreters[0 if side == "before" else 1]
            out = subprocess.run([py, __file__, *args], capture_output=True, text=True, check=True)
            results[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {s: statistics.median(r["s_per_clip"] for r in rs) for s, rs in results.items()}
    fps = {s: statistics.median(r["frames_per_s"] for r in rs) for s, rs in results.items()}
    print(f"clips of {a.frames} frames of {a.size}: ms per clip before {med['before'] * 1e3:.1f}, after "
          f"{med['after'] * 1e3:.1f}; frames/s before {fps['before']:.0f}, after {fps['after']:.0f}; "
          f"after/before frames/s {fps['after'] / fps['before']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
