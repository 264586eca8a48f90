"""An info too large for the ring: the step is recorded, the info's largest values marked in their place.

A record must fit in the ring (``ring_bytes``). A step's arrays always do
(the recorder checks that when it is made), but its info is whatever the env
returned: a frame or a replay buffer dropped into it can make the record
larger than the ring. A strange info must never break a step, so instead of
raising ``RecordTooLargeError`` out of ``step()`` the recorder records the
step with an info that fits (``info_that_fits``): the info's top-level values,
largest first, are replaced by an ``Unrepresentable`` saying how large they
were, until the rest fits; if no such info fits, the info is replaced by
``{"__envrec_error__": "..."}`` (as for an info that cannot be pickled).
The step's observation, action, reward and flags are kept whole. Each such
step is counted (``infos_too_large`` in ``stats()`` and the final manifest)
and the first one logged as a warning.
"""

from __future__ import annotations

import reprlib
from typing import Any

from ..formats.infos import Unrepresentable, pack_info

__all__ = ["MAX_MARKED", "info_that_fits"]

MAX_MARKED = 32  # top-level values replaced at most, largest first, before the whole info is replaced
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 120, 120


def _marker(value: Any, size: int, ring_bytes: int) -> Unrepresentable:
    t = type(value)
    try:
        text = _SHORT.repr(value)
    except Exception as exc:  # noqa: BLE001  (a broken __repr__ must not break the step)
        text = f"<repr failed: {exc!r}>"
    return Unrepresentable(f"{t.__module__}.{t.__qualname__}", f"<too large for the ring: {size} bytes, ring_bytes={ring_bytes}> {text}")


def info_that_fits(info: Any, packed: bytes, budget: int, ring_bytes: int) -> bytes:
    """Packed bytes of ``info`` with its largest values marked, at most ``budget`` bytes long.

    Args:
        info: the info as given (a dict, normally).
        packed: ``pack_info(info)``, too large.
        budget: the most bytes the info may take so that its record fits in the ring.
        ring_bytes: the ring's size, quoted in the markers.

    Returns:
        the packed info to record instead: with markers, or the error dict, or ``b""`` when not even that fits.
    """
    if isinstance(info, dict):
        smaller = dict(info)
        sizes = sorted(((len(pack_info({k: v})), k) for k, v in info.items()), key=lambda sk: sk[0], reverse=True)
        for size, key in sizes[:MAX_MARKED]:
            smaller[key] = _marker(info[key], size, ring_bytes)
            candidate = pack_info(smaller)
            if len(candidate) <= budget:
                return candidate
    error = pack_info({"__envrec_error__": f"an info of {len(packed)} bytes did not fit in the ring (ring_bytes={ring_bytes})"})
    return error if len(error) <= budget else b""
