"""Ready ``keep_if`` presets for ``RecordVideo``: the k best or worst clips of a run, failures, successes.

``RecordVideo(env, "videos", episode_trigger=lambda e: True, keep_if=envrec.keep.best(3))``
records every episode and leaves on disk the three with the highest return.
Every preset is asked when a clip ends, with the ``EpisodeOutcome`` of the
episode it ends in (for a clip cut short by ``video_length``, a step trigger
or ``close()``: that episode as far as it went).

* ``best(k)`` / ``worst(k)`` rank clips by ``episode_return`` over the whole
  run. A clip is kept while it is among the k best (worst) so far; when a
  better (worse) one comes, the kept clip it displaces is *discarded*: its
  ``.mp4`` and ``.meta.json`` are deleted once the encoder has finished it
  (``VideoRecorder.discard_clip``), and it counts in ``clips_discarded``. Ties:
  the earlier clip stays. A NaN return is the least worth keeping for both:
  it is kept only while fewer than k clips are. After ``close()`` exactly
  ``min(k, clips)`` clips remain.
* ``failures()`` / ``successes()`` decide on each clip alone (below).
* ``any_of(best(1), worst(1))``: a clip is kept while any of them keeps it —
  the best and the worst clip of a run from one recorder, rendered once.

``on_clip_closed`` is called for each clip kept when the recorder sees it
finished (at the next ``step()``/``reset()``/``close()``): a clip discarded
before that gets no call; one discarded after it has had its call (a logger
saw it). To log only the final k, read ``keeper.kept`` after ``close()``.

A ranked preset (and an ``any_of`` holding one) remembers the clips of one
recorder: pass a new one to each ``RecordVideo``; the same instance given to
a second raises ``ConfigError``. ``failures()`` and ``successes()`` hold no
state and may be shared.

What "failure" and "success" mean, from Gymnasium's ``terminated`` (the
episode reached a terminal state of the task: the pole fell, the agent died,
or a goal state was reached) and ``truncated`` (it was cut from outside, by
a time limit):

* when the last step's info has ``"is_success"`` (Gymnasium-Robotics and
  other goal-conditioned envs report it; SB3 reads it for its success
  rate), an episode that
  ended (terminated or truncated) is a success if ``bool(info["is_success"])``
  and a failure otherwise;
* without it, a failure is an episode that terminated (``terminated`` True,
  whatever ``truncated`` says on the same step), and a success one that was
  truncated without terminating: it survived to the time limit (right for
  CartPole, Pendulum, the MuJoCo walkers). For tasks whose
  terminal state is the goal (MountainCar, FrozenLake, LunarLander's
  landing) pass your own rule: ``successes(is_success=lambda o: o.terminated
  and o.episode_return > 0)``.

A clip that ended mid-episode (neither flag set) is neither.
"""

from __future__ import annotations

import heapq
import math
import warnings
from collections.abc import Iterable

from .errors import ConfigError
from .record.clip_triggers import ClipDiscarder, ClipKeeper, EpisodeOutcome, KeepIf

__all__ = ["AnyOf", "Failures", "Ranked", "Successes", "any_of", "best", "failures", "is_failure", "is_success", "successes", "worst"]


def _not_an_outcome(value: object, preset: str, example: str) -> None:
    """``keep_if=envrec.keep.best`` (the factory itself) is asked with an outcome: say what to pass instead."""
    if isinstance(value, EpisodeOutcome):
        raise ConfigError(f"envrec.keep.{preset} makes a keep_if: pass keep_if=envrec.keep.{preset}({example}), not the function itself")


def _check_k(k: object, preset: str) -> int:
    _not_an_outcome(k, preset, "3")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"envrec.keep.{preset}(k): k must be a positive integer (how many clips to keep), not {k!r}")
    return k


def _check_rule(rule: object, preset: str, name: str) -> None:
    _not_an_outcome(rule, preset, "")
    if rule is not None and not callable(rule):
        raise ConfigError(f"envrec.keep.{preset}({name}=...): {name} must be callable (outcome -> bool), not {rule!r}")


class _Attached(ClipKeeper):
    """A keeper of one recorder's clips (``attach`` refuses a second)."""

    def __init__(self) -> None:
        self._discarder: ClipDiscarder | None = None

    def attach(self, discarder: ClipDiscarder) -> None:
        if self._discarder is not None and self._discarder is not discarder:
            raise ConfigError(
                f"{self!r} already decides on another recorder's clips: a keeper ranks the clips of one recorder; "
                "make one per RecordVideo (keep_if=envrec.keep.best(3) in each)"
            )
        self._discarder = discarder

    def _attached(self, outcome: EpisodeOutcome) -> tuple[ClipDiscarder, str]:
        if self._discarder is None:
            raise ConfigError(
                f"{self!r} is not attached to a recorder: pass it as RecordVideo(..., keep_if=...), "
                "or call attach(video_recorder) first"
            )
        if outcome.clip is None:
            raise ConfigError(f"{self!r}: the outcome names no clip (EpisodeOutcome.clip), so none could be discarded later")
        return self._discarder, outcome.clip


