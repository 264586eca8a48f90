"""The viewer's HTTP server: pages and scripts from the package, JSON from the catalog, clips with Range.

A folder may be a stranger's, so the server trusts nothing in it:

* ``/files/`` serves only the recorder's own clip types (``.mp4`` as
  ``video/mp4``, ``.cast`` as ``application/x-asciicast``: what the episode
  page plays), opened as ``envrec.formats.inside`` opens files (relative names,
  ``O_NOFOLLOW`` part by part: no ``..``, no symlink, regular files only).
  Anything else (an HTML or SVG file, a symlink out) is answered 404.
* Every response carries ``X-Content-Type-Options: nosniff`` and a
  Content-Security-Policy: the pages may run only the package's own script
  and reach only this server; JSON and files get ``default-src 'none';
  sandbox``, so even a browser told to render one runs nothing on this
  origin. ``Cross-Origin-Resource-Policy: same-origin`` keeps other sites
  from embedding them.
* Requests whose ``Host`` is not a name this server answers to are refused
  (403), whatever the bind address: the address bound, ``localhost`` and
  the loopback addresses when bound to one of them or to all addresses, and each ``allow_hosts`` name
  (``envrec view --allow-host``), so a web page elsewhere cannot read
  recordings through DNS rebinding.
* A request line and its headers must arrive whole within
  ``connections.REQUEST_DEADLINE_S`` (a deadline per request, not per byte),
  and an answer the client does not read times out after ``WRITE_TIMEOUT_S``.
  At most ``connections.MAX_CONNECTIONS`` connections are held
  (``MAX_PER_CLIENT`` from one address); a new one takes the slot of the one
  that has waited longest for its request, else it is closed unanswered
  (``envrec.viewer.connections``): slow clients cannot starve the others.

The JSON: ``/api/health`` (``{"ok": true}``, at once: no folder read), ``/api/index`` (each recording's summary and live state:
``Catalog.summary``), ``/api/episodes?recording=R&offset=0&limit=100&sort=-length``
and ``/api/clips?offset=&limit=&sort=`` (pages: ``Catalog.episodes``,
``Catalog.clips``), ``/api/episode?recording=R&episode=N`` (plot data). A bad
parameter is answered 400 with what it must be.

``/api/step`` (one step's values and info) and ``/api/observation.png`` (its
image observation, or with ``&leaf=K`` the image leaf ``K`` of a Dict/Tuple
one, a frame stack as a strip: ``step_view.image_leaves``) read only episodes the catalog lists, by recording name
and episode number: nothing in a query is a path.

Byte ranges (``Range: bytes=a-b``, ``a-``, ``-n``) are answered 206, which
browsers need to seek in an MP4. ``refused`` counts what each check refused.
"""

from __future__ import annotations

import collections
import io
import ipaddress
import json
import logging
import os
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote

from envrec.errors import ConfigError, TraceError
from envrec.formats.inside import open_inside

from .catalog import Catalog, NotFound
from .connections import REQUEST_DEADLINE_S, DeadlineReader, Slots
from .live import STALE_AFTER_S
from .step_view import image_leaves, parse_step_query

__all__ = ["CLIP_TYPES", "ViewerServer"]

