"""Calls that are not deliveries (a question to Phorge's OAuth server or Conduit, an alert by e-mail), bounded
in total time and in answer size, whatever the other side does.

A socket timeout bounds each read; a server that trickles a byte at a time never trips it. So every call
runs under a Watchdog that shuts its sockets down once the call's time is up: a blocked read or write then
fails at once. Answers are read in chunks up to a size, and a bigger one is cut off and said to be too large.
Errors carry no URL (a token may ride in one): only their kind.

The limits live on sessions and clients of our own, as Zulip's OutgoingSession keeps them: `OutgoingSession`
is a requests.Session with its own adapter mounted (its connections' sockets watched, each answer read by it
up to the size, a redirect never followed, its own timeouts whatever a caller asks), `WatchedSMTP` an SMTP
client whose sockets the Watchdog sees. Nothing of requests, urllib3 or smtplib is replaced or reached
into: only their public methods are overridden, in classes of ours (tests/unit/test_outbound.py checks).

`post` and `get` are our own calls. Apprise's sends are bounded otherwise: each in a process of its own
behind a proxy of ours (alerts/apprise_channels.py).
"""

from __future__ import annotations

import io
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
            if not any(sock is watched for watched in self._sockets):
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


@dataclass
class BoundedCall:
    """One call's limits, and whether an answer was cut off."""

    seconds: float
    max_bytes: int
    too_large: bool = False


class _BoundedAdapter(_WatchedAdapter):
    """Sends as requests' own adapter does, with its sockets watched, then reads the answer itself, at most
    `max_bytes` of it (what the response then holds: the caller never reads the socket), within the call's
    time. The caller's timeouts give way to the call's: a URL cannot ask for longer. A redirect is never
    followed, whatever the caller asks: its Location is taken off, so requests' session sees an answer of
    its own (a 307 would re-post the message to another origin, a 302 turn it into a GET that counts as
    sent, a loop post it again and again)."""

    def __init__(self, call: BoundedCall) -> None:
        super().__init__(max_retries=0)  # no second retry layer under the channel's own
        self.call = call

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        call = self.call
        request.headers["Accept-Encoding"] = "identity"  # read as sent: nothing to inflate
        response = super().send(
            request, stream=True, timeout=(call.seconds, call.seconds), verify=verify, cert=cert, proxies=proxies
        )
        try:
            body, too_large = _read(response, call.max_bytes)
        except Exception:  # noqa: BLE001 - urllib3's read errors, told to the caller as requests' own
            raise requests.ConnectionError("the answer could not be read") from None
        finally:
            response.close()
        call.too_large = call.too_large or too_large
        if 300 <= response.status_code < 400:
            response.headers.pop("Location", None)
        response.raw = io.BytesIO(body)  # what requests' own reading then takes as the whole answer
        return response


def _read(response: requests.Response, max_bytes: int) -> tuple[bytes, bool]:
    kept = bytearray()
    for chunk in response.raw.stream(CHUNK, decode_content=False):
        kept += chunk
        if len(kept) > max_bytes:
            return bytes(kept[:max_bytes]), True
    return bytes(kept), False


class OutgoingSession(requests.Session):
    """A requests session of ours, bounded as one call (`call`): the bounded adapter mounted for http:// and
    https://, so every request it sends, and every answer, keeps to the call's time and size."""

    def __init__(self, call: BoundedCall) -> None:
        super().__init__()
        self.call = call
        adapter = _BoundedAdapter(call)
        self.mount("http://", adapter)
        self.mount("https://", adapter)


def post(url: str, *, timeout: float, max_bytes: int, data: Mapping[str, str] | None = None) -> Answer:
    """POST a form, connect to the last byte read within `timeout` seconds in all, at most `max_bytes` of the
    answer kept (a longer one is cut off: `too_large`). Redirects are not followed. Raises OutboundError."""
    return _call("POST", url, timeout=timeout, max_bytes=max_bytes, data=data)


def get(url: str, *, timeout: float, max_bytes: int) -> Answer:
    """GET, bounded as post() is."""
    return _call("GET", url, timeout=timeout, max_bytes=max_bytes)


def _call(method: str, url: str, *, timeout: float, max_bytes: int, data: Mapping[str, str] | None = None) -> Answer:
    """One request through an OutgoingSession of its own, every socket it opens watched for `timeout`."""
    with watched(timeout) as watchdog, OutgoingSession(BoundedCall(timeout, max_bytes)) as session:
        try:
            response = session.request(method, url, data=data, allow_redirects=False)
        except (requests.RequestException, OSError) as exc:
            if watchdog.fired:
                raise OutboundError(f"no complete answer within {timeout:g} s") from None
            raise OutboundError(type(exc).__name__) from None
        if watchdog.fired:
            raise OutboundError(f"no complete answer within {timeout:g} s")
        return Answer(response.status_code, response.content, session.call.too_large)


class WatchedSMTP(smtplib.SMTP):
    """smtplib's client whose sockets (the TLS one after STARTTLS too) the current call's Watchdog shuts:
    each is handed over before the first reply is read from it, the server's greeting included."""

    def getreply(self) -> tuple[int, bytes]:
        watch_socket(self.sock)
        return super().getreply()

    def starttls(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        reply = super().starttls(*args, **kwargs)
        watch_socket(self.sock)
        return reply


class WatchedSMTPSSL(smtplib.SMTP_SSL):
    def getreply(self) -> tuple[int, bytes]:
        watch_socket(self.sock)
        return super().getreply()
