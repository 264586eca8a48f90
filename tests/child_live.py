"""An env process for the viewer's live tests: one episode that never ends, stepped at a steady pace and committed
in small parts (every 0.2 s), until it is killed.

Usage: python child_live.py FOLDER STEPS_PER_S. Prints its worker's pid, then ``ready`` after its first 50 steps.
"""

import sys
import time

import numpy as np
from gymnasium import spaces

import envrec


def main() -> None:
    folder, rate = sys.argv[1], float(sys.argv[2])
    rec = envrec.TraceRecorder(folder, spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2), name_prefix="live",
                               commit_interval=0.2)
    print(rec.worker_pid, flush=True)
    obs = np.zeros(4, np.float32)
    rec.add_reset(obs, seed=3)
    start, t = time.monotonic(), 0
    while True:
        obs[0] = np.sin(t / 50.0)
        rec.add_step(t % 2, obs, 1.0, False, False, {})
        t += 1
        if t == 50:
            print("ready", flush=True)
        ahead = start + t / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


if __name__ == "__main__":
    main()
