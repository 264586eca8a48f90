"""Clip names no other recorder can take: a clip's video file created exclusively when the clip starts.

Two processes writing clips into one folder (two scripts, two ``envrec record`` started in the same
second, the sub-processes of a vector env) must never overwrite each other's clips, nor write a
``.meta.json`` beside another process's video. So when a clip starts, the env process creates its video's
file, empty, with ``O_CREAT|O_EXCL`` (the encoder's ffmpeg or asciicast writer then fills it): the name is
this clip's. When ``NAME.mp4`` (or ``.cast``) is already a regular file, or ``NAME.meta.json`` is there,
the name is taken and the clip is written as ``NAME-2``, else ``NAME-3``, ... (logged once per clip). A
recorder alone in its folder keeps the names it was given (Gymnasium's ``rl-video-episode-N``). Only a
recorder told to replace its clips (``replace_clips``: ``envrec render`` re-filming an episode) writes over a
name, and says "Overwriting" when the file there is not a clip envrec wrote. Something
at the name that is not a regular file (a symlink, a FIFO) is left to the encoder as before: a symlink is
replaced, never written through; anything else breaks the clip, saying why.
"""

from __future__ import annotations

import logging
import os
import stat

from ..errors import RecordError
from ..formats.clip_meta import META_SUFFIX
from ..formats.ownfolder import OwnFolder
from ..formats.trace_format import check_prefix

__all__ = ["MAX_NAME_TRIES", "claim_clip_name", "warn_if_replacing_a_stranger"]

logger = logging.getLogger(__name__)

MAX_NAME_TRIES = 1000


def claim_clip_name(folder: OwnFolder, name: str, suffix: str) -> str:
    """The name clip ``name`` is written under in ``folder``: ``name`` itself, or ``name-K`` when it is taken.

    Args:
        folder: the clips' folder, opened once.
        name: the clip's name as asked.
        suffix: its video's suffix, ``.mp4`` or ``.cast``.

    Raises:
        RecordError: ``MAX_NAME_TRIES`` names taken in a row (a folder filled with this name's clips).
    """
    for k in range(1, MAX_NAME_TRIES + 1):
        candidate = name if k == 1 else check_prefix(f"{name}-{k}")
        if folder.lstat(candidate + META_SUFFIX) is not None:
            continue
        st = folder.lstat(candidate + suffix)
        if st is not None and stat.S_ISREG(st.st_mode):
            continue
        if st is not None:
            return candidate  # not a file: the encoder replaces a symlink, refuses the rest (as before)
        try:
            os.close(folder.open_fd(candidate + suffix, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue  # taken a moment ago by another process
        if k > 1:
            logger.info("envrec: clip name %s is taken in %s: this clip is %s", name, folder.path, candidate)
        return candidate
    raise RecordError(f"{MAX_NAME_TRIES} clips named {name}[-K] are in {folder.path} already: choose another name_prefix")


def warn_if_replacing_a_stranger(folder: OwnFolder, name: str, suffix: str) -> bool:
    """With ``replace_clips`` (``envrec render`` re-filming an episode): say "Overwriting" when the file at the
    clip's name is not a clip envrec wrote (no ``NAME.meta.json`` beside it), the one case where envrec replaces a
    file it did not write. Whether it warned.

    Args:
        folder: the clips' folder, opened once.
        name: the clip's name.
        suffix: its video's suffix, ``.mp4`` or ``.cast``.
    """
    if folder.lstat(name + suffix) is None or folder.lstat(name + META_SUFFIX) is not None:
        return False
    logger.warning("envrec: Overwriting existing video %s in %s: envrec did not write it (no %s beside it)",
                   name + suffix, folder.path, name + META_SUFFIX)
    return True
