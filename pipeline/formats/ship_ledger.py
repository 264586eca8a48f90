"""The local record of what a shipper shipped: ``.RECORDER.shipped-HASH`` beside the recording, one per
store (``HASH``: of the store's URL, so shipping one folder to two stores keeps two ledgers).

One line per unit whose commit document is in the store (a batch's key
``epNNNNNNNNN.pPPPPPP``, a clip's ``clip.NAME``), appended by the shipper
after the commit was written, fsynced. Disk budgets read it: a batch or clip
not in the ledger is not evicted while shipping is on (``max_bytes`` waits
for the shipper). A shipper killed between its commit and the line leaves
the unit unlisted: its successor finds the commit in the store and appends
it, so the ledger only ever lags behind the store, never leads it.
"""

from __future__ import annotations

import hashlib
import os

from ..errors import TraceError
from .inside import open_inside
from .ownfolder import OwnFolder

__all__ = ["append_ledger", "ledger_name", "read_ledger"]

MAX_LEDGER_BYTES = 64 << 20  # ~2 million units; a bigger file is not a ledger


def ledger_name(recorder: str, url: str) -> str:
    """The ledger of ``recorder`` shipped to ``url`` (the store's URL as ``Store.url`` has it)."""
    return f".{recorder}.shipped-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def read_ledger(folder: str, name: str) -> set[str]:
    """The keys the ledger ``name`` in ``folder`` lists (a last line without its newline, being written, left
    out); none when it is missing or not a regular file inside the folder."""
    try:
        f = open_inside(folder, name, name)
    except (FileNotFoundError, TraceError):
        return set()
    with f:
        data = f.read(MAX_LEDGER_BYTES)
    lines = data.decode("utf-8", "replace").split("\n")
    return {line for line in lines[:-1] if line}


def append_ledger(own: OwnFolder, name: str, keys: list[str]) -> None:
    """Add ``keys`` to the ledger ``name``, durably (one write, fsynced)."""
    if not keys:
        return
    fd = own.open_fd(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, "".join(f"{k}\n" for k in keys).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
