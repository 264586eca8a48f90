"""An env process logging CartPole's clips to TensorBoard (torch's SummaryWriter) and W&B (offline).

Usage: python child_log.py FOLDER [--no-moviepy]

``--no-moviepy`` makes moviepy unimportable first (``sys.modules["moviepy"] = None``), as on a machine
without it. After the loop it logs a clip at a step below the run's (W&B would drop it) and one to the
finished run: both must be warnings, not exceptions. Prints one JSON line: the callbacks' counts, the
warnings ``envrec.log`` logged, whether moviepy imports, the clips' metadata.
"""

import sys

if "--no-moviepy" in sys.argv:
    sys.modules["moviepy"] = None  # type: ignore[assignment]  # `import moviepy` now raises ImportError

import json
import logging
import os

import gymnasium as gym

import envrec

EPISODES = 3


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def moviepy_imports() -> bool:
    try:
        import moviepy  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    folder = sys.argv[1]
    os.environ.update(WANDB_MODE="offline", WANDB_DIR=folder, WANDB_SILENT="true")
    warnings = Collect()
    logging.getLogger("envrec.log").addHandler(warnings)
    import wandb
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(os.path.join(folder, "runs"))
    run = wandb.init(project="envrec-test", dir=folder)
    tb, wb = envrec.log.to_tensorboard(writer), envrec.log.to_wandb(run)
    metas = []

    def on_clip_closed(path, meta):
        metas.append(meta)
        tb(path, meta)
        wb(path, meta)

    env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), os.path.join(folder, "videos"),
                             episode_trigger=lambda e: True, on_clip_closed=on_clip_closed)
    env.action_space.seed(0)
    env.reset(seed=0)
    for episode in range(EPISODES):
        while not any(env.step(env.action_space.sample())[2:4]):
            pass
        if episode < EPISODES - 1:
            env.reset()
    env.close()
    assert tb.close(timeout_s=60), "GIFs still pending after 60 s"
    writer.close()
    first = os.path.join(folder, "videos", metas[0]["path"])
    late = envrec.log.to_wandb(run, step=lambda meta: 0)
    late(first, metas[0])  # step 0, below the run's: a warning
    run.finish()
    wb(first, metas[0])  # a finished run: a warning
    wandb.teardown()  # W&B's service process ends here
    counts = {name: {"logged": c.logged, "skipped": c.skipped, "failed": c.failed} for name, c in
              (("tb", tb), ("wb", wb), ("late", late))}
    print(json.dumps({"counts": counts, "warnings": warnings.messages, "moviepy": moviepy_imports(), "metas": metas}))


if __name__ == "__main__":
    main()
