"""Outbound URI validation (SSRF protection), as Phorge's requireValidRemoteURIForFetch and stricter.

Phorge checks the scheme, the host syntax and the IPv4 addresses of the host against
`security.outbound-blacklist`. We also check every AAAA address, hand the checked address to the
connection (no second lookup), and run the same check on every redirect hop.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .config import IPNetwork

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int, float], list[IPAddress]]

_AMBIGUOUS = re.compile(r"^[^/:]*://[^/]*[#?].*:")
_PERMANENT_DNS_ERRORS = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


class InvalidURI(ValueError):
    """The URI may never be called: a permanent `hook / uri` failure."""


class TemporaryDNSFailure(OSError):
    """The resolver did not answer (no answer, SERVFAIL): retryable, recorded as curl's 6."""


class ResolveTimeout(TimeoutError):
    pass


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    request_target: str
    userinfo: str

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _valid_hostname(host: str) -> bool:
    if not host or not host[0].isalnum():
        return False
    return all(ch.isalnum() or ch in ".-" for ch in host)


def parse_target(uri: str) -> Target:
    """Split a hook URI (or a redirect location already made absolute) or refuse it."""
    if not uri or uri != uri.lstrip() or _AMBIGUOUS.match(uri):
        raise InvalidURI("unparseable URI")
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise InvalidURI("unparseable URI") from exc
    if uri.split(":", 1)[0] not in {"http", "https"}:  # exact case, as PHP's parse_url keeps it
        raise InvalidURI("protocol must be http or https")
    host = parts.hostname or ""
    if parts.netloc.rsplit("@", 1)[-1].startswith("["):
        try:
            host = str(ipaddress.IPv6Address(host))
        except ValueError as exc:
            raise InvalidURI("invalid IPv6 literal") from exc
    elif not _valid_hostname(host):
        raise InvalidURI("invalid host")
    else:
        try:
            host = host.encode("idna").decode("ascii") if not host.isascii() else host
        except UnicodeError as exc:
            raise InvalidURI("invalid host") from exc
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    if port == 0:
        raise InvalidURI("invalid port")
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    return Target(parts.scheme, host, port, target, userinfo)


def make_resolver(lookup: Callable[..., Any] = socket.getaddrinfo) -> Resolver:
    """A resolver over `lookup` (getaddrinfo), which cannot time out by itself and so runs aside."""

    def resolve(host: str, port: int, timeout: float) -> list[IPAddress]:
        future = _RESOLVER_POOL.submit(lookup, host, port, 0, socket.SOCK_STREAM)
        try:
            infos = future.result(timeout=max(timeout, 0.001))
        except concurrent.futures.TimeoutError as exc:
            raise ResolveTimeout("name resolution timed out") from exc
        except socket.gaierror as exc:
            if exc.errno in _PERMANENT_DNS_ERRORS:
                raise InvalidURI("host does not resolve") from exc
            raise TemporaryDNSFailure(exc.errno, "temporary name resolution failure") from exc
        addresses: list[IPAddress] = []
        for family, _type, _proto, _name, sockaddr in infos:
            if family in (socket.AF_INET, socket.AF_INET6):
                address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
                if address not in addresses:
                    addresses.append(address)
        if not addresses:
            raise InvalidURI("host does not resolve")
        return addresses

    return resolve


_RESOLVER_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="resolve")
system_resolver = make_resolver()


def is_blocked(address: IPAddress, blacklist: Sequence[IPNetwork]) -> bool:
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    return any(
        candidate in network
        for candidate in candidates
        for network in blacklist
        if candidate.version == network.version
    )


def resolve_allowed(target: Target, blacklist: Sequence[IPNetwork], resolver: Resolver, timeout: float) -> IPAddress:
    """The address to connect to, after every address of the host passed the blacklist."""
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(target.host)]
    except ValueError:
        addresses = resolver(target.host, target.port, timeout)
    if any(is_blocked(address, blacklist) for address in addresses):
        raise InvalidURI("host resolves into the outbound blacklist")
    return addresses[0]
