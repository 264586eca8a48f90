"""What to install for one of envrec's extras, said in a way that works however envrec was installed.

``pip install 'envrec[atari]'`` works only where pip finds envrec on an index. envrec is also installed from
a clone (``pip install -e .``) or from a wheel file, and there the same words fail or fetch something else.
So a hint names the extra's own packages (``pip install 'ale-py>=0.9'`` works anywhere), then the extra as it
installs from where this envrec came from: the clone's folder, the wheel's file, or the index
(pip's ``direct_url.json``, PEP 610, says which).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from importlib import metadata

__all__ = ["extra_packages", "install_hint", "installed_from"]

DISTRIBUTION = "envrec"


def _distribution() -> metadata.Distribution | None:
    from importlib import metadata  # ~12 ms: imported only when a hint is made (worker processes never do)

    try:
        return metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def extra_packages(extra: str) -> list[str]:
    """The requirements extra ``extra`` adds, as this envrec's metadata declares them (``[]`` when unknown)."""
    dist = _distribution()
    marker = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    found = []
    for req in (dist.requires or []) if dist is not None else []:
        spec, _, env = req.partition(";")
        if marker.search(env):
            found.append(spec.strip().replace(" ", ""))
    return found


def installed_from() -> tuple[str, str]:
    """How this envrec was installed: ``("editable", folder)``, ``("folder", folder)``, ``("wheel", file)`` or
    ``("index", "")`` (from an index, or cannot be told)."""
    dist = _distribution()
    text = dist.read_text("direct_url.json") if dist is not None else None
    try:
        direct = json.loads(text) if text else {}
    except ValueError:
        direct = {}
    url = direct.get("url", "") if isinstance(direct, dict) else ""
    if not url.startswith("file://"):
        return "index", ""
    path = unquote(urlparse(url).path)
    if "dir_info" in direct:
        return ("editable" if direct["dir_info"].get("editable") else "folder"), path
    return ("wheel", path) if path.endswith(".whl") else ("index", "")


def install_hint(extra: str) -> str:
    """``pip install`` words for ``extra`` that work here: its packages, then the extra itself from where this
    envrec was installed (a clone's folder, a wheel's file, or the index).

    Args:
        extra: the name of one of envrec's extras (``atari``, ``sb3``, ``s3``, ...).
    """
    how, where = installed_from()
    own = {
        "editable": f"from its clone: pip install -e '{where}[{extra}]'",
        "folder": f"from its folder: pip install '{where}[{extra}]'",
        "wheel": f"from its wheel: pip install '{where}[{extra}]'",
    }.get(how, f"pip install 'envrec[{extra}]'")
    packages = extra_packages(extra)
    if not packages:
        return own.split(": ", 1)[-1]
    return f"pip install {' '.join(map(shlex.quote, packages))} (envrec's {extra} extra; {own})"