class Ranked(_Attached):
    """The k best (``sign=1``) or worst (``sign=-1``) clips so far by episode return; see the module's docstring.

    Args:
        k: how many clips to keep, a positive integer.
        sign: 1 for the highest returns, -1 for the lowest.

    Raises:
        ConfigError: ``k`` is not a positive integer, or ``sign`` neither 1 nor -1.
    """

    def __init__(self, k: int, sign: int) -> None:
        super().__init__()
        if sign not in (1, -1):
            raise ConfigError(f"Ranked(k, sign): sign must be 1 (the best) or -1 (the worst), not {sign!r}")
        self.k = _check_k(k, "best" if sign > 0 else "worst")
        self.sign = sign
        self.discarded = 0  # clips this keeper kept, then discarded (a disk budget *evicts*; a keeper discards)
        self._seen = 0
        # a min-heap of (score, -order, order, outcome): its top is the kept clip to go first (the lowest score; of
        # equal scores the latest, so the earlier stays)
        self._heap: list[tuple[float, int, int, EpisodeOutcome]] = []

    def __repr__(self) -> str:
        return f"envrec.keep.{'best' if self.sign > 0 else 'worst'}({self.k})"

    def _score(self, episode_return: float) -> float:
        r = float(episode_return)
        return -math.inf if math.isnan(r) else self.sign * r

    def __call__(self, outcome: EpisodeOutcome) -> bool:
        discarder, _ = self._attached(outcome)
        self._seen += 1
        entry = (self._score(outcome.episode_return), -self._seen, self._seen, outcome)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, entry)
            return True
        if entry[:2] <= self._heap[0][:2]:
            return False  # not better than the k-th kept (an equal one came earlier: it stays)
        gone = heapq.heapreplace(self._heap, entry)[3]
        self.discarded += 1
        assert gone.clip is not None  # _attached checked it when it came
        discarder.discard_clip(gone.clip)
        return True

    @property
    def evicted(self) -> int:
        """Deprecated name of ``discarded`` (a keeper discards; a disk budget evicts), kept for one release."""
        warnings.warn("keeper.evicted is now keeper.discarded", DeprecationWarning, stacklevel=2)
        return self.discarded

    @property
    def kept(self) -> list[EpisodeOutcome]:
        """The outcomes of the clips kept now, best first (for ``worst``: the worst first); ties: the earlier first."""
        return [e[3] for e in sorted(self._heap, key=lambda e: e[:2], reverse=True)]


def best(k: int) -> Ranked:
    """Keep the ``k`` clips with the highest episode return of the whole run; earlier ones are discarded as better come.

    Args:
        k: how many clips to keep, a positive integer.

    Raises:
        ConfigError: ``k`` is not a positive integer.
    """
    return Ranked(k, 1)


def worst(k: int) -> Ranked:
    """Keep the ``k`` clips with the lowest episode return of the whole run; earlier ones are discarded as worse come.

    Args:
        k: how many clips to keep, a positive integer.

    Raises:
        ConfigError: ``k`` is not a positive integer.
    """
    return Ranked(k, -1)


def _ended(outcome: EpisodeOutcome) -> bool:
    return bool(outcome.terminated or outcome.truncated)


def is_failure(outcome: EpisodeOutcome) -> bool:
    """The default rule of ``failures()``: ``not info["is_success"]`` for an ended episode that reports it, else ``terminated``.

    Args:
        outcome: the episode the clip ends in.
    """
    if "is_success" in outcome.info:
        return _ended(outcome) and not bool(outcome.info["is_success"])
    return bool(outcome.terminated)


def is_success(outcome: EpisodeOutcome) -> bool:
    """The default rule of ``successes()``: ``info["is_success"]`` for an ended episode that reports it, else
    truncated without terminating (it lasted to the time limit).

    Args:
        outcome: the episode the clip ends in.
    """
    if "is_success" in outcome.info:
        return _ended(outcome) and bool(outcome.info["is_success"])
    return bool(outcome.truncated) and not outcome.terminated


class _Verdict:
    """A stateless ``keep_if``: one rule asked of each clip alone."""

    preset = ""

    def __init__(self, rule: KeepIf | None, default: KeepIf) -> None:
        self.rule: KeepIf = rule if rule is not None else default
        self._custom = rule is not None

    def __repr__(self) -> str:
        return f"envrec.keep.{self.preset}({'<your rule>' if self._custom else ''})"

    def __call__(self, outcome: EpisodeOutcome) -> bool:
        return bool(self.rule(outcome))


