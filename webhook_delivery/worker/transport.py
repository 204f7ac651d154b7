"""One HTTP attempt the way Phorge's HTTPSFuture makes it, over a requests adapter that pins addresses.

* One total deadline per attempt (connect, send, redirects and the whole response body), like
  CURLOPT_TIMEOUT_MS: every socket read and write gets only the time left, so neither a trickled header
  nor an endless body can hold a worker past it.
* The connection goes to the address that passed the blacklist (no second DNS lookup); TLS still
  verifies the certificate against the host name.
* Response bodies are drained, never kept and never decompressed: memory stays bounded.
* Failures are recorded with libcurl's error numbers, as PHP records them.
"""

from __future__ import annotations

import base64
import errno
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urljoin

import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.ssl_match_hostname import CertificateError as HostnameMismatch

from ..config import IPNetwork
from ..phorge.netguard import (
    InvalidURI,
    IPAddress,
    Resolver,
    ResolveTimeout,
    Target,
    TemporaryDNSFailure,
    parse_target,
    resolve_allowed,
)
from ..phorge.outcomes import CurlError, HttpOutcome
from ..phorge.payload import SIGNATURE_HEADER

# Real deliveries by Phorge's daemons carry this agent (libcurl 7.88.1 is Debian 12's); some receivers
# filter on it, so we send what PHP sends.
USER_AGENT = "Arcanist/1.0 cURL/7.88.1"
MAX_REDIRECTS = 20
READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Deadline:
    """When one attempt must be over, on time.monotonic(): the dispatcher makes it, and everything of the
    attempt counts against it (the lookups before the request, URI checks, name resolution, connect, send,
    every redirect, the whole answer)."""

    at: float

    @classmethod
    def after(cls, timeout: float, *, started: float | None = None) -> Deadline:
        """`timeout` after `started` (the claim), by default after now."""
        return cls((time.monotonic() if started is None else started) + timeout)

    def remaining(self) -> float:
        """The seconds left; TimeoutError once there are none."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("delivery deadline reached")
        return left

    def passed(self) -> bool:
        return time.monotonic() >= self.at


@dataclass(frozen=True)
class _Hop:
    """One request of an attempt: its deadline, and the checked addresses to connect to in turn, like curl."""

    deadline: Deadline
    addresses: tuple[str, ...]


_NO_HOP = _Hop(Deadline(0.0), ())  # outside an attempt: every socket operation times out at once


if TYPE_CHECKING:
    _SocketBase = socket.socket
else:
    _SocketBase = object  # a mixin at run time: the real socket class comes after it in the MRO


class _DeadlineIO(_SocketBase):
    """Every read and write of a socket gets only the time left in the attempt that uses it now (a
    keep-alive socket serves one attempt after another: its connection hands it each one's deadline)."""

    deadline: Deadline = _NO_HOP.deadline

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        self.settimeout(self.deadline.remaining())
        return super().recv_into(*args, **kwargs)

    def recv(self, *args: Any, **kwargs: Any) -> bytes:
        self.settimeout(self.deadline.remaining())
        return super().recv(*args, **kwargs)

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        self.settimeout(self.deadline.remaining())
        super().sendall(*args, **kwargs)

    def send(self, *args: Any, **kwargs: Any) -> int:
        self.settimeout(self.deadline.remaining())
        return super().send(*args, **kwargs)


class _DeadlineSocket(_DeadlineIO, socket.socket):
    pass


class _DeadlineSSLSocket(_DeadlineIO, ssl.SSLSocket):
    pass


def _tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.sslsocket_class = _DeadlineSSLSocket
    return context


_TLS_CONTEXT = _tls_context()


if TYPE_CHECKING:
    _ConnectionBase = HTTPConnection
    _PoolBase = HTTPConnectionPool
else:
    _ConnectionBase = _PoolBase = object  # mixins at run time, like _SocketBase


class _PinnedConnectionMixin(_ConnectionBase):
    hop: _Hop = _NO_HOP

    def use(self, hop: _Hop) -> None:
        """The hop this connection serves now (set by its pool before each request)."""
        self.hop = hop
        if isinstance(self.sock, _DeadlineIO):
            self.sock.deadline = hop.deadline

    def connect(self) -> None:
        super().connect()
        if isinstance(self.sock, _DeadlineIO):  # the TLS socket is a new object: it needs the deadline too
            self.sock.deadline = self.hop.deadline

    def _new_conn(self) -> socket.socket:
        addresses = self.hop.addresses or (self.host.strip("[]"),)
        last_error: OSError | None = None
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = _DeadlineSocket(family, socket.SOCK_STREAM)
            sock.deadline = self.hop.deadline
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(self.hop.deadline.remaining())
                sock.connect((address, self.port))
                return sock
            except TimeoutError as exc:
                sock.close()
                raise ConnectTimeoutError(self, "connection timed out") from exc
            except OSError as exc:
                sock.close()
                last_error = exc
        raise NewConnectionError(cast(HTTPConnection, self), "failed to connect") from last_error


class _HTTPConnection(_PinnedConnectionMixin, HTTPConnection):
    pass


class _HTTPSConnection(_PinnedConnectionMixin, HTTPSConnection):
    pass


class _HopTimeout(urllib3.Timeout):
    """urllib3's timeout for one hop, carrying the hop: the one value urlopen() hands on to the pooled
    connection it picks (see _HopPoolMixin)."""

    def __init__(self, hop: _Hop, left: float) -> None:
        super().__init__(connect=left, read=left)
        self.hop = hop
        self.left = left

    def clone(self) -> _HopTimeout:
        return _HopTimeout(self.hop, self.left)


class _HopPoolMixin(_PoolBase):
    def _make_request(self, conn: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("timeout")
        if isinstance(timeout, _HopTimeout) and isinstance(conn, _PinnedConnectionMixin):
            conn.use(timeout.hop)
        return super()._make_request(conn, method, url, *args, **kwargs)


class _HTTPPool(_HopPoolMixin, HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(_HopPoolMixin, HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class PinnedAdapter(HTTPAdapter):
    """requests' adapter, owning the connection pools, keyed by the checked address.

    One adapter serves every delivery thread: urllib3's pools are thread-safe, and a receiver's keep-alive
    connections are then shared by all the hooks that point at it, instead of one set per thread. The idea
    of pinning through the pool key comes from requests-hardened. The hot path calls the adapter's urllib3
    pool directly: HTTPAdapter.send() would add a Response object, cookie extraction and exception
    re-wrapping that we never use, at 2-3 times the CPU per delivery (see make bench).
    """

    def __init__(self) -> None:
        # Up to this many idle keep-alive connections per receiver address; more in flight open and close
        # their own (block=False), never wait for one.
        super().__init__(pool_connections=256, pool_maxsize=64, max_retries=0, pool_block=False)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def pool(self, target: Target, address: IPAddress) -> HTTPConnectionPool:
        tls: dict[str, Any] = {}
        if target.scheme == "https":
            # Connect to the address, verify the certificate for the name (SNI and hostname check).
            tls = {
                "server_hostname": target.host,
                "assert_hostname": target.host,
                "ssl_context": _TLS_CONTEXT,
                "cert_reqs": "CERT_REQUIRED",
            }
        pool = self.poolmanager.connection_from_host(str(address), target.port, scheme=target.scheme, pool_kwargs=tls)
        return cast(HTTPConnectionPool, pool)


_shared: list[PinnedAdapter] = []
_shared_lock = threading.Lock()


def _adapter() -> PinnedAdapter:
    if not _shared:
        with _shared_lock:
            if not _shared:
                _shared.append(PinnedAdapter())
    return _shared[0]


def _exception_chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if any(current is known for known in seen):
            continue
        seen.append(current)
        for linked in (current.__cause__, current.__context__, getattr(current, "reason", None)):
            if isinstance(linked, BaseException):
                stack.append(linked)
        stack.extend(arg for arg in current.args if isinstance(arg, BaseException))
    return seen


def classify(exc: BaseException) -> HttpOutcome:
    """Map a transport failure to PHP's (errorType, errorCode): timeout/28 or http/<libcurl number>."""
    chain = _exception_chain(exc)

    def has(*types: type[BaseException]) -> bool:
        return any(isinstance(e, types) for e in chain)

    # urllib3's NewConnectionError subclasses its ConnectTimeoutError: test real timeouts first.
    if has(TimeoutError, ResolveTimeout, urllib3.exceptions.ReadTimeoutError) or (
        has(urllib3.exceptions.ConnectTimeoutError) and not has(NewConnectionError)
    ):
        return HttpOutcome("timeout", CurlError.OPERATION_TIMEDOUT.number)
    if has(TemporaryDNSFailure):
        return HttpOutcome("http", CurlError.COULDNT_RESOLVE_HOST.number)
    if has(ssl.SSLCertVerificationError, ssl.CertificateError, HostnameMismatch):
        return HttpOutcome("http", CurlError.PEER_FAILED_VERIFICATION.number)
    if has(ssl.SSLError):
        return HttpOutcome("http", CurlError.SSL_CONNECT_ERROR.number)
    if has(ConnectionRefusedError, NewConnectionError):
        return HttpOutcome("http", CurlError.COULDNT_CONNECT.number)
    if any(isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) for e in chain):
        return HttpOutcome("http", CurlError.COULDNT_CONNECT.number)
    if has(http.client.RemoteDisconnected):
        return HttpOutcome("http", CurlError.GOT_NOTHING.number)
    if has(http.client.IncompleteRead, urllib3.exceptions.IncompleteRead):
        return HttpOutcome("http", CurlError.PARTIAL_FILE.number)
    if has(ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
        return HttpOutcome("http", CurlError.RECV_ERROR.number)
    if has(http.client.HTTPException):  # not HTTP, or headers beyond http.client's limits
        return HttpOutcome("http", CurlError.UNSUPPORTED_PROTOCOL.number)
    return HttpOutcome("http", CurlError.RECV_ERROR.number)


def _headers(
    target: Target, signature: str, body: bytes | None, extra: Sequence[tuple[str, str]] = ()
) -> dict[str, str]:
    # Wire order of libcurl: Host, [Authorization], User-Agent, Accept, the caller's headers in call order,
    # Accept-Encoding, Content-Length. Our own (opt-in) headers come after Phorge's caller headers, as curl
    # would place them had PHP set them last.
    headers: dict[str, str] = {}
    headers["Host"] = target.host_header
    if target.userinfo:
        credentials = unquote(target.userinfo).encode("utf-8")
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode("ascii")
    headers["User-Agent"] = USER_AGENT
    headers["Accept"] = "*/*"
    headers["Content-Type"] = "application/json"
    headers[SIGNATURE_HEADER] = signature
    for name, value in extra:
        headers[name] = value
    headers["Accept-Encoding"] = "gzip"
    headers["Content-Length"] = str(len(body) if body else 0)
    return headers


def _send_once(target: Target, address: IPAddress, hop: _Hop, headers: dict[str, str], body: bytes | None) -> Any:
    left = hop.deadline.remaining()
    return (
        _adapter()
        .pool(target, address)
        .urlopen(
            "POST",
            target.request_target,
            body=body,
            headers=headers,
            retries=False,
            redirect=False,
            assert_same_host=False,
            preload_content=False,
            decode_content=False,
            timeout=_HopTimeout(hop, left),
        )
    )


def _drain(raw: Any, keep: int) -> tuple[int, bytes]:
    """Read the answer to its end without keeping it: its size, and its first `keep` bytes."""
    size, kept = 0, b""
    while chunk := raw.read(READ_CHUNK, decode_content=False):
        size += len(chunk)
        if len(kept) < keep:
            kept += chunk[: keep - len(kept)]
    raw.release_conn()
    return size, kept


def check_uri(
    uri: str, blacklist: Sequence[IPNetwork], resolver: Resolver, deadline: Deadline
) -> tuple[Target, tuple[IPAddress, ...]]:
    """Phorge's URI validation for one hop: the target and its checked addresses, in the order to try
    them. Raises InvalidURI, TemporaryDNSFailure, ResolveTimeout or (no time left) TimeoutError."""
    target = parse_target(uri)
    return target, resolve_allowed(target, blacklist, resolver, deadline.remaining())


def post(
    uri: str,
    body: bytes,
    signature: str,
    *,
    first_hop: tuple[Target, tuple[IPAddress, ...]],
    blacklist: Sequence[IPNetwork],
    resolver: Resolver,
    deadline: Deadline,
    keep_body: int = 0,
    extra_headers: Sequence[tuple[str, str]] = (),
) -> HttpOutcome:
    """POST `body` as Phorge does, within `deadline`; with `keep_body`, the final
    answer's first bytes come back too (for the attempt log, when asked for). `extra_headers` (none unless
    the administrator asks for the delivery id) follow Phorge's headers, on every hop.

    Raises InvalidURI when a redirect hop is refused.
    """
    try:
        current_uri = uri
        payload: bytes | None = body
        target, addresses = first_hop
        for hop in range(MAX_REDIRECTS + 1):
            if hop:
                target, addresses = check_uri(current_uri, blacklist, resolver, deadline)
            pinned = _Hop(deadline, tuple(str(address) for address in addresses))
            headers = _headers(target, signature, payload, extra_headers)
            response = _send_once(target, addresses[0], pinned, headers, payload)
            try:
                size, kept = _drain(response, keep_body)
            except BaseException:
                response.close()
                response.release_conn()
                raise
            status = int(response.status)
            location = response.headers.get("Location")
            if status not in (301, 302, 303, 307, 308) or not location:
                return HttpOutcome("http", status, status, size, hop, kept)
            current_uri = urljoin(current_uri, location.strip())
            if status in (301, 302, 303):
                payload = None
        return HttpOutcome("http", CurlError.TOO_MANY_REDIRECTS.number, redirects=MAX_REDIRECTS + 1)
    except InvalidURI:
        raise
    except Exception as exc:  # noqa: BLE001 - every transport failure becomes a PHP-style outcome
        return failure(exc, deadline)


def failure(exc: BaseException, deadline: Deadline) -> HttpOutcome:
    """The outcome of a failed attempt: a timeout whenever its deadline has passed, else as classify()."""
    if deadline.passed():
        return HttpOutcome("timeout", CurlError.OPERATION_TIMEDOUT.number)
    return classify(exc)
