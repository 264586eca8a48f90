"""Parsing a JSON document a folder holds, within bounds: strict, not too deep, not too costly.

A folder may come from anywhere, and JSON is parsed before anything in it can
be checked (``envrec.formats.trace_checks`` checks the fields after). So
``parse_json`` parses strict JSON only (no NaN or infinity, as envrec writes
it), no deeper than ``MAX_JSON_DEPTH`` levels (deeper input would exhaust
Python's recursion in the decoders), and only when what parsing it would
cost in memory stays under ``MAX_PARSED_JSON_BYTES``: ``json_cost`` counts
it on the bytes, before ``json.loads`` builds anything, and ``JsonBudget``
counts a ``.json.zst`` piece by piece while it is decompressed, so a few MiB
of ``[],[],...`` (gigabytes of Python lists) stop early. Each refusal is a
``TraceError`` naming the file.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import TraceError

__all__ = ["CONTAINER_COST", "MAX_JSON_DEPTH", "MAX_PARSED_JSON_BYTES", "VALUE_COST", "JsonBudget", "json_cost", "parse_json"]

MAX_JSON_DEPTH = 200  # levels; envrec's own documents nest < 10 plus the infos' own nesting
# What json.loads may spend on one document, estimated by json_cost: an honest batch costs about 6 to 25 times
# its text (an Atari info ~6x; an empty info per step, "{}, ", 25x), so this admits 40 to 170 MB of text,
# far above a batch written with the default batch_bytes (5 MB)
MAX_PARSED_JSON_BYTES = 1 << 30
CONTAINER_COST = 64  # bytes of an empty list or dict (56, 64) and its slot in the container holding it
VALUE_COST = 32  # a value's slot and object (a float is 24 + 8; counted per ',' and per '"', two per string)


def json_cost(data: bytes | memoryview) -> int:
    """An upper estimate of the bytes ``json.loads`` spends on ``data`` (its text, plus ``CONTAINER_COST`` per
    ``[`` or ``{`` and ``VALUE_COST`` per ``,`` or ``"``): counted in C (four ``bytes.count`` passes, 2-10 ms per MB beside ``json.loads``' ~50).

    Args:
        data: JSON text, whole or a piece of it (costs of pieces add up).
    """
    b = data if isinstance(data, bytes) else bytes(data)
    containers = b.count(b"[") + b.count(b"{")
    return len(b) + CONTAINER_COST * containers + VALUE_COST * (b.count(b",") + b.count(b'"'))


class JsonBudget:
    """The running ``json_cost`` of a document read in pieces (a ``.json.zst`` as it is decompressed):
    ``TraceError`` naming the file as soon as it exceeds ``MAX_PARSED_JSON_BYTES``, before the rest is read.

    Args:
        what: the file, for messages.
        limit: the budget (default ``MAX_PARSED_JSON_BYTES``).
    """

    def __init__(self, what: str, limit: int | None = None) -> None:
        self.what, self.cost = what, 0
        self.limit = MAX_PARSED_JSON_BYTES if limit is None else limit

    def __call__(self, piece: bytes | memoryview) -> None:
        self.cost += json_cost(piece)
        if self.cost > self.limit:
            raise TraceError(f"{self.what}: parsing it would cost more than {self.limit >> 20} MiB of memory "
                             f"(counted {self.cost >> 20} MiB so far): not a document envrec writes")


def parse_json(data: bytes, what: str) -> Any:
    """``data`` parsed as strict JSON (no NaN or infinity, as envrec writes it), no deeper than ``MAX_JSON_DEPTH``,
    costing at most ``MAX_PARSED_JSON_BYTES`` (``json_cost``, counted before parsing); ``TraceError`` naming
    ``what`` otherwise (a ``MemoryError`` while parsing too).

    Args:
        data: the file's bytes.
        what: the file, for messages.
    """
    JsonBudget(what)(data)
    try:
        doc = json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except MemoryError:
        raise TraceError(f"{what}: too large to parse in the memory left (not a document envrec writes)") from None
    except RecursionError:
        raise TraceError(f"{what}: nested too deep to be envrec's") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise TraceError(f"{what}: not JSON ({exc})") from None
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise TraceError(f"{what}: nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return doc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON (envrec writes none)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number (envrec writes none)")
    return value
