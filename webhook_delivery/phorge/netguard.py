"""Outbound URI validation (SSRF protection), as Phorge's requireValidRemoteURIForFetch and stricter.

Phorge checks the scheme, the host syntax and the IPv4 addresses of the host against
`security.outbound-blacklist`. We also check every AAAA address (judging NAT64 and 6to4 addresses by the
IPv4 address they carry), hand the checked addresses to the connection (no second lookup), and run the
same check on every redirect hop. International names are converted with IDNA 2008, as curl does.
"""

from __future__ import annotations

import concurrent.futures
import functools
import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import idna

from ..config import IPNetwork

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


def ascii_hostname(host: str) -> str:
    """The name to resolve: IDNA 2008 for international names; every label 1..63 bytes, 253 in all."""
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise InvalidURI("invalid international host name") from exc
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or any(not 0 < len(label) <= 63 for label in labels):
        raise InvalidURI("invalid host")
    return host


@functools.lru_cache(maxsize=4096)
def parse_target(uri: str) -> Target:
    """Split a hook URI (or a redirect location already made absolute) or refuse it. Pure, so remembered:
    a hook's URI is parsed once, not on every delivery."""
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
        host = ascii_hostname(host)
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    if port == 0:
        raise InvalidURI("invalid port")
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    return Target(parts.scheme, host, port, target, userinfo)


class _Lookups:
    """getaddrinfo() cannot time out by itself, so it runs aside, on a thread of its own per name.

    An attempt waits only until its deadline; a lookup that outlives it keeps its thread until the
    system resolver gives up, and later attempts for the same name wait on that same lookup instead of
    starting another. So a name server that never answers ties up one thread per name, never the lookups
    of other hosts.
    """

    def __init__(self, lookup: Callable[..., Any]) -> None:
        self.lookup = lookup
        self.pending: dict[tuple[str, int], concurrent.futures.Future[Any]] = {}
        self.lock = threading.Lock()

    def future(self, host: str, port: int) -> concurrent.futures.Future[Any]:
        key = (host, port)
        with self.lock:
            future = self.pending.get(key)
            if future is None:
                future = self.pending[key] = concurrent.futures.Future()
                threading.Thread(target=self._run, args=(key, future), name="resolve", daemon=True).start()
            return future

    def _run(self, key: tuple[str, int], future: concurrent.futures.Future[Any]) -> None:
        try:
            future.set_result(self.lookup(key[0], key[1], 0, socket.SOCK_STREAM))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting attempt
            future.set_exception(exc)
        finally:
            with self.lock:
                self.pending.pop(key, None)


def make_resolver(lookup: Callable[..., Any] = socket.getaddrinfo) -> Resolver:
    """A resolver over `lookup` (getaddrinfo) that never waits past the attempt's deadline."""
    lookups = _Lookups(lookup)

    def resolve(host: str, port: int, timeout: float) -> list[IPAddress]:
        try:
            infos = lookups.future(host, port).result(timeout=max(timeout, 0.001))
        except concurrent.futures.TimeoutError as exc:
            raise ResolveTimeout("name resolution timed out") from exc
        except socket.gaierror as exc:
            if exc.errno in _PERMANENT_DNS_ERRORS:
                raise InvalidURI("host does not resolve") from exc
            raise TemporaryDNSFailure(exc.errno, "temporary name resolution failure") from exc
        except (UnicodeError, ValueError) as exc:  # a name getaddrinfo refuses to encode or look up
            raise InvalidURI("host does not resolve") from exc
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


system_resolver = make_resolver()

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


def _translated(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ipaddress.IPv6Network] | None:
    """The IPv4 address a NAT64 (RFC 6052) or 6to4 (RFC 3056) address reaches, and its prefix."""
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), NAT64
    if address in SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF), SIX_TO_FOUR
    return None


def is_blocked(address: IPAddress, blacklist: Sequence[IPNetwork]) -> bool:
    """Whether the list blocks `address`. A NAT64 or 6to4 address is judged by the IPv4 address it
    reaches (on a DNS64 network every IPv4-only host resolves to one), and by IPv6 entries narrower than
    its translation prefix; an IPv4-mapped one by both its forms."""
    if isinstance(address, ipaddress.IPv6Address):
        translated = _translated(address)
        if translated is not None:
            inner, prefix = translated
            return any(
                inner in network
                if network.version == 4
                else address in network and network.prefixlen > prefix.prefixlen
                for network in blacklist
            )
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    return any(
        candidate in network
        for candidate in candidates
        for network in blacklist
        if candidate.version == network.version
    )


LOCAL_RANGES = (
    ("this host", ipaddress.IPv4Network("0.0.0.0/8")),  # connect() to 0.0.0.0 reaches the local host
    ("loopback", ipaddress.IPv4Network("127.0.0.0/8")),
    ("unspecified", ipaddress.IPv6Network("::/128")),  # and [::] as well
    ("loopback", ipaddress.IPv6Network("::1/128")),
    ("IPv4-mapped", ipaddress.IPv6Network("::ffff:0:0/96")),
    ("unique-local", ipaddress.IPv6Network("fc00::/7")),
    ("link-local", ipaddress.IPv6Network("fe80::/10")),
)


def local_gaps(blacklist: Sequence[IPNetwork]) -> list[str]:
    """The ranges that reach this host or its private networks which a non-empty list leaves open (a list
    written from memory, or copied from IPv4-only settings)."""
    if not blacklist:
        return []
    return [
        f"{label} {network}"
        for label, network in LOCAL_RANGES
        if not any(entry.version == network.version and network.subnet_of(entry) for entry in blacklist)  # type: ignore[arg-type]
    ]


@functools.lru_cache(maxsize=1024)
def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def parse_ip(text: str) -> IPAddress | None:
    """An address as a socket or libcurl gives it (an IPv6 zone dropped), None for anything else."""
    return _ip_literal(text.split("%", 1)[0])


def resolve_allowed(
    target: Target, blacklist: Sequence[IPNetwork], resolver: Resolver, timeout: float
) -> tuple[IPAddress, ...]:
    """The addresses to connect to, in order, once every address of the host passed the blacklist."""
    literal = _ip_literal(target.host)
    addresses: list[IPAddress] = [literal] if literal is not None else resolver(target.host, target.port, timeout)
    if any(is_blocked(address, blacklist) for address in addresses):
        raise InvalidURI("host resolves into the outbound blacklist")
    return tuple(addresses)


def check_host(host: str, port: int, blacklist: Sequence[IPNetwork], resolver: Resolver, timeout: float) -> None:
    """A later hop's host (from libcurl's URL parser: an IP literal, or a name read as a hook's host is),
    checked as the first hop's is. Raises InvalidURI, TemporaryDNSFailure or ResolveTimeout."""
    literal = _ip_literal(host)
    name = host if literal is not None else ascii_hostname(host)
    resolve_allowed(Target("", name, port, "/", ""), blacklist, resolver, timeout)
