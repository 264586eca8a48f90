"""Which episodes of a recording to verify or render: the SEL grammar.

A selection is comma-separated terms, their union, in episode order:

* ``3``: the episode with id 3; ``7-9``: ids 7, 8 and 9 (inclusive);
* ``worst:K`` / ``best:K``: the K episodes of lowest / highest return (ties: the earlier first;
  an episode whose return is not finite is not ranked);
* ``failed``: the episodes that ended terminated;
* ``last:K``: the K last episodes;
* ``every:N``: the episodes whose id is a multiple of N;
* ``all``: every episode;
* ``replayable``: the episodes whose start was recorded (a seed, an ``np_random`` state or a reset
  snapshot, or a snapshot after an evicted start): a vector env's unseeded autoresets recorded by an
  older envrec, or by a vector env that does not expose its sub-envs, are left out.

Stable API (``envrec render`` builds on it): ``parse_selection(text) -> list[Term]`` checks the
grammar only; ``select_episodes(episodes, selection) -> list`` picks among any objects with
``episode_id``, ``total_reward`` and ``ended_by`` (``Episode``, ``EpisodeRef``), in their order;
``episode_refs(reader)`` lists a reader's episodes without keeping their arrays.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import ConfigError, TraceError
from ..read.batch_files import BatchFiles
from ..read.reader import TraceReader

__all__ = ["GRAMMAR", "EpisodeRef", "Term", "episode_refs", "parse_selection", "replayable", "select_episodes"]

GRAMMAR = ("comma-separated terms: an episode id (3), an id range (7-9), worst:K, best:K, failed, last:K, "
           "every:N, replayable, all")
_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")  # ASCII digits only: not "\\d", which takes fullwidth ones
_COUNTED = re.compile(r"^(worst|best|last|every):([0-9]+)$")
MAX_NUMBER = 2**63 - 1  # ids and counts are 64-bit; a larger number is no episode of any recording


class _Ranked(Protocol):
    @property
    def episode_id(self) -> int: ...
    @property
    def total_reward(self) -> float | None: ...
    @property
    def ended_by(self) -> str | None: ...


E = TypeVar("E", bound=_Ranked)


@dataclass(frozen=True)
class Term:
    """One term of a selection.

    Attributes:
        kind: ``"ids"`` (``first``..``last``), ``"worst"``, ``"best"``, ``"last"``, ``"every"`` (``count``),
            ``"failed"`` or ``"all"``.
        first, last: the id range of an ``"ids"`` term (equal for a single id).
        count: K or N of a counted term.
    """

    kind: str
    first: int = 0
    last: int = 0
    count: int = 0


@dataclass(frozen=True)
class EpisodeRef:
    """What selection and replay need to know of an episode before reading it.

    Attributes:
        index: its position across the reader (``reader[index]``).
        episode_id: its id in its recording.
        total_reward: its return (None when not finite).
        ended_by: ``"terminated"``, ``"truncated"``, or why the recording stopped inside it.
        length: the steps read.
        first_step: the episode step of its first kept action (0 unless its start was evicted).
        replayable: what replay starts it from was recorded (see ``replayable``).
    """

    index: int
    episode_id: int
    total_reward: float | None
    ended_by: str | None
    length: int
    first_step: int
    replayable: bool = True


def parse_selection(text: str) -> list[Term]:
    """The terms of a selection, checked against the grammar.

    Args:
        text: e.g. ``"3,7-9,worst:2"``.

    Raises:
        ConfigError: an empty selection or a term that is not in the grammar (named, with the grammar).
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"an episode selection must not be empty: {GRAMMAR}")
    terms = []
    for raw in text.split(","):
        term = raw.strip().lower()
        if term in ("all", "failed", "replayable"):
            terms.append(Term(term))
            continue
        ids, counted = _RANGE.match(term), _COUNTED.match(term)
        if ids:
            first = _number(ids.group(1), raw)
            last = _number(ids.group(2), raw) if ids.group(2) is not None else first
            if last < first:
                raise ConfigError(f"episode selection term {raw.strip()!r}: the range runs backwards ({GRAMMAR})")
            terms.append(Term("ids", first=first, last=last))
        elif counted:
            count = _number(counted.group(2), raw)
            if count < 1:
                raise ConfigError(f"episode selection term {raw.strip()!r}: {counted.group(1)} needs a count of at least 1")
            terms.append(Term(counted.group(1), count=count))
        else:
            raise ConfigError(f"unknown episode selection term {raw.strip()!r}: {GRAMMAR}")
    return terms


def _number(digits: str, raw: str) -> int:
    """The ASCII ``digits`` as an int; ``ConfigError`` beyond ``MAX_NUMBER`` (a long string is not converted)."""
    significant = digits.lstrip("0") or "0"
    value = int(significant) if len(significant) <= 19 else MAX_NUMBER + 1
    if value > MAX_NUMBER:
        raise ConfigError(f"episode selection term {raw.strip()[:40]!r}: {digits[:24]}{'...' if len(digits) > 24 else ''} "
                          f"is beyond the largest episode id or count (2**63 - 1)")
    return value


