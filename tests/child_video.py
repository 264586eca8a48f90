"""An env process for video tests that kill it: starts a clip, adds frames, then dies as told.

Usage: python child_video.py FOLDER FRAMES MODE   (MODE: "kill-self" or "wait")
"""

import sys

import numpy as np
from support.processes import end_as_told

import envrec


def main() -> None:
    folder, frames, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rec = envrec.VideoRecorder(folder, fps=25)
    print(rec.stats()["worker_pid"], flush=True)
    rec.start_clip("clip")
    for i in range(frames):
        f = np.zeros((48, 64, 3), np.uint8)
        f[..., 1] = 200
        rec.add_frame(f, i)
    end_as_told(mode)


if __name__ == "__main__":
    main()
