"""The viewer under slow clients: a deadline per request, and sockets trickling headers cannot starve a browser.

The tricklers connect from 127.0.0.2, the browser from 127.0.0.1: two clients, as a machine on the network and
the user's own browser are when the viewer listens on ``--host 0.0.0.0``. Loopback only.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time

import pytest

from envrec.viewer import ViewerServer
from envrec.viewer import server as server_module
from envrec.viewer.connections import Slots

from .support.episodes import record_cartpole

pytestmark = [pytest.mark.timeout(60), pytest.mark.xdist_group("serial")]  # answers timed against deadlines

SLOW_SOCKETS = 32
DEADLINE_S = 2.0  # the server's request deadline in these tests
TRICKLER_ADDRESS = "127.0.0.2"  # another client than the browser's 127.0.0.1 (all of 127/8 is this machine's on Linux)
TRICKLE = b"GET /api/index HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 64 + b"\r\n\r\n"  # 100 s at a byte a second


def _closed_by_peer(s: socket.socket) -> bool:
    readable, _, _ = select.select([s], [], [], 0)
    if not readable:
        return False
    try:
        return s.recv(1024) == b""
    except OSError:
        return True


class _Tricklers:
    """``SLOW_SOCKETS`` sockets each sending one byte of a request a second; one closed by the server is
    replaced by a new one when ``reconnect`` (a client that keeps trying). Records how long each lived."""

    def __init__(self, address, reconnect: bool) -> None:
        self.address = address
        self.reconnect = reconnect
        self.opened = 0
        self.socks: list[tuple[socket.socket, float, int]] = []  # (socket, opened at, bytes sent)
        self.lived: list[float] = []  # seconds from connect to the server's close, of each closed one
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> None:
        s = socket.create_connection(self.address, timeout=5, source_address=(TRICKLER_ADDRESS, 0))
        self.socks.append((s, time.monotonic(), 0))

    def _run(self) -> None:
        while not self.stop.is_set():
            kept = []
            for s, opened, sent in self.socks:
                if _closed_by_peer(s):
                    self.lived.append(time.monotonic() - opened)
                    s.close()
                    continue
                try:
                    s.send(TRICKLE[sent:sent + 1])
                except OSError:
                    self.lived.append(time.monotonic() - opened)
                    s.close()
                    continue
                kept.append((s, opened, sent + 1))
            self.socks = kept
            while (self.reconnect or self.opened < SLOW_SOCKETS) and len(self.socks) < SLOW_SOCKETS and not self.stop.is_set():
                self._open()
                self.opened += 1
            self.stop.wait(1.0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        for s, _, _ in self.socks:
            s.close()


@pytest.mark.variants
@pytest.mark.parametrize("reconnect", [False, True], ids=["once", "reconnecting"])
def test_sockets_trickling_headers_are_closed_at_the_deadline_and_a_browser_is_served_meanwhile(tmp_path, monkeypatch, reconnect):
    monkeypatch.setattr(server_module._Handler, "deadline_s", DEADLINE_S)
    record_cartpole(tmp_path, 1)
    server = ViewerServer(tmp_path)
    server.slots = Slots(max_connections=24, max_per_client=16)
    server.start()
    tricklers = _Tricklers(server.server_address[:2], reconnect)
    took = []
    try:
        tricklers.thread.start()
        time.sleep(1.5)  # every slot taken by a trickler
        host, port = server.server_address[:2]
        end = time.monotonic() + 2.5 * DEADLINE_S
        while time.monotonic() < end:
            t0 = time.monotonic()
            conn = http.client.HTTPConnection(host, port, timeout=10)
            for path in ("/api/index", "/static/style.css"):  # two requests on one keep-alive connection
                conn.request("GET", path)
                r = conn.getresponse()
                r.read()
                assert r.status == 200, (path, r.status)
            conn.close()
            took.append(time.monotonic() - t0)
            time.sleep(0.2)
    finally:
        tricklers.close()
        server.close()
    assert len(took) >= 10 and max(took) < 1.5, took  # every request answered, none waited for a trickler's slot
    assert tricklers.lived, "no trickling socket was closed"
    assert max(tricklers.lived) < DEADLINE_S + 1.5, max(tricklers.lived)  # none outlived the deadline
    assert server.refused["connections"] >= SLOW_SOCKETS - 16  # beyond the tricklers' bound: closed unanswered
    if reconnect:  # each newcomer takes the slot of the trickler that waited longest
        assert server.refused["slow"] >= SLOW_SOCKETS
    else:  # the 16 admitted are closed at the deadline
        assert server.refused["deadline"] == 16 and len(tricklers.lived) == SLOW_SOCKETS
    assert len(server.slots) == 0  # every slot freed


def test_the_slot_of_the_longest_waiter_goes_to_a_newcomer_and_a_busy_one_is_never_dropped():
    slots = Slots(max_connections=2, max_per_client=2, drop_after_s=0.0)
    a, b, c, d = (socket.socket() for _ in range(4))
    try:
        assert slots.admit(a, "x") == (True, 0)
        assert slots.admit(b, "x") == (True, 0)
        slots.busy(a)
        assert slots.admit(c, "x") == (True, 1)  # b, waiting, dropped; a, busy, kept
        slots.busy(c)
        assert slots.admit(d, "y") == (False, 0)  # both busy: the newcomer is refused
        slots.release(a)
        assert slots.admit(d, "y") == (True, 0) and len(slots) == 2
    finally:
        for s in (a, b, c, d):
            s.close()
