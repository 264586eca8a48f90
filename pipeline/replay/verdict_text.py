"""Stored verdicts as people read them: ``envrec inspect``'s verify line, the viewer's marks, and the commands
that verify or render a recording.

A verdict file may be a stranger's: ``read_verdicts`` checks its types, and every string taken from it
passes ``clean`` (control characters escaped, cut short) before it is shown, so a crafted file can
neither break a terminal line nor make the viewer's JSON invalid (no NaN leaves here: differences are text).

Stable API: ``clean(text, limit)``, ``short(verdict)``, ``detail(verdict)``, ``largest(verdict)``,
``summary(verdicts, recorded)``,
``inspect_line(directory, prefix, command_dir, several, recorded)``, ``verify_command(...)``,
``render_command(...)``.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..errors import TraceError
from .verdicts import Verdict, VerdictFile, read_verdicts

__all__ = ["clean", "detail", "inspect_line", "largest", "render_command", "short", "summary", "verify_command"]

LISTED = 3  # episodes named per status in a summary; the others are counted
TEXT_LIMIT = 160


def clean(text: Any, limit: int = TEXT_LIMIT) -> str:
    """``text`` (any value; a string as it is, else its ``repr``) fit for one line: control characters
    escaped, at most ``limit`` characters (``...`` marks a cut).

    Args:
        text: what a verdict file said.
        limit: the longest result.
    """
    s = text if isinstance(text, str) else repr(text)
    s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s[: limit * 4])
    return s if len(s) <= limit else s[: limit - 3] + "..."


def largest(v: Verdict) -> str:
    """``"largest difference in observations: 0.0319"``: the difference a verdict stores is the largest over its
    field's array at that step, not the one at ``where`` (empty when it has none).

    Args:
        v: a diverged verdict.
    """
    return f"largest difference in {v.field}: {v.difference:.6g}" if v.difference is not None else ""


def short(v: Verdict) -> str:
    """The verdict in a few words: ``reproduced``, ``diverged at step 17``, ``cannot replay``.

    Args:
        v: the verdict.
    """
    if v.status == "diverged":
        return f"diverged at step {v.step}"
    return "cannot replay" if v.status == "cannot_replay" else "reproduced"


def detail(v: Verdict) -> str:
    """The verdict in one line: where it diverged and by how much, why it cannot replay, what to do.

    Args:
        v: the verdict.
    """
    if v.status == "reproduced":
        begun = f" from step {v.from_step}" if v.from_step else ""
        return f"reproduced: {v.steps} steps{begun}, started from its {clean(v.start)}"
    hint = f"; {clean(v.hint)}" if v.hint else ""
    if v.status == "diverged":
        return (f"diverged at step {v.step}: {v.field}{clean(v.where or '', 60)} recorded {clean(v.recorded, 60)}, "
                f"replayed {clean(v.replayed, 60)}{'; ' + largest(v) if largest(v) else ''}{hint}")
    return f"cannot replay: {clean(v.reason or 'no reason given')}{hint}"


def _named(v: Verdict) -> str:
    if v.status == "diverged":
        return f"episode {v.episode_id} at step {v.step}: {v.field}{clean(v.where or '', 60)}{'; ' + largest(v) if largest(v) else ''}"
    return f"episode {v.episode_id}: {clean(v.reason or 'no reason given', 100)}"


def summary(vf: VerdictFile, recorded: int | None = None) -> str:
    """The verify line of a verdict file: counts per status, the first episodes that did not reproduce, its date.

    Args:
        vf: the verdict file read back.
        recorded: the episodes the recording holds now, to count those without a verdict (None: not said).
    """
    verdicts = [vf.episodes[k] for k in sorted(vf.episodes)]
    counts = Counter(v.status for v in verdicts)
    parts = [f"{counts['reproduced']} reproduced"]
    for status, label in (("diverged", "diverged"), ("cannot_replay", "cannot replay")):
        bad = [v for v in verdicts if v.status == status]
        named = "; ".join(_named(v) for v in bad[:LISTED]) + (f"; {len(bad) - LISTED} more" if len(bad) > LISTED else "")
        parts.append(f"{len(bad)} {label}" + (f" ({named})" if bad else ""))
    unverified = f"; {recorded - len(verdicts)} episode(s) without a verdict" if recorded and recorded > len(verdicts) else ""
    return f"verify: {', '.join(parts)}{unverified} (verified {clean(vf.verified_at, 40)})"


def _imports(modules: Sequence[str]) -> str:
    return "".join(f" --import {shlex.quote(m)}" for m in modules)


def verify_command(directory: str, prefix: str | None = None, imports: Sequence[str] = ()) -> str:
    """``envrec verify DIR [--prefix P] [--import M]...``, shell-quoted.

    Args:
        directory: the folder as the user named it.
        prefix: the recording's prefix, when the folder holds several.
        imports: modules the user trusts (``envrec view --import``; never a folder's names).
    """
    return f"envrec verify {shlex.quote(directory)}" + (f" --prefix {shlex.quote(prefix)}" if prefix else "") + _imports(imports)


def render_command(directory: str, episode_id: int, prefix: str | None = None, imports: Sequence[str] = ()) -> str:
    """``envrec render DIR [--prefix P] --episodes N [--import M]...``, shell-quoted: the command that renders one
    episode.

    Args:
        directory: the recording's folder as the user named it.
        episode_id: the episode.
        prefix: the recording's prefix, when the folder holds several.
        imports: modules the user trusts (``envrec view --import``; never a folder's names).
    """
    chosen = f" --prefix {shlex.quote(prefix)}" if prefix else ""
    return f"envrec render {shlex.quote(directory)}{chosen} --episodes {int(episode_id)}{_imports(imports)}"


def inspect_line(directory: str | os.PathLike, prefix: str, command_dir: str, several: bool,
                 recorded: int | None = None) -> str:
    """What ``envrec inspect`` prints about the verdicts of recording ``prefix``: its ``summary``, the command
    that verifies it when it was not, or what is wrong with its verdict file. Never raises for a bad file.

    Args:
        directory: the recording's folder.
        prefix: its file prefix.
        command_dir: the folder as the user named it (for the command).
        several: the folder holds several recordings (the command names ``--prefix``).
        recorded: the episodes the recording holds now.
    """
    try:
        vf = read_verdicts(directory, prefix)
    except (TraceError, OSError) as exc:
        return f"verdict file unreadable, not shown: {clean(str(exc), 300)}"
    if vf is None:
        return f"not verified: {verify_command(command_dir, prefix if several else None)}"
    return summary(vf, recorded)