logger = logging.getLogger(__name__)

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
PAGES = {"/": "index.html", "/index.html": "index.html", "/episode": "episode.html"}
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
CLIP_TYPES = {".mp4": "video/mp4", ".cast": "application/x-asciicast"}  # what the recorder writes and the page plays
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self'; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
DATA_CSP = "default-src 'none'; sandbox; frame-ancestors 'none'"
CHUNK = 1 << 16
WRITE_TIMEOUT_S = 20.0  # an answer (a chunk of a clip) the client does not read frees its thread this late
DEFAULT_PAGE = 100  # rows of a page of episodes or clips when the request does not say
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class ViewerServer(ThreadingHTTPServer):
    """Serves the viewer for ``root`` on ``host:port``.

    Args:
        root: the folder of recordings and clips (searched recursively).
        host: the address to bind (default 127.0.0.1: this machine only).
        port: the port (0: any free port; see ``url``).
        allow_hosts: more names the ``Host`` header may give (the machine's name when bound to 0.0.0.0).
        stale_after_s: seconds without a change after which a recording whose manifest was never finalized, and
            none of whose workers runs here, reads ``interrupted`` (``envrec.viewer.live``; default 30).

    Raises:
        ConfigError: ``stale_after_s`` is not a number of seconds > 0.
    """

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of connections is accepted (and judged by Slots) at once,
    # not left to the kernel's SYN retries (1 s, 3 s, ...) behind socketserver's default of 5

    def __init__(self, root: str | os.PathLike, host: str = "127.0.0.1", port: int = 0,
                 allow_hosts: list[str] | tuple[str, ...] = (), stale_after_s: float = STALE_AFTER_S) -> None:
        if not isinstance(stale_after_s, int | float) or isinstance(stale_after_s, bool) or not stale_after_s > 0:
            raise ConfigError(f"stale_after_s must be a number of seconds > 0, not {stale_after_s!r}")
        self.catalog = Catalog(os.fspath(root), float(stale_after_s))
        self.root = self.catalog.root
        super().__init__((host, port), _Handler)
        self.host_names = _host_names(host, str(self.server_address[0]), allow_hosts)
        self.refused: collections.Counter[str] = collections.Counter()  # check -> requests it refused
        self._refused_lock = threading.Lock()
        self.slots = Slots()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{_bracketed(str(host))}:{port}/"

    def start(self) -> ViewerServer:
        """Serve from a background thread (tests, notebooks); ``close()`` stops it."""
        self._thread = threading.Thread(target=self.serve_forever, name="envrec-viewer", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(5)
        self.server_close()

    def refuse(self, check: str) -> None:
        """Count a request (or connection) that ``check`` refused."""
        with self._refused_lock:
            self.refused[check] += 1
        logger.info("envrec view: refused (%s)", check)

    def process_request(self, request: Any, client_address: Any) -> None:
        admitted, dropped = self.slots.admit(request, str(client_address[0]))
        for _ in range(dropped):
            self.refuse("slow")  # waited longest for its request: closed for a newcomer
        if not admitted:
            self.refuse("connections")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release(request)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _host_names(given: str, bound: str, allow: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The names (lower case, IPv6 bracketed) a request's ``Host`` may give, without the port."""
    names = {_bracketed(given.lower()), _bracketed(bound.lower()), *(_bracketed(a.lower()) for a in allow)}
    try:
        address = ipaddress.ip_address(bound)
        loopback = address.is_loopback or address.is_unspecified  # 0.0.0.0 is reached as localhost too
    except ValueError:
        loopback = False
    if loopback or given.lower() == "localhost":
        names |= {"localhost", "127.0.0.1", "[::1]"}
    return frozenset(names)


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"
    timeout = WRITE_TIMEOUT_S
    deadline_s = REQUEST_DEADLINE_S

    def setup(self) -> None:
        super().setup()
        self._reader = DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.start(self.deadline_s)
        self.server.slots.waiting(self.connection)
        try:
            super().handle_one_request()  # answers a read or write that timed out by closing the connection
        except OSError:  # dropped for a newcomer (its socket shut down) or reset while answered
            self.close_connection = True
        if self._reader.timed_out and self._reader.received:
            self.server.refuse("deadline")  # part of a request came, not all of it in time

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        # its request line and headers came whole
        self.server.slots.busy(self.connection)
        self.connection.settimeout(self.timeout)  # the answer's writes
        return True

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        if not self._host_allowed():
            self.server.refuse("host")
            self._error(HTTPStatus.FORBIDDEN, "this server answers only requests addressed to it")
            return
        raw_path, _, query = self.path.partition("?")
        try:
            if raw_path in PAGES:
                self._send_file(os.path.join(STATIC_DIR, PAGES[raw_path]), head, STATIC_TYPES[".html"], PAGE_CSP)
            elif raw_path.startswith("/static/"):
                name = raw_path[len("/static/"):]
                if name not in _static_names():
                    raise NotFound(raw_path)
                kind = STATIC_TYPES.get(os.path.splitext(name)[1], "application/octet-stream")
                self._send_file(os.path.join(STATIC_DIR, name), head, kind, PAGE_CSP)
            elif raw_path == "/api/health":  # answers at once, whatever the catalog is reading
                self._send_json({"ok": True, "root": self.server.root}, head)
            elif raw_path == "/api/index":
                self._send_json(self.server.catalog.summary(), head)
            elif raw_path == "/api/episodes":
                q = parse_qs(query)
                self._send_json(self.server.catalog.episodes(_one(q, "recording"), *_paging(q)), head)
            elif raw_path == "/api/clips":
                self._send_json(self.server.catalog.clips(*_paging(parse_qs(query))), head)
            elif raw_path == "/api/episode":
                self._send_json(self._episode(parse_qs(query)), head)
            elif raw_path == "/api/step":
                self._send_json(self._step(parse_qs(query)), head)
            elif raw_path == "/api/observation.png":
                self._send_png(self._observation_png(parse_qs(query)), head)
            elif raw_path.startswith("/files/"):
                self._send_clip(raw_path[len("/files/"):], head)
            else:
                raise NotFound(raw_path)
        except NotFound as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except TraceError as exc:  # the episode's batch is damaged: say so, the rest of the viewer works
            self._error(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc))
        except ValueError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser moved on (seeking a video cancels requests)

    def _host_allowed(self) -> bool:
        host = (self.headers.get("Host") or "").strip().lower()
        port = str(self.server.server_address[1])
        name, sep, given_port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
        if not sep:
            name, given_port = host, "80"
        return given_port == port and name in self.server.host_names

    def _episode(self, q: dict[str, list[str]]) -> dict[str, Any]:
        try:
            recording, episode = q["recording"][0], int(q["episode"][0])
            width = int(q.get("width", ["800"])[0])
            dims = [int(d) for d in q["obs"][0].split(",") if d.strip()] if "obs" in q else None
            first_step = int(q["first_step"][0]) if "first_step" in q else None
        except (KeyError, ValueError):
            raise ValueError("expected recording=NAME&episode=N[&width=PX][&obs=I,J,...][&first_step=K]") from None
        return self.server.catalog.episode(recording, episode, width, dims, first_step)

    def _step(self, q: dict[str, list[str]]) -> dict[str, Any]:
        """One step's values and info (``envrec.viewer.episode_read``: only the part that holds it is read)."""
        recording, episode, step, first_step, dims = parse_step_query(q)
        reader, _ = self.server.catalog.open(recording, episode, first_step)
        try:
            return reader.step(step, dims or [])
        except LookupError as exc:
            raise NotFound(str(exc)) from None

    def _observation_png(self, q: dict[str, list[str]]) -> bytes:
        """One step's image observation (``leaf=K``: its image leaf ``K``, default the first) as a PNG; NotFound when
        the recording's observations have no such image."""
        recording, episode, step, first_step, _ = parse_step_query(q)
        try:
            leaf = int(q["leaf"][0]) if "leaf" in q else None
        except ValueError:
            raise ValueError("expected leaf=K (an integer: the observation leaf shown as an image)") from None
        reader, manifest = self.server.catalog.open(recording, episode, first_step)
        images = image_leaves(manifest.get("observation_space"))
        image = next((i for i in images if leaf is None or i["leaf"] == leaf), None)
        if image is None:
            if images:
                raise NotFound(f"observation leaf {leaf} of {recording!r} is not an image: its image leaves are "
                               f"{[i['leaf'] for i in images]}")
            raise NotFound(f"the observations of {recording!r} are not images and hold none (an image: a uint8 Box HxW, "
                           "HxWxC with C in 1, 3, 4, or a stack of them, KxHxW or KxHxWxC)")
        try:
            return reader.frame(step, image)
        except LookupError as exc:
            raise NotFound(str(exc)) from None

    def _send_clip(self, encoded: str, head: bool) -> None:
        """A clip the page plays, by its path under the root; NotFound for anything else."""
        if re.search(r"%(2f|5c|00)", encoded, re.IGNORECASE) or "\\" in encoded:
            self.server.refuse("path")
            raise NotFound("encoded separators are not served")
        rel = unquote(encoded)
        kind = CLIP_TYPES.get(os.path.splitext(rel)[1].lower())
        if kind is None:
            self.server.refuse("type")
            raise NotFound(f"only clips ({', '.join(CLIP_TYPES)}) are served from the folder")
        try:
            f = open_inside(self.server.root, rel, "/files/")
        except FileNotFoundError:
            raise NotFound("no such file in the folder") from None
        except TraceError:
            self.server.refuse("path")
            raise NotFound("not a file inside the folder") from None
        with f:
            self._send_body(f, head, kind, DATA_CSP, "no-cache")

    # -- responses ---------------------------------------------------------------
    def _security_headers(self, csp: str) -> None:
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", csp)
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Referrer-Policy", "no-referrer")

    def _send_json(self, doc: Any, head: bool) -> None:
        body = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self._security_headers(DATA_CSP)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _send_png(self, body: bytes, head: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "private, max-age=60")  # a recorded step does not change
        self._security_headers(DATA_CSP)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str) -> None:
        body = json.dumps({"error": message}).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self._security_headers(DATA_CSP)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_file(self, path: str, head: bool, kind: str, csp: str) -> None:
        """One of the package's own files."""
        try:
            f = open(path, "rb")
        except OSError:
            raise NotFound(os.path.basename(path)) from None
        with f:
            self._send_body(f, head, kind, csp, "no-store")

    def _send_body(self, f: Any, head: bool, kind: str, csp: str, cache: str) -> None:
        size = os.fstat(f.fileno()).st_size
        start, end, status = 0, size - 1, HTTPStatus.OK
        wanted = self.headers.get("Range")
        if wanted:
            span = _parse_range(wanted, size)
            if span is None:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self._security_headers(DATA_CSP)
                self.end_headers()
                return
            start, end, status = span[0], span[1], HTTPStatus.PARTIAL_CONTENT
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", cache)
        self._security_headers(csp)
        if status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if head:
            return
        f.seek(start)
        left = end - start + 1
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                break
            self.wfile.write(chunk)
            left -= len(chunk)


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single ``bytes=`` range, None when it cannot be satisfied."""
    m = _RANGE.match(header.strip())
    if m is None or (not m.group(1) and not m.group(2)):
        return None
    if not m.group(1):  # the last n bytes
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n > 0 and size > 0 else None
    start = int(m.group(1))
    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
    return (start, end) if start < size and start <= end else None


def _one(q: dict[str, list[str]], name: str) -> str | None:
    """A query parameter given at most once; ``ConfigError`` (400) when repeated."""
    values = q.get(name)
    if values is None:
        return None
    if len(values) > 1:
        raise ConfigError(f"{name} is given {len(values)} times: give it once")
    return values[0]


def _paging(q: dict[str, list[str]]) -> tuple[int, int, str | None]:
    """``offset``, ``limit`` and ``sort`` of a page request (``offset=0&limit=100`` when not given)."""
    out = []
    for name, default in (("offset", 0), ("limit", DEFAULT_PAGE)):
        text = _one(q, name)
        if text is not None and not re.fullmatch(r"[0-9]{1,9}", text.strip()):
            raise ConfigError(f"{name} must be a whole number >= 0, not {text[:40]!r}")
        out.append(default if text is None else int(text))
    return out[0], out[1], _one(q, "sort")


def _static_names() -> set[str]:
    return set(os.listdir(STATIC_DIR))
