"""One HTTP attempt the way Phorge's HTTPSFuture makes it, over pinned keep-alive connections (http1.py).

* One total deadline per attempt (connect, send, redirects and the whole response body), like
  CURLOPT_TIMEOUT_MS: every wait for the socket gets only the time left, so neither a trickled header
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
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urljoin

from ..config import IPNetwork
from ..phorge.netguard import (
    InvalidURI,
    IPAddress,
    Resolver,
    ResolveTimeout,
    Target,
    TemporaryDNSFailure,
    encode_target,
    parse_target,
    resolve_allowed,
)
from ..phorge.outcomes import CurlError, HttpOutcome
from ..phorge.payload import SIGNATURE_HEADER
from .http1 import ConnectFailed, Key, Pools

# Real deliveries by Phorge's daemons carry this agent (libcurl 7.88.1 is Debian 12's); some receivers
# filter on it, so we send what PHP sends.
USER_AGENT = "Arcanist/1.0 cURL/7.88.1"
MAX_REDIRECTS = 20


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


POOLS = Pools()  # one for the process: a receiver's keep-alive connections serve every hook that points at it


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

    if has(TimeoutError, ResolveTimeout):
        return HttpOutcome("timeout", CurlError.OPERATION_TIMEDOUT.number)
    if has(TemporaryDNSFailure):
        return HttpOutcome("http", CurlError.COULDNT_RESOLVE_HOST.number)
    if has(ssl.SSLCertVerificationError, ssl.CertificateError):
        return HttpOutcome("http", CurlError.PEER_FAILED_VERIFICATION.number)
    if has(ssl.SSLError):
        return HttpOutcome("http", CurlError.SSL_CONNECT_ERROR.number)
    if has(ConnectionRefusedError, ConnectFailed):
        return HttpOutcome("http", CurlError.COULDNT_CONNECT.number)
    if any(isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) for e in chain):
        return HttpOutcome("http", CurlError.COULDNT_CONNECT.number)
    if has(http.client.RemoteDisconnected):
        return HttpOutcome("http", CurlError.GOT_NOTHING.number)
    if has(http.client.IncompleteRead):
        return HttpOutcome("http", CurlError.PARTIAL_FILE.number)
    if has(ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
        return HttpOutcome("http", CurlError.RECV_ERROR.number)
    if has(http.client.HTTPException):  # not HTTP, or headers beyond http.client's limits
        return HttpOutcome("http", CurlError.UNSUPPORTED_PROTOCOL.number)
    return HttpOutcome("http", CurlError.RECV_ERROR.number)


def _request(target: Target, signature: str, body: bytes | None, extra: Sequence[tuple[str, str]] = ()) -> bytes:
    """The request's bytes. Wire order of libcurl: Host, [Authorization], User-Agent, Accept, the caller's
    headers in call order, Accept-Encoding, Content-Length. Our own (opt-in) headers come after Phorge's
    caller headers, as curl would place them had PHP set them last."""
    lines = [f"POST {encode_target(target.request_target)} HTTP/1.1", f"Host: {target.host_header}"]
    if target.userinfo:
        credentials = unquote(target.userinfo).encode("utf-8")
        lines.append("Authorization: Basic " + base64.b64encode(credentials).decode("ascii"))
    lines += [
        f"User-Agent: {USER_AGENT}",
        "Accept: */*",
        "Content-Type: application/json",
        f"{SIGNATURE_HEADER}: {signature}",
    ]
    lines += [f"{name}: {value}" for name, value in extra]
    lines += ["Accept-Encoding: gzip", f"Content-Length: {len(body) if body else 0}", "", ""]
    head = "\r\n".join(lines).encode("latin-1")
    return head + body if body else head


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
            key = Key(target.scheme, str(addresses[0]), target.port, target.host if target.scheme == "https" else "")
            request = _request(target, signature, payload, extra_headers)
            answer = POOLS.exchange(key, tuple(map(str, addresses)), request, deadline, keep_body)
            status = answer.status
            if status not in (301, 302, 303, 307, 308) or not answer.location:
                return HttpOutcome("http", status, status, answer.size, hop, answer.kept)
            current_uri = urljoin(current_uri, answer.location.strip())
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
