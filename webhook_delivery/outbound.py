"""Calls that are not deliveries (an alert to a chat service, a question to Phorge's OAuth server or Conduit),
bounded in total time and in answer size, whatever the other side does.

A socket timeout bounds each read; a server that trickles a byte at a time never trips it. So every call
runs under a Watchdog that shuts its sockets down once the call's time is up: a blocked read or write then
fails at once. Answers are read in chunks up to a size, and a bigger one is cut off and said to be too large.
Errors carry no URL (a chat webhook URL is a secret; a token may ride in one): only their kind.

`post` and `get` are our own calls. `bounded_requests` bounds the calls of code that is not ours (Apprise's
plugins call `requests.post` themselves): while it runs, every request of that thread, through whatever
`requests.Session`, goes through one watched adapter that reads each answer itself, up to its size.
"""

from __future__ import annotations

import smtplib
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import requests
from requests.adapters import BaseAdapter, HTTPAdapter
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


# -- the calls of code that is not ours ----------------------------------------------------------------


@dataclass
class BoundedCall:
    """What the requests of one `bounded_requests` block met: their statuses, the kind of each error, and
    whether an answer was cut off or the time ran out. Safe to log: no URL, no body."""

    seconds: float
    max_bytes: int
    watchdog: Watchdog
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    too_large: bool = False
    redirected: int | None = None  # the status of a redirect answered (never followed)
    adapter: _BoundedAdapter | None = None

    @property
    def fired(self) -> bool:
        return self.watchdog.fired


class _BoundedAdapter(_WatchedAdapter):
    """Sends as requests' own adapter does, with its sockets watched, then reads the answer itself, at most
    `max_bytes` of it (kept as the response's content: the caller never reads the socket), within the
    call's time. The caller's timeouts give way to the call's: a URL cannot ask for longer. A redirect is
    never followed, whatever the caller asks: its Location is taken off, so requests' session sees an
    answer of its own (a 307 would re-post the message to another origin, a 302 turn it into a GET that
    counts as sent, a loop post it again and again)."""

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
        try:
            response = super().send(
                request,
                stream=True,
                timeout=(call.seconds, call.seconds),
                verify=verify,
                cert=cert,
                proxies=proxies,
            )
        except (requests.RequestException, OSError) as exc:
            call.errors.append(type(exc).__name__)
            raise
        try:
            watch_socket(_response_socket(response))
            body, too_large = _read(response, call.max_bytes)
        except Exception as exc:  # noqa: BLE001 - urllib3's read errors, told to the caller as requests' own
            call.errors.append(type(exc).__name__)
            raise requests.ConnectionError("the answer could not be read") from None
        finally:
            response.close()
        call.statuses.append(response.status_code)
        call.too_large = call.too_large or too_large
        if 300 <= response.status_code < 400:
            call.redirected = response.status_code
            response.headers.pop("Location", None)
        response._content = body  # what requests' own reading would have kept, but bounded
        response._content_consumed = True  # type: ignore[attr-defined]
        return response


_bounded = threading.local()  # the BoundedCall of the block this thread runs
_install_lock = threading.Lock()
_installed = False


def _install() -> None:
    """Route requests' sessions through the bounded adapter of the calling thread's block, if it has one
    (every other thread, and this one outside the block, get requests' own adapters, untouched)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        plain = requests.Session.get_adapter

        def get_adapter(session: requests.Session, url: str) -> BaseAdapter:
            call: BoundedCall | None = getattr(_bounded, "call", None)
            if call is not None and call.adapter is not None and url.lower().startswith(("http://", "https://")):
                return call.adapter
            return plain(session, url)

        requests.Session.get_adapter = get_adapter  # type: ignore[method-assign,assignment]
        _installed = True


@contextmanager
def bounded_requests(seconds: float, max_bytes: int) -> Iterator[BoundedCall]:
    """Every HTTP(S) request this thread makes meanwhile, through any requests.Session (requests.post
    included), bounded together: connect to the last byte of the last answer within `seconds` in all (the
    Watchdog shuts every socket opened in the block once they are up, and a socket opened after that at
    once), each answer read up to `max_bytes`, no redirect followed (`redirected`). DNS look-ups and a
    caller's own sleeps are not sockets: they are not cut short."""
    _install()
    with watched(seconds) as watchdog:
        call = BoundedCall(seconds, max_bytes, watchdog)
        call.adapter = _BoundedAdapter(call)
        _bounded.call = call
        try:
            yield call
        finally:
            _bounded.call = None
            call.adapter.close()


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
