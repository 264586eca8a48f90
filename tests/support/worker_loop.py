"""A worker's real loop (``entry.handle_records``) run in the test process, fed through a ring by a producer thread."""

from __future__ import annotations

from envrec.contract.ring_reader import RingReader


class Conn:
    """The worker's end of its pipe to the env process: keeps the last message."""

    def send(self, msg) -> None:
        self.last = msg


def count_runs(reader: RingReader) -> dict:
    """Count the runs the loop takes from ``reader`` (``{"runs": n}``, kept up to date)."""
    taken = {"runs": 0}
    poll_run = reader.poll_run

    def counting_poll_run(*args):
        run = poll_run(*args)
        taken["runs"] += run is not None
        return run

    reader.poll_run = counting_poll_run  # type: ignore[method-assign]
    return taken
