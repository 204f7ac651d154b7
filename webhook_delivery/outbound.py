"""Calls that are not deliveries (an alert to a chat service, a question to Phorge's OAuth server or Conduit),
bounded in total time and in answer size, whatever the other side does.

A socket timeout bounds each read; a server that trickles a byte at a time never trips it. So every call
runs under a Watchdog that shuts its sockets down once the call's time is up: a blocked read or write then
fails at once. Answers are read in chunks up to a size, and a bigger one is cut off and said to be too large.
Errors carry no URL (a chat webhook URL is a secret; a token may ride in one): only their kind.
"""

from __future__ import annotations

import smtplib
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

CHUNK = 16 * 1024


class OutboundError(Exception):
    """A call failed; str() is safe to log: no URL, no credential, only what went wrong."""


class Watchdog:
    """Shuts down the sockets given to it once `seconds` have passed since it started."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


_current = threading.local()  # the Watchdog of the call this thread is making


@contextmanager
def watched(seconds: float) -> Iterator[Watchdog]:
    """A Watchdog for what this thread opens meanwhile (the connections of `post`, an SMTP session)."""
    with Watchdog(seconds) as watchdog:
        _current.watchdog = watchdog
        try:
            yield watchdog
        finally:
            _current.watchdog = None


def watch_socket(sock: socket.socket | None) -> None:
    """Hand a socket this thread just opened to the current call's Watchdog, if there is one."""
    watchdog: Watchdog | None = getattr(_current, "watchdog", None)
    if watchdog is not None:
        watchdog.watch(sock)


class _WatchedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        watch_socket(self.sock)


class _WatchedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        watch_socket(self.sock)  # after TLS: the socket that carries the call


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}
        return manager


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most the size asked for
    too_large: bool  # the answer went on beyond it: cut off


def post(
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    data: Mapping[str, str] | None = None,
    json: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """POST, connect to the last byte read within `timeout` seconds in all, at most `max_bytes` of the answer
    kept (a longer one is cut off: `too_large`). Redirects are not followed. Raises OutboundError."""
    return _call("POST", url, timeout=timeout, max_bytes=max_bytes, data=data, json=json, headers=headers)


def get(url: str, *, timeout: float, max_bytes: int, headers: Mapping[str, str] | None = None) -> Answer:
    """GET, bounded as post() is."""
    return _call("GET", url, timeout=timeout, max_bytes=max_bytes, headers=headers)


def _call(
    method: str,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    data: Mapping[str, str] | None = None,
    json: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    with requests.Session() as session, watched(timeout) as watchdog:
        session.mount("http://", _WatchedAdapter())
        session.mount("https://", _WatchedAdapter())
        try:
            response = session.request(
                method,
                url,
                data=data,
                json=json,
                headers={"Accept-Encoding": "identity", **(headers or {})},  # read as sent: nothing to inflate
                timeout=(timeout, timeout),
                allow_redirects=False,
                stream=True,
            )
            try:
                watch_socket(_response_socket(response))
                body, too_large = _read(response, max_bytes)
            finally:
                response.close()
        except (requests.RequestException, OSError) as exc:
            if watchdog.fired:
                raise OutboundError(f"no complete answer within {timeout:g} s") from None
            raise OutboundError(type(exc).__name__) from None
        if watchdog.fired:
            raise OutboundError(f"no complete answer within {timeout:g} s")
        return Answer(response.status_code, body, too_large)


def _response_socket(response: requests.Response) -> socket.socket | None:
    # A connection from before this call (none: each call has its own session) would not be watched yet.
    connection = getattr(response.raw, "_connection", None)
    return getattr(connection, "sock", None)


def _read(response: requests.Response, max_bytes: int) -> tuple[bytes, bool]:
    kept = bytearray()
    for chunk in response.raw.stream(CHUNK, decode_content=False):
        kept += chunk
        if len(kept) > max_bytes:
            return bytes(kept[:max_bytes]), True
    return bytes(kept), False


class WatchedSMTP(smtplib.SMTP):
    """smtplib's client whose socket (and the TLS one after STARTTLS) the current call's Watchdog shuts."""

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        sock = super()._get_socket(host, port, timeout)  # type: ignore[misc]
        watch_socket(sock)
        return sock  # type: ignore[no-any-return]

    def starttls(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        reply = super().starttls(*args, **kwargs)
        watch_socket(self.sock)
        return reply


class WatchedSMTPSSL(smtplib.SMTP_SSL):
    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        sock = super()._get_socket(host, port, timeout)  # type: ignore[misc]
        watch_socket(sock)
        return sock  # type: ignore[no-any-return]