class Failures(_Verdict):
    """``keep_if`` keeping the clips of failed episodes (``is_failure``, or your rule). Stateless.

    Args:
        rule: ``rule(outcome) -> bool``. Default None: ``is_failure``.
    """

    preset = "failures"

    def __init__(self, rule: KeepIf | None = None) -> None:
        super().__init__(rule, is_failure)


class Successes(_Verdict):
    """``keep_if`` keeping the clips of successful episodes (``is_success``, or your rule). Stateless.

    Args:
        rule: ``rule(outcome) -> bool``. Default None: ``is_success``.
    """

    preset = "successes"

    def __init__(self, rule: KeepIf | None = None) -> None:
        super().__init__(rule, is_success)


def failures(is_failure: KeepIf | None = None) -> Failures:
    """Keep the clips of episodes that failed: by default, that terminated (see the module's docstring for
    ``info["is_success"]``).

    Args:
        is_failure: your own rule, ``is_failure(outcome) -> bool``. Default None: ``envrec.keep.is_failure``.

    Raises:
        ConfigError: ``is_failure`` is not callable.
    """
    _check_rule(is_failure, "failures", "is_failure")
    return Failures(is_failure)


def successes(is_success: KeepIf | None = None) -> Successes:
    """Keep the clips of episodes that succeeded: by default ``info["is_success"]`` when reported, else truncated
    without terminating (see the module's docstring).

    Args:
        is_success: your own rule, ``is_success(outcome) -> bool``. Default None: ``envrec.keep.is_success``.

    Raises:
        ConfigError: ``is_success`` is not callable.
    """
    _check_rule(is_success, "successes", "is_success")
    return Successes(is_success)


class AnyOf(_Attached):
    """Keeps a clip while any of its keepers does; see ``any_of``."""

    def __init__(self, keepers: Iterable[KeepIf]) -> None:
        super().__init__()
        self.keepers = tuple(keepers)
        self._holds: dict[str, int] = {}  # clip name -> how many ranked keepers keep it (a stateless one: for good)

    def __repr__(self) -> str:
        return f"envrec.keep.any_of({', '.join(map(repr, self.keepers))})"

    def attach(self, discarder: ClipDiscarder) -> None:
        super().attach(discarder)
        for keeper in self.keepers:
            if isinstance(keeper, ClipKeeper):
                keeper.attach(self)  # what they discard comes here first: a clip goes when no keeper holds it

    def __call__(self, outcome: EpisodeOutcome) -> bool:
        _, name = self._attached(outcome)
        answers = [bool(keeper(outcome)) for keeper in self.keepers]  # every one asked: each ranking sees each clip
        if not any(answers):
            return False
        if any(a and not isinstance(k, ClipKeeper) for k, a in zip(self.keepers, answers, strict=True)):
            return True  # a stateless keeper keeps it for good: no hold to count
        self._holds[name] = sum(answers)
        return True

    def discard_clip(self, name: str) -> None:
        """One ranked keeper let clip ``name`` go; it is discarded when none holds it any more.

        Args:
            name: the clip's name.
        """
        held = self._holds.get(name)
        if held is None:
            return  # kept for good by a stateless keeper
        if held > 1:
            self._holds[name] = held - 1
            return
        del self._holds[name]
        assert self._discarder is not None  # attached before any clip was decided
        self._discarder.discard_clip(name)


def any_of(*keepers: KeepIf) -> AnyOf:
    """Keep a clip while any of ``keepers`` keeps it: ``any_of(best(1), worst(1))``, ``any_of(best(3), failures())``.

    Every keeper is asked about every clip. A clip kept by a ranked keeper
    (``best``, ``worst``) is discarded when every ranked keeper that kept it
    has discarded it; one a stateless keeper (``failures()``, a function) kept stays.

    Args:
        keepers: two or more ``keep_if`` callables (presets or your functions); ranked ones new, for this one only.

    Raises:
        ConfigError: fewer than two keepers, one that is not callable, or one given twice.
    """
    if len(keepers) < 2:
        raise ConfigError(f"envrec.keep.any_of needs two or more keepers, got {len(keepers)}")
    for keeper in keepers:
        if not callable(keeper):
            raise ConfigError(f"envrec.keep.any_of: {keeper!r} is not callable (a keep_if takes an EpisodeOutcome)")
    if len({id(k) for k in keepers}) < len(keepers):
        raise ConfigError("envrec.keep.any_of: the same keeper twice (a ranked one would see each clip twice)")
    return AnyOf(keepers)

