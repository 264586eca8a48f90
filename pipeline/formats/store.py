"""Where shipped recordings go: a URL opened through fsspec, with create-only writes.

``Store(url, storage_options)`` is any fsspec URL (``s3://``, ``gs://``,
``az://``, ``file://``, or a plain path of a mounted file system); endpoint and
credentials come from ``storage_options`` or the store's standard
environment and configuration chains (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``~/.aws/config``, ...). A URL that carries
credentials itself (``s3://KEY:SECRET@bucket``) is refused: they would end
up in logs and error messages. Messages name the URL as ``redact`` prints it.

``put_once(name, data)`` creates an object only when none is at its name:
S3's ``If-None-Match: *`` through s3fs's ``"xb"`` mode (GCS and Azure
through theirs), and on a local file system a complete temporary file
hard-linked to the name (``link`` fails when the name exists, so a reader
never sees a partial object, and a shipper killed mid-write leaves only its
own temporary file ``.NAME.HOST.PID-THREAD.shiptmp``, which the next shipper
of that recorder on the host removes). It returns False when the object
already existed.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigError
from ..extras import install_hint

__all__ = ["Store", "StoreUnavailable", "is_transient", "is_url", "redact", "store_url"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
TMP_SUFFIX = ".shiptmp"
# a request to S3 that hangs (a server gone mid-request) fails after this; the shipper's passes retry it
S3_CLIENT_CONFIG = {"connect_timeout": 10, "read_timeout": 60, "retries": {"max_attempts": 3, "mode": "standard"}}


class StoreUnavailable(OSError):
    """The store did not answer (connection refused, timed out, 5xx): worth trying again later."""


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and bool(_SCHEME.match(path))


def store_url(url: str | os.PathLike) -> str:
    """The URL as envrec names a store: a URL without its trailing ``/``, a path (or ``file://`` URL) as an
    absolute path."""
    url = os.fspath(url)
    if isinstance(url, str) and url.startswith("file://"):
        url = url[len("file://"):] or "/"
    return url.rstrip("/") if is_url(url) else os.path.abspath(url)


def redact(url: str) -> str:
    """``url`` with any user name, password or query string replaced by ``***``."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` from a store call means "not now" (network, timeout, throttling, a 5xx) rather than
    "never" (no such bucket, access denied, a bad name)."""
    if isinstance(exc, (StoreUnavailable, ConnectionError, TimeoutError, socket.gaierror)):
        return True
    if isinstance(exc, (FileNotFoundError, PermissionError, FileExistsError, IsADirectoryError, NotADirectoryError)):
        return False
    names = {t.__name__ for t in type(exc).__mro__}
    if names & {"BotoCoreError", "ClientConnectionError", "ClientPayloadError", "ServerTimeoutError",
                "ReadTimeoutError", "ConnectTimeoutError", "EndpointConnectionError"}:
        return True
    text = str(exc)
    return isinstance(exc, OSError) and any(s in text for s in ("SlowDown", "503", "500", "InternalError", "Timeout"))


class Store:
    """A shipping destination: the fsspec file system of ``url`` and the root path inside it.

    Args:
        url: an fsspec URL or a local path (a folder, made if missing).
        storage_options: passed to fsspec's file system (``key``, ``secret``, ``endpoint_url``,
            ``client_kwargs``, ...). Default None: the store's own environment and configuration chains.

    Raises:
        ConfigError: the URL carries credentials, names a protocol fsspec does not know, or needs a package
            that is not installed (``pip install 'envrec[s3]'`` for ``s3://``).
    """

    def __init__(self, url: str | os.PathLike, storage_options: dict[str, Any] | None = None) -> None:
        url = os.fspath(url)
        if not isinstance(url, str) or not url:
            raise ConfigError(f"ship_to must be a URL or a folder path, not {url!r}")
        if is_url(url) and (urlsplit(url).password is not None or urlsplit(url).username is not None):
            raise ConfigError(f"ship_to {redact(url)} carries credentials in the URL: pass them in storage_options or "
                              "the store's environment (AWS_ACCESS_KEY_ID, ...), never in the URL")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise ConfigError(f"storage_options must be a dict, not {type(storage_options).__name__}")
        self.url = store_url(url)
        self.display = redact(self.url)
        try:
            import fsspec
        except ImportError:
            raise ConfigError(f"shipping needs fsspec: {install_hint('s3')}") from None
        # a file system of its own: fsspec's cached instances keep the endpoint of the environment they were made in
        options = {"skip_instance_cache": True, **(storage_options or {})}
        if self.url.startswith(("s3://", "s3a://")):  # botocore's own retries, bounded: the shipper retries itself
            options["config_kwargs"] = {**S3_CLIENT_CONFIG, **options.get("config_kwargs", {})}
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, **options)
        except ImportError as exc:
            raise ConfigError(f"{self.display}: its protocol needs a package that is not installed ({exc}); for "
                              f"s3:// {install_hint('s3')}") from None
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"ship_to {self.display}: {exc}") from None
        self.root = self.root.rstrip("/")
        self.local = "file" in _protocols(self.fs)

    def path(self, *names: str) -> str:
        return "/".join((self.root, *names))

    def put_once(self, name: str, data: bytes) -> bool:
        """Create ``name`` holding ``data`` unless an object is there already; False then.

        Raises:
            OSError: the store refused or did not answer (``is_transient`` tells which).
        """
        path = self.path(name)
        try:
            if self.local:
                return _link_once(path, data)
            with self.fs.open(path, "xb") as f:
                f.write(data)
            return True
        except FileExistsError:
            return False

    def read(self, name: str) -> bytes:
        return self.fs.cat_file(self.path(name))

    def read_existing(self, name: str) -> bytes:
        """``name``, which a create-only write just found there; ``StoreUnavailable`` (try again later) when it
        cannot be read yet: another shipper's write of it still in flight."""
        try:
            return self.read(name)
        except FileNotFoundError:
            raise StoreUnavailable(f"{self.display}/{name} is being written by another shipper: tried again later") from None

    def size(self, name: str) -> int | None:
        """The size of ``name``, None when nothing is there."""
        try:
            return int(self.fs.info(self.path(name))["size"])
        except FileNotFoundError:
            return None

    def names(self, name: str = "") -> list[str]:
        """The names directly under ``name`` (relative to it), read afresh (no listing cache); [] when none."""
        path = self.path(name) if name else self.root
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(path)
        try:
            found = self.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix):] if p.startswith(prefix) else p.rsplit("/", 1)[-1] for p in found
                      if p.rstrip("/") != path.rstrip("/"))


    def sweep_temporaries(self, name: str) -> list[str]:
        """Remove, under ``name`` (a recorder's folder, local stores only), the temporary files of shippers of
        this host that died mid-write (``.NAME.HOST.PID.shiptmp`` whose PID is gone); their names."""
        if not self.local:
            return []
        host = _host()
        removed = []
        for folder, _, names in os.walk(self.path(name)):
            for n in names:
                parts = n[: -len(TMP_SUFFIX)].rsplit(".", 2) if n.startswith(".") and n.endswith(TMP_SUFFIX) else []
                pid = parts[2].split("-")[0] if len(parts) == 3 else ""
                if parts and parts[1] == host and pid.isdigit() and not _alive(int(pid)):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(folder, n))
                        removed.append(n)
        return removed


def _host() -> str:
    return socket.gethostname().replace(".", "-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _protocols(fs: Any) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


def _link_once(path: str, data: bytes) -> bool:
    """Create ``path`` atomically and only once on a local file system: a complete, fsynced temporary file
    hard-linked to it. A link onto an existing name fails (False); the temporary file goes either way."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{_host()}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(data)
            f.flush()
            os.fsync(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return True
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
