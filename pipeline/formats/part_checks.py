"""What readers rely on in episode parts (``docs/format.md``, "Episode parts"), checked before it is used.

An episode cut into parts is written as one *part record* per batch, in
consecutive batches: an episode record with ``"part": {"index", "first_step",
"continues"}``; the manifest's batch entries say ``head_part`` (the batch's
first record continues an episode) and ``continues`` (its last record is
continued in the next batch). These checks make sure the keys have their
types and agree with each other, within a record, a batch and its entry, and
from one part to the next, so that stitching never meets a surprise: each
raises ``TraceError`` naming the file and the field. (That one part follows
the part before it, in the batch before, is checked when they are stitched:
``envrec.read.stitch``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import TraceError

__all__ = ["check_entry_parts", "check_parts", "part_of"]

_INT64 = 1 << 63


def _count(doc: Mapping, key: str, where: str, lo: int) -> int:
    v = doc.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < _INT64:
        raise TraceError(f"{where}.{key}: {v!r:.60} is not an integer >= {lo}")
    return v


def check_entry_parts(entry: Mapping[str, Any], where: str) -> None:
    """A manifest batch entry's ``head_part`` (``{"index" >= 1, "first_step" >= index}``) and ``continues`` (true).

    Args:
        entry: the batch entry (already an object).
        where: the file and entry, for messages.
    """
    if "head_part" in entry:
        head = entry["head_part"]
        if not isinstance(head, dict):
            raise TraceError(f"{where}.head_part: {head!r:.60} is not an object")
        index = _count(head, "index", f"{where}.head_part", 1)
        _count(head, "first_step", f"{where}.head_part", index)
    if "continues" in entry and entry["continues"] is not True:
        raise TraceError(f"{where}.continues: {entry['continues']!r:.60} is not true (the key is left out when false)")
    if (entry.get("continues") or "head_part" in entry) and isinstance(entry.get("len"), int) and entry["len"] < 1:
        raise TraceError(f"{where}: a batch with no episode record can neither continue an episode nor hold a part of one")


def part_of(raw: Mapping[str, Any]) -> tuple[int, int, bool]:
    """``(index, first_step, continues)`` of a checked episode record; ``(0, 0, False)`` for a whole episode."""
    part = raw.get("part")
    if part is None:
        return 0, 0, False
    return part["index"], part["first_step"], part["continues"]


def _check_record(raw: Mapping[str, Any], where: str) -> None:
    part = raw["part"]
    if not isinstance(part, dict):
        raise TraceError(f"{where}.part: {part!r:.60} is not an object")
    index = _count(part, "index", f"{where}.part", 0)
    first = _count(part, "first_step", f"{where}.part", index)
    if index == 0 and first != 0:
        raise TraceError(f"{where}.part.first_step: {first}, but part 0 of an episode starts at step 0")
    if not isinstance(part.get("continues"), bool):
        raise TraceError(f"{where}.part.continues: {part.get('continues')!r:.60} is not true or false")
    if raw.get("length", 1) < 1 or raw["rewards"]["shape"][0] < 1:
        raise TraceError(f"{where}.part: a part holds at least one step")
    if part["continues"] and (raw.get("ended_by") is not None or raw.get("complete") is not False):
        raise TraceError(f"{where}.part.continues: a part that continues has ended_by null and complete false")


def check_parts(episodes: list, entry: Mapping[str, Any], what: str) -> None:
    """The part keys of a batch's checked episode records (``trace_checks.check_batch``) against its entry.

    Args:
        episodes: the batch's episode records.
        entry: the manifest's entry for the batch (its ``head_part`` and ``continues``).
        what: the batch's file name, for messages.
    """
    last = len(episodes) - 1
    for i, raw in enumerate(episodes):
        where = f"{what}: episodes[{i}]"
        if "part" in raw:
            _check_record(raw, where)
        index, first, continues = part_of(raw)
        if raw.get("ended_by", "") is None and not continues:
            raise TraceError(f"{where}.ended_by: null, but the record is not a part that continues")
        if continues and (i != last or not entry.get("continues")):
            raise TraceError(f"{where}.part.continues: only a batch's last record continues, in a batch whose "
                             "manifest entry says continues")
        if index >= 1 and (i != 0 or entry.get("head_part") != {"index": index, "first_step": first}):
            raise TraceError(f"{where}.part: part {index} from step {first} is not the batch's head_part "
                             f"({entry.get('head_part')}); only a batch's first record continues an episode")
    if entry.get("head_part") and part_of(episodes[0])[0] == 0:
        raise TraceError(f"{what}: episodes[0].part: missing, but the manifest's entry names a head_part {entry['head_part']}")
    if entry.get("continues") and not part_of(episodes[last])[2]:
        raise TraceError(f"{what}: episodes[{last}].part.continues: not true, but the manifest's entry says the batch continues")
