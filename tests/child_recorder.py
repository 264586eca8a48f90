"""An env process for tests that kill it: records, prints its worker's pid, then dies as told.

Usage: python child_recorder.py FOLDER STEPS MODE
MODE "kill-self": SIGKILL itself right after the last step (records still in the ring).
MODE "wait": print "ready" after the last step and sleep until killed.
MODE "interrupt": raise KeyboardInterrupt after the last step inside a with-block.
"""

import sys

import numpy as np
from gymnasium import spaces
from support.processes import end_as_told

import envrec


def main() -> None:
    folder, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rec = envrec.TraceRecorder(folder, spaces.Box(0, 255, (16, 16, 3), np.uint8), spaces.Discrete(2), batch_bytes=20_000)
    print(rec.worker_pid, flush=True)
    obs = np.zeros((16, 16, 3), np.uint8)
    try:
        with rec:
            for t in range(steps):
                if t % 50 == 0:
                    rec.add_reset(obs + (t // 50) % 256, {})
                obs[0, 0, 0] = t % 256
                rec.add_step(t % 2, obs, 1.0, (t % 50) == 49, False, {})
            end_as_told(mode)
    except KeyboardInterrupt:
        print("interrupted", flush=True)


if __name__ == "__main__":
    main()
