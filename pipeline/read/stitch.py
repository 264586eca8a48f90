"""Stitching the parts of an episode into one ``Episode``.

An episode cut into parts (``docs/format.md``, "Episode parts") lies in
consecutive batches of its recording: the last record of one batch and the
first record of the next. Which batches join is known from the manifest's
entries alone (``joins``: ``continues`` on one, ``head_part`` on the next),
so a reader counts and indexes stitched episodes without loading a batch.
``stitch`` then concatenates the parts' arrays, dropping row 0 of the
observations and infos of each part after the first: it repeats the last row
of the part before.

Every reader of a recording (``TraceReader`` and what is built on it:
``iter_parts``, the exporters, ``envrec inspect``, the viewer) takes its
batch entries through ``chained`` first: the order the serializer writes,
each batch standing where the one before it says the next one stands, or a
``TraceError`` (a ``damaged`` note with ``on_damaged="skip"``). Parts are
then joined only along that chain, and each joined part is checked to follow
the one before it (``check_follows``, ``check_part_follows``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import TraceError
from ..formats.trace_format import BatchEntry, Manifest, batch_position, position_after
from .batch_files import Episode, Part

__all__ = ["Part", "chained", "check_follows", "check_part_follows", "joins", "recording_ended", "settled", "stitch"]


def _next_positions(entry: BatchEntry) -> tuple[tuple[int, int], ...]:
    """Where the batch after ``entry`` may stand: ``position_after`` it, or, when its last part continues, also
    at the next episode (that episode ended right after a cut made while idle: its empty last part is dropped)."""
    after = position_after(entry)
    return (after, (entry["first"] + entry["len"], 0)) if entry.get("continues") else (after,)


def chained(entries: Sequence[BatchEntry], what: str,
            broken: Callable[[str], None] | None = None) -> list[BatchEntry]:
    """A recording's batch entries (oldest first), checked to be the chain the serializer writes: each one stands
    (``batch_position``) where the entry before it says the next one stands, and names files no other entry names.
    The first may stand anywhere: a disk budget evicts the oldest batches, and a part may be the first kept.

    Args:
        entries: every entry the head manifest names, its segments' first (``recording_batches``).
        what: the head manifest, for messages.
        broken: None: raise ``TraceError`` at the first break. Otherwise called with the message of each break
            (``on_damaged="skip"``): an entry that stands at or before the one kept before it (listed twice, a
            second batch of the same part, out of order) is left out; one after a gap (entries missing in the
            middle) is kept and starts anew, as after a damaged batch left out.

    Returns:
        The entries to read, in order.
    """
    kept: list[BatchEntry] = []
    names: set[str] = set()
    for k, entry in enumerate(entries):
        own = [str(entry[key]) for key in ("fn", "bin") if entry.get(key) is not None]
        where = f"{what}: batches[{k}] ({entry['fn']})"
        problem, leave_out = None, False
        if any(n in names for n in own):
            problem, leave_out = f"{where} names a file an entry before it names", True
        elif kept and batch_position(entry) not in _next_positions(kept[-1]):
            here, expected = batch_position(entry), _next_positions(kept[-1])
            leave_out = here <= expected[0]
            problem = (f"{where} stands at episode {here[0]} part {here[1]}, but the batch before it ({kept[-1]['fn']}) "
                       f"is followed by episode {expected[0][0]} part {expected[0][1]}"
                       + (f" (or episode {expected[1][0]} part 0)" if len(expected) > 1 else "")
                       + (": listed twice or out of order" if leave_out else ": batches are missing between them"))
        if problem is not None:
            if broken is None:
                raise TraceError(problem)
            broken(problem)
            if leave_out:
                continue
        kept.append(entry)
        names.update(own)
    return kept


def joins(entries: Sequence[BatchEntry]) -> list[bool]:
    """For each of a recording's kept batch entries (oldest first), whether its first record continues the last
    record of the entry before it: that one ``continues``, this one has the next ``head_part`` of the same episode.

    A ``head_part`` with no such entry before it (evicted, or left out as damaged) starts an episode of its own
    with that part's first step.
    """
    out = []
    for k, entry in enumerate(entries):
        head = entry.get("head_part")
        before = entries[k - 1] if k else None
        out.append(
            head is not None and before is not None and bool(before.get("continues"))
            and batch_position(entry) == position_after(before)
        )
    return out


def check_follows(before: Episode, after: Episode) -> None:
    """``after`` (the first record of a batch) is the part that continues ``before``; ``TraceError`` naming both."""
    check_part_follows(before.parts[-1], before.episode_id, after.parts[0], after.episode_id)


def check_part_follows(b: Part, before_id: int, a: Part, after_id: int) -> None:
    """Part ``a`` of episode ``after_id`` (a batch's first record) continues part ``b`` of ``before_id`` (the
    last record of the batch before): the same episode, the next index, from the step where ``b`` ended.

    Args:
        b, before_id: the part before and its episode's id.
        a, after_id: the part after and its episode's id.
    """
    where = f"{a.batch}: episodes[{a.record}].part (after {b.batch}: episodes[{b.record}])"
    if not b.continues or a.index != b.index + 1:
        raise TraceError(f"{where}: part {a.index} does not follow part {b.index}")
    if after_id != before_id:
        raise TraceError(f"{where}: part {a.index} is of episode {after_id}, the part before of {before_id}")
    if a.first_step != b.first_step + b.length:
        raise TraceError(f"{where}: part {a.index} starts at step {a.first_step}, the part before ends at {b.first_step + b.length}")


def _join(values: list[Any], drop_first: bool) -> Any:
    """One field of every part joined: arrays concatenated (Dict/Tuple leaf by leaf), text leaves and infos as lists."""
    first = values[0]
    if isinstance(first, dict):
        return {k: _join([v[k] for v in values], drop_first) for k in first}
    if isinstance(first, tuple):
        return tuple(_join([v[i] for v in values], drop_first) for i in range(len(first)))
    skip = 1 if drop_first else 0
    if isinstance(first, list):
        return list(first) + [x for v in values[1:] for x in v[skip:]]
    if first is None:
        return None
    try:
        joined = np.concatenate([first, *(np.asarray(v)[skip:] for v in values[1:])])
    except MemoryError:
        raise TraceError(f"an episode of {len(values)} parts is too large to hold in the memory left: "
                         "read it part by part (TraceReader.iter_parts)") from None
    joined.flags.writeable = False  # as read-only as a whole episode's arrays
    return joined


def _total(parts: Sequence[Episode]) -> float | None:
    totals = [p.total_reward for p in parts]
    if any(t is None for t in totals):
        return None
    total = float(np.sum(np.array(totals, dtype=np.float64)))
    return total if np.isfinite(total) else None


def stitch(parts: Sequence[Episode]) -> Episode:
    """One ``Episode`` of consecutive parts (each as ``BatchFiles.episode`` reads it, checked by ``check_follows``).

    Arrays are concatenated (copied: the result holds the whole episode in memory); a single part is returned
    as it is. The first part gives the index, ids, seed, options, ``rng``, ``reset_snapshot`` and ``first_step``; the last how it
    ended; each its ``snapshots``.
    """
    if len(parts) == 1:
        return parts[0]
    head, last = parts[0], parts[-1]
    no_infos = any(len(p.infos) != p.length + 1 for p in parts)  # a trace written without infos
    return replace(
        head,
        observations=_join([p.observations for p in parts], True),
        actions=_join([p.actions for p in parts], False),
        rewards=_join([p.rewards for p in parts], False),
        terminations=_join([p.terminations for p in parts], False),
        truncations=_join([p.truncations for p in parts], False),
        infos=[] if no_infos else _join([p.infos for p in parts], True),
        length=sum(p.length for p in parts),
        total_reward=_total(parts),
        ended_by=last.ended_by,
        complete=last.complete,
        parts=tuple(q for p in parts for q in p.parts),
        snapshots=tuple(s for p in parts for s in p.snapshots),
    )


def settled(ep: Episode, manifest: Manifest, entry: BatchEntry, after: BatchEntry | None) -> Episode:
    """``ep``, told how it ended when its last part says it continues but nothing continues it.

    A part is cut with at least one step, so an episode whose every step was already committed as parts
    when it ended (an idle commit just before its reset, or before the recording's close) keeps a last part
    that says it continues. Its end is known all the same when something comes after that part: the next
    episode (the batch right after, ``after``, starts with a record of its own: no ``head_part``), or the
    end of the recording (the part's batch, ``entry``, is the newest of a complete recording). It ended
    then as its last step says: ``"terminated"`` or ``"truncated"`` (``complete``), otherwise ``"reset"``,
    ``"close"`` or ``"crash"`` (finalized after its env process died), as a record written whole would say.
    While nothing has come after it (a recording still running), ``ended_by`` stays None.
    """
    if ep.ended_by is not None:
        return ep
    how = recording_ended(manifest, entry, after)
    if how is None:
        return ep
    terminated, truncated = (bool(len(flags) and flags[-1]) if flags is not None else False
                             for flags in (ep.terminations, ep.truncations))  # absent in gym-recording's own traces
    ended_by = "terminated" if terminated else "truncated" if truncated else how
    return replace(ep, ended_by=ended_by, complete=terminated or truncated)


def recording_ended(manifest: Manifest, entry: BatchEntry, after: BatchEntry | None) -> str | None:
    """What came after the last record of ``entry``, a part that continues (see ``settled``): ``"reset"``
    (``after``, the next batch, starts the next episode), ``"close"`` or ``"crash"`` (``entry`` is the newest
    batch of a complete recording), or None (nothing yet: it continues)."""
    if after is not None:
        return "reset" if "head_part" not in after and after["first"] == entry["first"] + entry["len"] else None
    batches = manifest.get("batches") or []
    if not (manifest.get("complete") and batches and batches[-1]["fn"] == entry["fn"]):
        return None
    return "close" if manifest.get("closed_cleanly") else "crash"
