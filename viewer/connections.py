"""The viewer's connections: a deadline per request, bounded slots, and slow clients dropped first.

A connection is *waiting* while the server reads a request from it (its
request line and headers: the viewer takes no request body) and *busy* while
it answers. Two rules keep a few slow or idle clients from shutting the
viewer for everyone (it may listen on the network: ``--host 0.0.0.0``):

* **A deadline per request, not per byte.** The whole request line and
  headers must arrive within ``REQUEST_DEADLINE_S`` of the moment the server
  starts waiting for them (a keep-alive connection: of the end of its last
  answer). A client sending one byte a second is closed at the deadline as
  surely as one sending nothing (``DeadlineReader``).
* **Bounded slots, the slowest waiter dropped for a newcomer.** At most
  ``MAX_CONNECTIONS`` connections are held, and ``MAX_PER_CLIENT`` from one
  address. When a new connection finds no slot, the connection (of that
  address when it is the one at its bound) that has waited longest for its
  request is closed to make room, provided it waited at least
  ``DROP_AFTER_S``; else the newcomer is closed unanswered. A browser's
  requests arrive whole within milliseconds of connecting, so it is never
  the one dropped; sockets trickling headers, or idle keep-alives, are.

``Slots`` is thread-safe: the accepting thread calls ``admit``, each
connection's thread ``waiting``/``busy``/``release``.
"""

from __future__ import annotations

import io
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["DROP_AFTER_S", "MAX_CONNECTIONS", "MAX_PER_CLIENT", "REQUEST_DEADLINE_S", "DeadlineReader", "Slots"]

REQUEST_DEADLINE_S = 10.0  # a request line and its headers arrive within this, however they trickle
MAX_CONNECTIONS = 32  # held at once (threads): a browser opens ~6 per host
MAX_PER_CLIENT = 16  # held at once from one address: two browsers' worth
DROP_AFTER_S = 0.5  # a connection waiting this long for its request may be dropped to admit a new one


@dataclass
class _Conn:
    sock: Any
    client: str
    waiting_since: float | None  # time.monotonic() when it began waiting for a request; None while busy


class Slots:
    """The connections the server holds: admitted within the bounds, each waiting or busy.

    Args:
        max_connections: connections held at once.
        max_per_client: connections held at once from one address.
        drop_after_s: how long a connection must have waited for its request before a newcomer may replace it.
    """

    def __init__(self, max_connections: int = MAX_CONNECTIONS, max_per_client: int = MAX_PER_CLIENT,
                 drop_after_s: float = DROP_AFTER_S) -> None:
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self.drop_after_s = drop_after_s
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}  # id(socket) -> its state

    def admit(self, sock: Any, client: str) -> tuple[bool, int]:
        """Take a slot for ``sock`` from ``client`` (dropping the longest waiter when the bounds are reached);
        (admitted, connections dropped to admit it)."""
        with self._lock:
            dropped = 0
            mine = [c for c in self._conns.values() if c.client == client]
            if len(mine) >= self.max_per_client:
                if not self._drop_longest_waiter(mine):
                    return False, dropped
                dropped += 1
            if len(self._conns) >= self.max_connections:
                if not self._drop_longest_waiter(list(self._conns.values())):
                    return False, dropped
                dropped += 1
            self._conns[id(sock)] = _Conn(sock, client, time.monotonic())
            return True, dropped

    def _drop_longest_waiter(self, among: list[_Conn]) -> bool:
        """Close the connection of ``among`` that waited longest for its request, if it waited ``drop_after_s``."""
        now = time.monotonic()
        waiters = [c for c in among if c.waiting_since is not None and now - c.waiting_since >= self.drop_after_s]
        if not waiters:
            return False
        victim = min(waiters, key=lambda c: c.waiting_since)  # type: ignore[arg-type, return-value]
        del self._conns[id(victim.sock)]  # its thread's release() then finds nothing to free
        try:
            victim.sock.shutdown(socket.SHUT_RDWR)  # its thread's read returns at once and the thread ends
        except OSError:
            pass  # closed by its own thread meanwhile
        return True

    def waiting(self, sock: Any) -> None:
        """``sock``'s thread waits for its next request."""
        with self._lock:
            conn = self._conns.get(id(sock))
            if conn is not None:
                conn.waiting_since = time.monotonic()

    def busy(self, sock: Any) -> None:
        """``sock``'s request arrived whole: it is answered, never dropped for a newcomer."""
        with self._lock:
            conn = self._conns.get(id(sock))
            if conn is not None:
                conn.waiting_since = None

    def release(self, sock: Any) -> None:
        """``sock`` is closed: its slot is free (nothing when it was dropped already)."""
        with self._lock:
            conn = self._conns.get(id(sock))
            if conn is not None and conn.sock is sock:
                del self._conns[id(sock)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._conns)


class DeadlineReader(io.RawIOBase):
    """A connection's socket read against a deadline set per request (``start``), not per byte.

    Each read waits at most until the deadline; past it, ``TimeoutError`` (which ``BaseHTTPRequestHandler``
    answers by closing the connection). ``timed_out`` and ``received`` say whether it did, and
    how many bytes of the request had come by then.

    Args:
        sock: the connection's socket.
    """

    def __init__(self, sock: Any) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = time.monotonic() + REQUEST_DEADLINE_S
        self.received = 0  # bytes of the request read since ``start``
        self.timed_out = False  # its deadline passed before it came whole

    def start(self, seconds: float) -> None:
        """The next request must arrive within ``seconds`` from now."""
        self._deadline = time.monotonic() + seconds
        self.received = 0
        self.timed_out = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            self._sock.settimeout(left)
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            self.timed_out = True
            raise TimeoutError("the request did not arrive whole within its deadline") from None
        except OSError:
            return 0  # shut down (dropped for a newcomer) or reset: the end of the connection
        self.received += n
        return n
