"""Text frames (``render_mode="ansi"``) of one clip as an asciicast v2 file.

Events go to a temporary file as they come; the header, whose terminal size
is known only once every frame was seen, is written first when the clip
ends, followed by the events, and the file is moved into place.
"""

from __future__ import annotations

import json
import time

from envrec.formats.ownfolder import OwnFolder

__all__ = ["CastWriter"]

ANSI_CLEAR = "\x1b[2J\x1b[1;1H"  # each frame replaces the screen


class CastWriter:
    """One asciicast being written to ``name`` in ``folder`` (every file relative to the folder opened once)."""

    def __init__(self, folder: OwnFolder, name: str, title: str, fps: float) -> None:
        self.folder, self.name, self.title, self.fps = folder, name, title, fps
        self.size = (0, 0)  # columns, rows
        self.frames = 0
        self._events_name = folder.tmp_name(name + ".events")
        folder.unlink(self._events_name)  # one of this pid's name left by an earlier process
        self._events = folder.open_new(self._events_name, "w+")

    def add(self, text: str) -> None:
        """One frame's text, shown 1/fps after the previous one."""
        lines = text.split("\n")
        self.size = (max(self.size[0], max(len(line) for line in lines) + 2), max(self.size[1], len(lines)))
        event = [round(self.frames / self.fps, 6), "o", ANSI_CLEAR + text.replace("\n", "\r\n")]
        self._events.write(json.dumps(event) + "\n")
        self.frames += 1

    def finish(self) -> None:
        """Write the cast (none when it has no frame) and drop the temporary events."""
        events = self._events
        events.flush()
        if self.frames:
            header = {
                "version": 2,
                "width": self.size[0],
                "height": self.size[1],
                "timestamp": int(time.time()),
                "title": self.title,
                "env": {"TERM": "xterm-256color"},
            }
            tmp = self.folder.tmp_name(self.name)
            self.folder.unlink(tmp)
            with self.folder.open_new(tmp, "w") as out:
                out.write(json.dumps(header) + "\n")
                events.seek(0)
                while chunk := events.read(1 << 20):
                    out.write(chunk)
                self.folder.commit(out, tmp, self.name)
        events.close()
        self.folder.unlink(self._events_name)
