"""``envrec view``: a local web page showing an episode's video next to its rewards, actions and observations.

``ViewerServer(folder).start()`` serves it from a thread (``.url``,
``.close()``); ``envrec view DIR`` from the command line. Everything the
page needs ships in ``static/``: it works offline.
"""

from __future__ import annotations

from .server import ViewerServer

__all__ = ["ViewerServer"]
