"""An env process for tests that kill it mid-part: one episode that never ends, cut into parts by size.

Usage: python child_endless.py FOLDER STEPS MODE (MODE: as ``support.processes.end_as_told``). Prints its
worker's pid first; step ``t``'s frame holds ``t % 256`` and ``t // 256 % 256`` in its first two values.
"""

import sys

import numpy as np
from gymnasium import spaces
from support.processes import end_as_told

import envrec


def main() -> None:
    folder, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    shape = (16, 16, 3)
    rec = envrec.TraceRecorder(folder, spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(2), name_prefix="kid",
                               batch_bytes=8 * 16 * 16 * 3, commit_interval=None)
    print(rec.worker_pid, flush=True)
    obs = np.zeros(shape, np.uint8)
    rec.add_reset(obs, seed=7)
    for t in range(steps):
        obs.flat[0], obs.flat[1] = t % 256, (t // 256) % 256
        rec.add_step(t % 2, obs, 1.0, False, False, {"t": t} if t % 3 == 0 else {})
    end_as_told(mode)


if __name__ == "__main__":
    main()
