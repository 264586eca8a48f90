"""What the viewer says about ``envrec verify``'s verdicts, and the command that renders an episode without a clip.

Each recording's ``PREFIX.verify.json`` is read with ``envrec.replay.verdicts.read_verdicts`` (inside the
recording's folder only, every field's type checked) and read again only when the file changes. A file
that is not a verdict file is listed in the index's ``damaged`` rows, and its recording shown as
unverified. Every string taken from it passes ``verdict_text.clean``; the page shows it as text.

The commands name the folder as the viewer was given it (joined with the recording's subfolder when
the recording lies deeper), shell-quoted, with ``--prefix P`` when that folder holds several recordings.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envrec.env_ids import id_module, is_module_name
from envrec.errors import TraceError
from envrec.export.sources import RecordingSource
from envrec.formats.inside import name_parts
from envrec.read.reader import Damaged
from envrec.replay.verdict_text import clean, detail, render_command, short, verify_command
from envrec.replay.verdicts import VERDICT_SUFFIX, VerdictFile, read_verdicts

__all__ = ["VerdictMarks", "env_module"]


def env_module(manifest: Any) -> str | None:
    """The module a recording's env id names (``module:Env-v0``, as ``envrec record --env`` records it), when it is a
    dotted name of identifiers; None otherwise. Only ever shown: a folder never names a module to import."""
    env_id = manifest.get("env_id") if isinstance(manifest, dict) else None
    module = id_module(env_id) if isinstance(env_id, str) else ""
    return module if len(module) <= 100 and is_module_name(module) else None


@dataclass(frozen=True)
class _Verified:
    verdicts: VerdictFile | None  # None: not verified, or its file unreadable (error)
    error: str | None
    folder: str  # the recording's folder, as the user would type it
    prefix: str | None  # for --prefix: set when the folder holds several recordings
    env_module: str | None = None  # the module its env id names (module:Id), said to the user, never imported


class VerdictMarks:
    """The verdicts of the recordings a catalog lists; not thread-safe (the catalog's lock guards it).

    Args:
        given: the viewer's folder as the user named it.
        root: the same folder, resolved (the catalog's root).
    """

    def __init__(self, given: str, root: str) -> None:
        self.given = given
        self.root = root
        self.imports: tuple[str, ...] = ()  # envrec view --import: the modules its commands name (the user's, never a folder's)
        self._files: dict[str, tuple[tuple[int, int, int], VerdictFile | None, str | None]] = {}
        self._recordings: dict[str, _Verified] = {}

    def scan(self, sources: Sequence[RecordingSource], damaged: list[Damaged]) -> None:
        """Read (or keep) the verdict file of every recording in ``sources``; unreadable ones join ``damaged``."""
        per_folder = Counter(src.directory for src in sources)
        recordings: dict[str, _Verified] = {}
        for src in sources:
            prefix = src.manifest.get("prefix")
            rel = os.path.relpath(src.directory, self.root)
            folder = self.given if rel == "." else os.path.join(self.given, rel)
            several = per_folder[src.directory] > 1
            if not isinstance(prefix, str):
                recordings[src.name] = _Verified(None, None, folder, None)
                continue
            vf, error = self._read(src.directory, prefix)
            if error is not None:
                damaged.append(Damaged(os.path.relpath(os.path.join(src.directory, prefix + VERDICT_SUFFIX), self.root), error))
            recordings[src.name] = _Verified(vf, error, folder, prefix if several else None, env_module(src.manifest))
        self._recordings = recordings  # swapped in whole: other threads read the one before meanwhile

    def _read(self, directory: str, prefix: str) -> tuple[VerdictFile | None, str | None]:
        """The verdict file (None when there is none) and what is wrong with it (None when nothing)."""
        name = prefix + VERDICT_SUFFIX
        try:
            name_parts(name, f"the verdict file of {prefix!r}")
            st = os.lstat(os.path.join(directory, name))
        except FileNotFoundError:
            return None, None
        except (TraceError, OSError) as exc:
            return None, clean(str(exc), 300)
        key, path = (st.st_ino, st.st_size, st.st_mtime_ns), os.path.join(directory, name)
        cached = self._files.get(path)
        if cached is None or cached[0] != key:
            try:
                cached = (key, read_verdicts(directory, prefix), None)
            except (TraceError, OSError) as exc:
                cached = (key, None, clean(str(exc), 300))
            self._files[path] = cached
        return cached[1], cached[2]

    def recording(self, name: str, episodes: int) -> dict[str, Any]:
        """A recording's verify column: ``verify`` (its counts, ``not verified`` or why not shown) and the
        ``verify_command`` when it was not verified."""
        r = self._recordings.get(name)
        if r is None or r.verdicts is None:
            unreadable = r is not None and r.error is not None
            return {"verify": "verdict file unreadable" if unreadable else "not verified",
                    "verify_command": verify_command(r.folder, r.prefix, self.imports) if r is not None and not unreadable else None}
        counts = Counter(v.status for v in r.verdicts.episodes.values())
        text = f"{counts['reproduced']} reproduced, {counts['diverged']} diverged, {counts['cannot_replay']} cannot replay"
        missing = episodes - len(r.verdicts.episodes)
        return {"verify": text + (f", {missing} without a verdict" if missing > 0 else ""), "verify_command": None}

    def episode(self, name: str, episode_id: int, full: bool = False, clip: bool = True) -> dict[str, Any]:
        """An episode's mark: ``verdict`` (``reproduced``, ``diverged at step 17``, ``cannot replay`` or None)
        and ``verdict_status``; with ``full``, also ``verdict_detail``, ``diverged_at``, ``verified_at``, the ``verify_command``
        when it has no verdict, and the ``render_command`` when it has no ``clip``."""
        r = self._recordings.get(name)
        v = r.verdicts.episodes.get(episode_id) if r is not None and r.verdicts is not None else None
        out: dict[str, Any] = {"verdict": short(v) if v else None, "verdict_status": v.status if v else None}
        if not full:
            return out
        out["verdict_detail"] = detail(v) if v else (f"verdict file unreadable: {r.error}" if r and r.error else None)
        out["diverged_at"] = v.step if v and v.status == "diverged" else None  # an observation index, as the plots' x
        out["verified_at"] = clean(r.verdicts.verified_at, 40) if v and r and r.verdicts else None
        unverified = r is not None and not v and not r.error  # verify refuses to overwrite an unreadable file
        known = type(episode_id) is int  # a folder's episode record may lack its id: no command names it then
        out["verify_command"] = verify_command(r.folder, r.prefix, self.imports) + f" --episodes {episode_id}" if r and unverified and known else None
        out["render_command"] = render_command(r.folder, episode_id, r.prefix, self.imports) if r and not clip and known else None
        needs = r.env_module if r is not None and r.env_module not in self.imports else None
        out["render_needs"] = (f"its env comes from your module {needs}: add --import {needs} if you trust it "
                               "(the viewer never imports it)") if needs and out["render_command"] else None
        return out
