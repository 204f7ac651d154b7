"""One HTTP attempt the way Phorge's HTTPSFuture makes it, through libcurl itself (curl.py).

* One total deadline per attempt (the lookups before it, connect, TLS, send, redirects and the whole answer),
  handed to libcurl as CURLOPT_TIMEOUT_MS, as HTTPSFuture does.
* The first hop goes to the addresses that passed the blacklist (no second lookup); every address any hop
  connects to is checked again when it is connected; TLS verifies the certificate against the host name,
  with the CA bundle PHP uses.
* Through an outbound proxy, the proxy's name is looked up here and pinned; every hop's host is checked
  before the proxy is asked for it (proxy.py). A proxy that cannot be looked up is curl's 5.
* Response bodies are drained, never kept but for their first bytes: memory stays bounded.
* What is recorded is what PHP records: libcurl's error number, or Phorge's parse of the answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import IPNetwork
from ..egress import Proxy
from ..phorge.cabundle import CaBundle
from ..phorge.netguard import (
    InvalidURI,
    IPAddress,
    Resolver,
    ResolveTimeout,
    Target,
    TemporaryDNSFailure,
    ascii_hostname,
    parse_ip,
    parse_target,
    resolve_allowed,
    system_resolver,
)
from ..phorge.outcomes import CurlError, HttpOutcome
from ..phorge.payload import SIGNATURE_HEADER
from ..phorge.rawanswer import MALFORMED
from .curl import MAX_REDIRECTS, USER_AGENT, Exchange, Handles

__all__ = ["MAX_REDIRECTS", "USER_AGENT", "Deadline", "Handles", "check_uri", "failure", "post"]


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


RESPONSE_BYTES_MAX = 2**31 - 1  # what the attempt log's column holds


def check_uri(
    uri: str, blacklist: Sequence[IPNetwork], resolver: Resolver, deadline: Deadline
) -> tuple[Target, tuple[IPAddress, ...]]:
    """Phorge's URI validation for the first hop: the target and its checked addresses, in the order to try
    them. Raises InvalidURI, TemporaryDNSFailure, ResolveTimeout or (no time left) TimeoutError."""
    target = parse_target(uri)
    return target, resolve_allowed(target, blacklist, resolver, deadline.remaining())


def _headers(signature: str, extra: Sequence[tuple[str, str]]) -> list[str]:
    """HTTPSFuture's header list: the worker's two, then (opt-in) ours, then the empty Expect that keeps
    libcurl from asking for 100-continue and the Accept-Encoding PHP adds when it can gunzip."""
    return [
        "Content-Type: application/json",
        f"{SIGNATURE_HEADER}: {signature}",
        *(f"{name}: {value}" for name, value in extra),
        "Expect:",
        "Accept-Encoding: gzip",
    ]


def post(
    uri: str,
    body: bytes,
    signature: str,
    *,
    handles: Handles,
    owner: str,
    first_hop: tuple[Target, tuple[IPAddress, ...]],
    blacklist: Sequence[IPNetwork],
    deadline: Deadline,
    ca: CaBundle,
    proxy: Proxy | None = None,
    resolver: Resolver = system_resolver,
    keep_body: int = 0,
    extra_headers: Sequence[tuple[str, str]] = (),
) -> HttpOutcome:
    """POST `body` as Phorge does, within `deadline`, on the connections `handles` keeps for `owner` (the hook),
    verifying certificates against `ca`, through `proxy` (its name and later hops' hosts looked up by
    `resolver`); with `keep_body`, the answer's first bytes come back too (for the attempt log, when asked for).
    `extra_headers` (none unless the administrator asks for the delivery id) follow Phorge's, on every hop.

    Raises InvalidURI when an address on the way is in the outbound blacklist.
    """
    target, addresses = first_hop
    try:
        proxy_addresses = () if proxy is None else _proxy_addresses(proxy, resolver, deadline)
        timeout_ms = max(1, math.ceil(deadline.remaining() * 1000))
        url = uri.encode("utf-8")
    except (TimeoutError, InvalidURI, TemporaryDNSFailure) as exc:
        if isinstance(exc, TimeoutError) or deadline.passed():
            return failure(exc, deadline)
        return HttpOutcome("http", CurlError.COULDNT_RESOLVE_PROXY.number)  # the proxy, never the receiver
    except UnicodeError:
        return HttpOutcome("http", CurlError.URL_MALFORMAT.number)
    pin = None if parse_ip(target.host) is not None else (target.scheme, target.host, target.port, addresses)
    exchange = handles.exchange(
        owner,
        ca=ca,
        proxy=proxy,
        url=url,
        pin=pin,
        proxy_addresses=proxy_addresses,
        body=body,
        headers=_headers(signature, extra_headers),
        timeout_ms=timeout_ms,
        blacklist=blacklist,
        resolver=resolver,
    )
    if exchange.refused:
        raise InvalidURI("a hop connects into the outbound blacklist")
    return _outcome(exchange, keep_body)


def _outcome(exchange: Exchange, keep_body: int) -> HttpOutcome:
    """What Phorge records of a transfer that refused no address; the answer's first `keep_body` bytes."""
    if exchange.error == CurlError.OPERATION_TIMEDOUT.number:
        return HttpOutcome("timeout", exchange.error, redirects=exchange.redirects)
    if exchange.error:
        return HttpOutcome("http", exchange.error, redirects=exchange.redirects)
    if exchange.status is None:
        return HttpOutcome("http", MALFORMED, None, min(exchange.body_bytes, RESPONSE_BYTES_MAX), exchange.redirects)
    status = exchange.status
    return HttpOutcome(
        "http",
        status,
        status if 0 <= status <= 999 else None,
        min(exchange.body_bytes, RESPONSE_BYTES_MAX),
        exchange.redirects,
        exchange.body_prefix[:keep_body],
    )


def _proxy_addresses(proxy: Proxy, resolver: Resolver, deadline: Deadline) -> tuple[IPAddress, ...]:
    """The proxy's addresses for this attempt: the only ones exempt from the outbound blacklist."""
    literal = parse_ip(proxy.host)
    if literal is not None:
        return (literal,)
    return tuple(resolver(ascii_hostname(proxy.host), proxy.port, deadline.remaining()))


def failure(exc: BaseException, deadline: Deadline) -> HttpOutcome:
    """The outcome of an attempt that failed before libcurl was called (the first hop's lookup): a timeout
    once its deadline has passed, a temporary DNS failure as curl's 6."""
    if deadline.passed() or isinstance(exc, TimeoutError | ResolveTimeout):
        return HttpOutcome("timeout", CurlError.OPERATION_TIMEDOUT.number)
    if isinstance(exc, TemporaryDNSFailure):
        return HttpOutcome("http", CurlError.COULDNT_RESOLVE_HOST.number)
    raise exc
