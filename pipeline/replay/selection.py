"""Which episodes of a recording to verify or render: the SEL grammar.

A selection is comma-separated terms, their union, in episode order:

* ``3``: the episode with id 3; ``7-9``: ids 7, 8 and 9 (inclusive);
* ``worst:K`` / ``best:K``: the K episodes of lowest / highest return (ties: the earlier first;
  an episode whose return is not finite is not ranked);
* ``failed``: the episodes that ended terminated;
* ``last:K``: the K last episodes;
* ``every:N``: the episodes whose id is a multiple of N;
* ``all``: every episode.

Stable API (``envrec render`` builds on it): ``parse_selection(text) -> list[Term]`` checks the
grammar only; ``select_episodes(episodes, selection) -> list`` picks among any objects with
``episode_id``, ``total_reward`` and ``ended_by`` (``Episode``, ``EpisodeRef``), in their order;
``episode_refs(reader)`` lists a reader's episodes without keeping their arrays.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import ConfigError

__all__ = ["GRAMMAR", "EpisodeRef", "Term", "episode_refs", "parse_selection", "select_episodes"]

GRAMMAR = ("comma-separated terms: an episode id (3), an id range (7-9), worst:K, best:K, failed, last:K, "
           "every:N, all")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNTED = re.compile(r"^(worst|best|last|every):(\d+)$")


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
    """

    index: int
    episode_id: int
    total_reward: float | None
    ended_by: str | None
    length: int
    first_step: int


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
        if term in ("all", "failed"):
            terms.append(Term(term))
            continue
        ids, counted = _RANGE.match(term), _COUNTED.match(term)
        if ids:
            first = int(ids.group(1))
            last = int(ids.group(2)) if ids.group(2) is not None else first
            if last < first:
                raise ConfigError(f"episode selection term {raw.strip()!r}: the range runs backwards ({GRAMMAR})")
            terms.append(Term("ids", first=first, last=last))
        elif counted:
            count = int(counted.group(2))
            if count < 1:
                raise ConfigError(f"episode selection term {raw.strip()!r}: {counted.group(1)} needs a count of at least 1")
            terms.append(Term(counted.group(1), count=count))
        else:
            raise ConfigError(f"unknown episode selection term {raw.strip()!r}: {GRAMMAR}")
    return terms


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
    for term in terms:
        chosen.update(_pick(term, episodes, position, missing_ok))
    return [episodes[i] for i in sorted(chosen)]


def _pick(term: Term, episodes: Sequence[_Ranked], position: dict[int, int], missing_ok: bool) -> Iterable[int]:
    n = len(episodes)
    if term.kind == "all":
        return range(n)
    if term.kind == "failed":
        return [i for i, ep in enumerate(episodes) if ep.ended_by == "terminated"]
    if term.kind == "last":
        return range(max(0, n - term.count), n)
    if term.kind == "every":
        return [i for i, ep in enumerate(episodes) if ep.episode_id % term.count == 0]
    if term.kind in ("worst", "best"):
        ranked = [i for i, ep in enumerate(episodes) if _finite(ep.total_reward)]
        sign = 1.0 if term.kind == "worst" else -1.0
        ranked.sort(key=lambda i: (sign * float(episodes[i].total_reward or 0.0), i))
        return ranked[: term.count]
    if missing_ok:
        return [i for k, i in position.items() if term.first <= k <= term.last]
    missing = [k for k in range(term.first, term.last + 1) if k not in position]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        have = f"{episodes[0].episode_id}..{episodes[-1].episode_id}" if episodes else "none"
        raise ConfigError(f"episode selection: episode id(s) {shown} not recorded (recorded ids: {have})")
    return [position[k] for k in range(term.first, term.last + 1)]


def _finite(x: Any) -> bool:
    return x is not None and math.isfinite(float(x))


def episode_refs(reader: Any) -> list[EpisodeRef]:
    """Every episode of ``reader`` (a ``TraceReader``, usually of one recording) as an ``EpisodeRef``.

    Args:
        reader: the reader to list; its episodes are read one by one and not kept.

    Raises:
        TraceError: a batch is damaged (as the reader raises it).
    """
    return [EpisodeRef(ep.index, ep.episode_id, ep.total_reward, ep.ended_by, ep.length, ep.first_step) for ep in reader]
