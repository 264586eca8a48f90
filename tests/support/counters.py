"""The counters of a trace recording add up: every record the calls made is committed, lost, dropped,
discarded or poisoned (docs/reference.md, "Stats")."""

from __future__ import annotations


def assert_counters_add_up(stats: dict, made: int, committed: int) -> None:
    """``made``: records the calls made (a reset per episode, a record per step); ``committed``: those the
    recording holds (each committed episode's reset and steps, e.g. ``sum(e.length + 1 for e in reader)``)."""
    assert stats["records_sent"] + stats["records_dropped"] == made, stats
    assert stats["steps_committed"] + stats["episodes_written"] == committed, stats
    accounted = (
        committed + stats["records_lost"] + stats["records_dropped"] + stats["records_discarded"] + stats["records_poisoned"]
    )
    assert accounted == made, (
        f"{made} records made, {committed} committed + {stats['records_lost']} lost + {stats['records_dropped']} "
        f"dropped + {stats['records_discarded']} discarded + {stats['records_poisoned']} poisoned = {accounted}"
    )
