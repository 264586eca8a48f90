"""The local record of what a shipper shipped: ``.RECORDER.shipped`` beside the recording.

One line per unit whose commit document is in the store (a batch's key
``epNNNNNNNNN.pPPPPPP``, a clip's ``clip.NAME``), appended by the shipper
after the commit was written, fsynced. Disk budgets read it: a batch or clip
not in the ledger is not evicted while shipping is on (``max_bytes`` waits
for the shipper). A shipper killed between its commit and the line leaves
the unit unlisted: its successor finds the commit in the store and appends
it, so the ledger only ever lags behind the store, never leads it.
"""

from __future__ import annotations

import os

from .ownfolder import OwnFolder

__all__ = ["append_ledger", "ledger_name", "read_ledger"]

MAX_LEDGER_BYTES = 64 << 20  # ~2 million units; a bigger file is not a ledger


def ledger_name(recorder: str) -> str:
    return f".{recorder}.shipped"


def read_ledger(own: OwnFolder, recorder: str) -> set[str]:
    """The keys the ledger of ``recorder`` lists (a last line without its newline, being written, left out)."""
    try:
        f = own.open_read(ledger_name(recorder))
    except FileNotFoundError:
        return set()
    with f:
        data = f.read(MAX_LEDGER_BYTES)
    lines = data.decode("utf-8", "replace").split("\n")
    return {line for line in lines[:-1] if line}


def append_ledger(own: OwnFolder, recorder: str, keys: list[str]) -> None:
    """Add ``keys`` to the ledger, durably (one write, fsynced)."""
    if not keys:
        return
    fd = own.open_fd(ledger_name(recorder), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, "".join(f"{k}\n" for k in keys).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