def select_episodes(episodes: Sequence[E], selection: str = "all", *, missing_ok: bool = False) -> list[E]:
    """The episodes a selection picks, in the order given (their union, each once).

    Args:
        episodes: the episodes of one recording in order: ``Episode`` or ``EpisodeRef`` objects (anything
            with ``episode_id``, ``total_reward`` and ``ended_by``).
        selection: the SEL text (see the module docstring).
        missing_ok: an id or range term picks the ids it finds (for one recording of several) instead of
            raising for the others.

    Raises:
        ConfigError: a bad term, or an id (of an id or range term) that is not among ``episodes``.
    """
    terms = parse_selection(selection)
    chosen: set[int] = set()  # positions in episodes
    position = {ep.episode_id: i for i, ep in enumerate(episodes)}
    ids = sorted(position)
    for term in terms:
        chosen.update(_pick(term, episodes, position, ids, missing_ok))
    return [episodes[i] for i in sorted(chosen)]


def _pick(term: Term, episodes: Sequence[_Ranked], position: dict[int, int], ids: list[int],
          missing_ok: bool) -> Iterable[int]:
    n = len(episodes)
    if term.kind == "all":
        return range(n)
    if term.kind == "failed":
        return [i for i, ep in enumerate(episodes) if ep.ended_by == "terminated"]
    if term.kind == "replayable":
        return [i for i, ep in enumerate(episodes) if replayable(ep)]
    if term.kind == "last":
        return range(max(0, n - term.count), n)
    if term.kind == "every":
        return [i for i, ep in enumerate(episodes) if ep.episode_id % term.count == 0]
    if term.kind in ("worst", "best"):
        ranked = [i for i, ep in enumerate(episodes) if _finite(ep.total_reward)]
        sign = 1.0 if term.kind == "worst" else -1.0
        ranked.sort(key=lambda i: (sign * float(episodes[i].total_reward or 0.0), i))
        return ranked[: term.count]
    found = ids[bisect.bisect_left(ids, term.first):bisect.bisect_right(ids, term.last)]  # never the whole range
    if not missing_ok and len(found) != term.last - term.first + 1:
        missing = _missing(found, term.first, term.last)
        shown = ", ".join(map(str, missing)) + (" ..." if term.last - term.first + 1 - len(found) > len(missing) else "")
        have = "it has none" if not ids else f"the recording's ids run {ids[0]}-{ids[-1]}" + (
            "" if ids[-1] - ids[0] + 1 == len(ids) else f", {len(ids)} of them")
        raise ConfigError(f"episode selection: no episode {shown} ({have})")
    return [position[k] for k in found]


def _missing(found: list[int], first: int, last: int, limit: int = 5) -> list[int]:
    """The first ``limit`` ids of ``first..last`` not in ``found`` (sorted, inside the range)."""
    out: list[int] = []
    expect = first
    for k in [*found, last + 1]:
        while expect < k and len(out) < limit:
            out.append(expect)
            expect += 1
        if len(out) >= limit:
            break
        expect = k + 1
    return out


def replayable(episode: Any) -> bool:
    """Whether what replay starts ``episode`` from was recorded: its reset's seed, ``np_random`` state or reset
    snapshot, or (its start evicted) a snapshot kept after it. Whether it then reproduces is ``verify``'s to say.

    Args:
        episode: an ``EpisodeRef`` (its ``replayable``) or an ``Episode``.
    """
    if isinstance(episode, EpisodeRef):
        return episode.replayable
    if getattr(episode, "first_step", 0) > 0:
        return bool(getattr(episode, "snapshots", ()))
    return (getattr(episode, "seed", None) is not None or getattr(episode, "rng", None) is not None
            or getattr(episode, "reset_snapshot", None) is not None)


def _start_recorded(raw: dict) -> bool:
    return any(raw.get(k) is not None for k in ("seed", "rng", "reset_snapshot"))


def _finite(x: Any) -> bool:
    return x is not None and math.isfinite(float(x))


def episode_refs(reader: TraceReader) -> list[EpisodeRef]:
    """Every episode of ``reader`` (a ``TraceReader``, usually of one recording) as an ``EpisodeRef``.

    A recording with no episode in parts is listed from its batches' episode records (no array is
    decompressed: listing a long recording of frames to render its last episode reads little); one with
    parts is read episode by episode, as the reader stitches them.

    Args:
        reader: the reader to list (opened with ``on_damaged="raise"``, the default).

    Raises:
        TraceError: a batch is damaged (as the reader raises it), or two episodes have the same id (a damaged
            or crafted folder: which one a selection means is not known).
    """
    refs = _from_records(reader)
    if refs is None:
        refs = [EpisodeRef(ep.index, ep.episode_id, ep.total_reward, ep.ended_by, ep.length, ep.first_step, replayable(ep))
                for ep in reader]
    seen: set[int] = set()
    for ref in refs:
        if ref.episode_id in seen:
            raise TraceError(f"{reader.directory}: two episodes have the id {ref.episode_id!r}: the folder is damaged or "
                             "crafted (envrec numbers a recording's episodes once each)")
        seen.add(ref.episode_id)
    return refs


def _from_records(reader: TraceReader) -> list[EpisodeRef] | None:
    """The refs from the raw episode records, None when a recording has parts (stitched by the reader only)."""
    if reader.on_damaged != "raise" or any("head_part" in e or e.get("continues") for r in reader.recordings for e in r.batches):
        return None
    files, refs = BatchFiles(reader.directory, reader.verify), list[EpisodeRef]()
    try:
        for recording in reader.recordings:
            for entry in recording.batches:
                for raw in files.load(entry, recording.manifest):
                    if "part" in raw:
                        return None
                    n = len(refs)
                    refs.append(EpisodeRef(n, raw.get("episode_id", n), raw.get("return"), raw.get("ended_by", "unknown"),
                                           raw.get("length", 0), 0, _start_recorded(raw)))
    finally:
        files.close()
    return refs
