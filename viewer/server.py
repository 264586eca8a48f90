"""The viewer's HTTP server: pages and scripts from the package, JSON from the catalog, files with Range.

Bound to 127.0.0.1 by default. Only files inside the folder are served:
a path with ``..``, an encoded slash or backslash, or one whose real path
(symlinks followed) leaves the folder is answered 404, as is anything not a
regular file. Requests whose ``Host`` is not the address served are refused
(403), so a web page elsewhere cannot read recordings through DNS rebinding.
Byte ranges (``Range: bytes=a-b``, ``a-``, ``-n``) are answered 206, which
browsers need to seek in an MP4.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import os
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote

from .catalog import Catalog, NotFound

__all__ = ["ViewerServer"]

logger = logging.getLogger(__name__)

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
PAGES = {"/": "index.html", "/index.html": "index.html", "/episode": "episode.html"}
CHUNK = 1 << 16
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")

mimetypes.add_type("application/x-asciicast", ".cast")
mimetypes.add_type("text/javascript", ".js")


class ViewerServer(ThreadingHTTPServer):
    """Serves the viewer for ``root`` on ``host:port`` (port 0: any free port; see ``url``)."""

    daemon_threads = True

    def __init__(self, root: str | os.PathLike, host: str = "127.0.0.1", port: int = 0) -> None:
        self.catalog = Catalog(os.fspath(root))
        self.root = self.catalog.root
        super().__init__((host, port), _Handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"

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


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        if not self._host_allowed():
            self._error(HTTPStatus.FORBIDDEN, "this server answers only requests addressed to it")
            return
        raw_path, _, query = self.path.partition("?")
        try:
            if raw_path in PAGES:
                self._send_file(os.path.join(STATIC_DIR, PAGES[raw_path]), head, cache=False)
            elif raw_path.startswith("/static/"):
                name = raw_path[len("/static/"):]
                if name not in _static_names():
                    raise NotFound(raw_path)
                self._send_file(os.path.join(STATIC_DIR, name), head, cache=False)
            elif raw_path == "/api/index":
                self._send_json(self.server.catalog.index(), head)
            elif raw_path == "/api/episode":
                self._send_json(self._episode(parse_qs(query)), head)
            elif raw_path.startswith("/files/"):
                self._send_file(self._inside_root(raw_path[len("/files/"):]), head, cache=True)
            else:
                raise NotFound(raw_path)
        except NotFound as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except ValueError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser moved on (seeking a video cancels requests)

    def _host_allowed(self) -> bool:
        host = (self.headers.get("Host") or "").lower()
        addr, port = str(self.server.server_address[0]), self.server.server_address[1]
        allowed = {f"{addr}:{port}", f"localhost:{port}"} if addr in ("127.0.0.1", "::1", "localhost") else None
        return allowed is None or host in allowed

    def _episode(self, q: dict[str, list[str]]) -> dict[str, Any]:
        try:
            recording, episode = q["recording"][0], int(q["episode"][0])
            width = int(q.get("width", ["800"])[0])
            dims = [int(d) for d in q["obs"][0].split(",") if d.strip()] if "obs" in q else None
        except (KeyError, ValueError):
            raise ValueError("expected recording=NAME&episode=N[&width=PX][&obs=I,J,...]") from None
        return self.server.catalog.episode(recording, episode, width, dims)

    def _inside_root(self, encoded: str) -> str:
        """The file a /files/ path names, or NotFound for anything that could leave the folder."""
        if re.search(r"%(2f|5c|00)", encoded, re.IGNORECASE) or "\\" in encoded:
            raise NotFound("encoded separators are not served")
        rel = unquote(encoded)
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise NotFound("not a path inside the folder")
        real = os.path.realpath(os.path.join(self.server.root, *parts))
        if not real.startswith(self.server.root + os.sep) or not os.path.isfile(real):
            raise NotFound("not a file inside the folder")
        return real

    # -- responses ---------------------------------------------------------------
    def _send_json(self, doc: Any, head: bool) -> None:
        body = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str) -> None:
        body = json.dumps({"error": message}).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_file(self, path: str, head: bool, cache: bool) -> None:
        try:
            f = open(path, "rb")
        except OSError:
            raise NotFound(os.path.basename(path)) from None
        with f:
            size = os.fstat(f.fileno()).st_size
            start, end, status = 0, size - 1, HTTPStatus.OK
            wanted = self.headers.get("Range")
            if wanted:
                span = _parse_range(wanted, size)
                if span is None:
                    self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start, end, status = span[0], span[1], HTTPStatus.PARTIAL_CONTENT
            self.send_response(status)
            self.send_header("Content-Type", mimetypes.guess_type(path)[0] or "application/octet-stream")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Cache-Control", "no-cache" if cache else "no-store")
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


def _static_names() -> set[str]:
    return set(os.listdir(STATIC_DIR))
