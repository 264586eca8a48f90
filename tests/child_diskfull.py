"""Recording into a folder that fills up; run inside its own mount namespace on a tiny tmpfs.

Usage: python child_diskfull.py FOLDER KIND   (KIND: "trace" or "video")
Prints one JSON line with what the recorder reported and what the folder holds.
"""

import json
import logging
import os
import sys
import time

import numpy as np
from gymnasium import spaces
from support.episodes import feed

import envrec


def trace(folder: str) -> dict:
    rec = envrec.TraceRecorder(folder, spaces.Box(0, 255, (32, 32, 3), np.uint8), spaces.Discrete(2),
                               batch_bytes=40_000)  # whole episodes (34 KB each) in every batch
    obs = np.zeros((32, 32, 3), np.uint8)
    raised = None
    try:
        feed(rec, 200, shape=obs.shape)  # ~3 KB a step: far more than the folder holds
        deadline = time.monotonic() + 20
        while rec.broken is None and time.monotonic() < deadline:  # the env goes on until the stream breaks
            rec.add_reset(obs)
            time.sleep(0.05)
    except Exception as exc:  # noqa: BLE001  (the env must never see one: any is recorded)
        raised = repr(exc)
    with open(rec.manifest_path) as f:
        named = {n for b in json.load(f)["batches"] for n in (b["fn"], b["bin"])}
    # Before close: the broken stream's partial files are gone already (the disk gets its room back).
    left_while_broken = sorted(n for n in os.listdir(folder) if n not in named and n != os.path.basename(rec.manifest_path))
    rec.close()
    out = {"raised": raised, "stats": rec.stats(), "left_while_broken": left_while_broken}
    reader = envrec.TraceReader(folder)
    out["episodes_readable"] = len(reader)
    out["lengths_ok"] = all(e.length == 10 and e.observations.shape == (11, 32, 32, 3) for e in reader)
    out["problems"] = [p for m in reader.manifests for b in m["batches"] for p in reader.check_batch(b)]
    out["manifest_error"] = reader.manifests[0]["error"]
    out["tmp_files"] = [n for n in os.listdir(folder) if n.endswith(".tmp")]
    return out


def video(folder: str) -> dict:
    rec = envrec.VideoRecorder(folder, fps=25)
    rng = np.random.default_rng(0)
    raised = None
    try:
        for clip in range(2):
            rec.start_clip(f"clip{clip}")
            for i in range(60):  # noise compresses badly: the folder fills in the first clip
                rec.add_frame(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), i)
            rec.end_clip()
    except Exception as exc:  # noqa: BLE001  (any is recorded for the parent to assert on)
        raised = repr(exc)
    rec.close()
    metas = {}
    for n in sorted(os.listdir(folder)):
        if n.endswith(".meta.json"):
            with open(os.path.join(folder, n)) as f:
                metas[n] = json.load(f)
    return {"raised": raised, "stats": rec.stats(), "metas": metas, "tmp_files": [n for n in os.listdir(folder) if n.endswith(".tmp")]}


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    folder, kind = sys.argv[1], sys.argv[2]
    result = trace(folder) if kind == "trace" else video(folder)
    print(json.dumps(result, default=str))
