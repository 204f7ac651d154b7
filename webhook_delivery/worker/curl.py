"""Deliveries through libcurl, the library PHP's HTTPSFuture hands them to, so that every answer is read,
framed, limited and numbered as Phorge's own worker reads it (pycurl, built against the system's libcurl:
Debian 12's 7.88.1 is what its php8.2-curl links).

* One set of easy handles per hook (`Handles`): libcurl keeps connections in the handle and matches them by
  scheme, host name, port and TLS settings, so a connection made for one hook never carries another hook's
  request. A hook whose checked addresses changed starts its next transfer on a fresh connection.
* Every address a transfer connects to, on every hop, is checked against the outbound blacklist when its
  socket is opened: a refused address ends the attempt as a refused URI, whatever libcurl would have tried
  next. Kept connections serve only while the list they were checked against is the one in force, and
  only while no bytes that no request asked for wait on them.
* The first hop's host name is pinned to the addresses the dispatcher checked (CURLOPT_RESOLVE): no second
  lookup. libcurl follows redirects as HTTPSFuture makes it (20 at most, http and https only).
* Certificates are verified against the CA bundle PHP uses (phorge/cabundle.py), set on each handle: a
  handle made under another bundle, or before the bundle's file changed, is replaced with its connections.
* With an outbound proxy (GORGE_WEBHOOK_PROXY), libcurl connects to the proxy, pinned to the addresses
  looked up for this transfer and the only ones exempt from the blacklist; each hop's host is checked
  before the proxy is asked for it (proxy.py).
* The answer: the buffer PHP would hold (every header block, then the body) judged as Phorge judges it
  (phorge/rawanswer.py); the body counted and dropped but for its first bytes, a gzip body checked as it
  streams, within a budget per attempt (GZIP_OUTPUT_MAX inflated, GZIP_CPU_MAX_SEC of the thread's CPU).
  Past it the body is drained but no longer inflated: one that never ends is ended by the deadline as
  libcurl ends PHP's (timeout / 28: PHP never reaches gzdecode()), one that ends in time has its status
  recorded when what was inflated held no error (PHP's daemons run without a memory limit, and gzdecode()
  inflates a whole member of any size: 1 GiB in 1.4 s of CPU, measured with php-cli 8.2).
* A kept handle holds no answer between transfers: its buffers are let go once the answer is judged, and a
  handle whose last answer had more than IDLE_HEADERS_MAX of headers is closed rather than kept (libcurl keeps
  each answer's headers in the handle until its next transfer, 2.5 times their size: 290 KiB of headers held
  690 KiB per handle, 88 MiB over 128 hooks, measured with pycurl 7.49 and libcurl 7.88.1); that hook's
  next call opens a new connection.
* A 429 or 503 answer's Retry-After (seconds or an HTTP-date, at most RETRY_AFTER_MAX_SEC) is kept per hook
  until the scheduler asks for it (`Handles.retry_after`); it changes nothing that is recorded.
"""

from __future__ import annotations

import email.utils
import select
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pycurl

from ..config import IPNetwork
from ..egress import Proxy
from ..phorge.cabundle import CaBundle
from ..phorge.netguard import IPAddress, Resolver, is_blocked, parse_ip
from ..phorge.rawanswer import GzipCheck, final_head, gzdecodes, strip_redirects
from .proxy import ProxyHops

LIBCURL_VERSION = str(pycurl.version_info()[1])  # what PHP's curl_version() says on the same system
# HTTPSFuture's agent names the libcurl PHP runs on ("Arcanist/1.0 cURL/7.88.1" on Debian 12, as in Phorge's
# captures); some receivers filter on it, so we send what PHP sends. It forces HTTP/1.1 below libcurl 8.4.0.
USER_AGENT = f"Arcanist/1.0 cURL/{LIBCURL_VERSION}"
HTTP_VERSION = (
    pycurl.CURL_HTTP_VERSION_1_1
    if tuple(int(part) for part in LIBCURL_VERSION.split(".")[:3] if part.isdigit()) < (8, 4, 0)
    else pycurl.CURL_HTTP_VERSION_NONE
)
MAX_REDIRECTS = 20
IDLE_HANDLES = 128  # hooks whose handle (and kept connections) stay open between jobs; the least recent goes
CONNECTIONS_PER_HANDLE = 1  # the connection of a hook's last request: the one whose socket is checked
HELD_BODY_MAX = 64 * 1024  # a request body above this is let go after its transfer, not kept by the handle
BODY_KEPT = 64 * 1024  # a body's first bytes, held to judge it as PHP would and for the attempt log
HEADS_KEPT = 1024 * 1024  # every header block of one transfer; libcurl allows 300 KiB an answer
IDLE_HEADERS_MAX = 8 * 1024  # header bytes of the last answer above which a handle is closed, not kept
GZIP_OUTPUT_MAX = 16 * 1024 * 1024  # bytes a gzip body is inflated to, at most, in one attempt
GZIP_CPU_MAX_SEC = 0.25  # CPU time (the delivering thread's) spent inflating, at most, in one attempt
RETRY_AFTER_STATUSES = (429, 503)  # the answers whose Retry-After RFC 9110 defines as "come back later"
RETRY_AFTER_MAX_SEC = 3600  # a hook held back by one answer for an hour at most: the header is the receiver's


@dataclass(frozen=True)
class Exchange:
    """What one transfer gave: libcurl's error number (0: an answer came), whether an address on the way was
    refused, and for an answer the status Phorge records (None: its malformed answer)."""

    error: int
    refused: bool = False
    status: int | None = None
    redirects: int = 0
    body_bytes: int = 0
    body_prefix: bytes = b""
    retry_after: float | None = None  # seconds a 429 or 503 answer asked to wait (Retry-After), if readable


class _Transfer:
    """A transfer's state, fed by libcurl's callbacks on the thread that performs it; a handle's one, reset
    before each transfer."""

    def __init__(self) -> None:
        self.reset(())

    def reset(self, blacklist: Sequence[IPNetwork]) -> None:
        self.blacklist = blacklist
        self.refused = False
        self.heads = bytearray()
        self.head_bytes = 0
        self._room = HEADS_KEPT  # header bytes still taken; none once the body began
        self.body = bytearray()
        self.body_bytes = 0
        self.gzip: GzipCheck | None = None
        self._in_body = False

    # libcurl hands every header line to the header callback (followed redirects' blocks, interim answers, the
    # final head) and the final body to the write callback: PHP's buffer (CURLOPT_HEADER) is the first, then
    # the second. A header line after the body began is a chunked answer's trailer, which PHP's buffer does
    # not hold; the trailers of an empty chunked body are taken as the body's bytes, where they change no
    # status Phorge records (they hold no blank line before theirs and no gzip member).
    def header(self, data: bytes) -> None:
        self.head_bytes += len(data)
        if self._room > 0:
            self._room -= len(data)
            self.heads += data

    @property
    def heads_overflow(self) -> bool:
        return len(self.heads) > HEADS_KEPT

    def write(self, data: bytes) -> None:
        if not self._in_body:
            self._in_body = True
            self._room = 0
            if b"gzip" in self.heads:
                self.gzip = GzipCheck(max_output=GZIP_OUTPUT_MAX, max_cpu=GZIP_CPU_MAX_SEC)
        self.body_bytes += len(data)
        if len(self.body) < BODY_KEPT:
            self.body += data[: BODY_KEPT - len(self.body)]
        if self.gzip is not None:
            self.gzip.feed(data)

    def release(self) -> None:
        """Lets the answer go (up to HEADS_KEPT of headers and BODY_KEPT of body): an idle handle holds none."""
        self.heads = bytearray()
        self.body = bytearray()
        self.gzip = None

    def allowed(self, host: str) -> bool:
        address = parse_ip(host)
        if self.refused or address is None or is_blocked(address, self.blacklist):
            self.refused = True
        return not self.refused

    def judge(self, redirects: int) -> tuple[int | None, bytes]:
        """The status Phorge records (None: malformed) and the body as Phorge cuts it, as far as held."""
        if self.heads_overflow:
            return None, b""  # header blocks beyond 1 MiB in all: taken as malformed, never held
        heads = len(self.heads)
        buffer = bytes(self.heads + self.body)
        rest = strip_redirects(buffer, redirects)
        head = final_head(rest)
        if head is None:
            return None, b""
        body_at = len(buffer) - len(rest) + head.body_at
        whole = self.body_bytes <= BODY_KEPT
        if head.gzip:
            if body_at == heads and self.gzip is not None:
                decodes = self.gzip.decodes
            else:  # Phorge's body is not libcurl's (odd line ends): judged on what is held
                decodes = whole and gzdecodes(buffer[body_at:], max_output=GZIP_OUTPUT_MAX, max_cpu=GZIP_CPU_MAX_SEC)
            if not decodes:
                return None, b""
        return head.status, buffer[body_at:]

    def retry_after(self, redirects: int) -> float | None:
        """The final answer's Retry-After, in seconds from now, as retry_after_seconds reads it."""
        rest = strip_redirects(bytes(self.heads), redirects)
        head = final_head(rest)
        return None if head is None else retry_after_seconds(rest[: head.body_at], time.time())


def retry_after_seconds(head: bytes, now: float) -> float | None:
    """Retry-After (RFC 9110: delay-seconds, or an HTTP-date) of a head, in seconds after `now` (epoch), at most
    RETRY_AFTER_MAX_SEC; None when absent, unreadable or not in the future. The last such line counts."""
    value = b""
    for line in head.split(b"\n"):
        name, colon, rest = line.partition(b":")
        if colon and name.strip().lower() == b"retry-after":
            value = rest.strip()
    if value.isdigit():
        seconds = float(int(value[:12]))
    else:
        try:
            when = email.utils.parsedate_to_datetime(value.decode("latin-1"))
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - now if when.tzinfo is not None else -1.0  # an HTTP-date is in GMT
    return min(seconds, RETRY_AFTER_MAX_SEC) if seconds > 0 else None


class _Handle:
    """A libcurl easy handle for one hook, with the addresses its host names were last pinned to, the CA
    bundle its connections are verified against and the proxy they go through."""

    def __init__(self, ca: CaBundle, proxy: Proxy | None, resolver: Resolver) -> None:
        self.ca, self.proxy = ca, proxy
        self.curl = curl = pycurl.Curl()
        self.pins: dict[tuple[str, str, int], frozenset[str]] = {}
        self.transfer = transfer = _Transfer()
        self.kept = -1  # the socket of the connection kept after the last transfer
        self.bulky = False  # its last answer's headers are too large to keep the handle for
        self._poll: Any = None
        self._polled = -1
        self._url = b""
        self._fresh = False
        self.checked: Sequence[IPNetwork] | None = None  # the outbound blacklist its connections' addresses passed
        protocols = pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS
        for option, value in (
            (pycurl.NOSIGNAL, 1),
            (pycurl.PROTOCOLS, protocols),
            (pycurl.REDIR_PROTOCOLS, protocols),
            (pycurl.CUSTOMREQUEST, "POST"),
            (pycurl.FOLLOWLOCATION, 1),
            (pycurl.MAXREDIRS, MAX_REDIRECTS),
            (pycurl.SSL_VERIFYPEER, 1),
            (pycurl.SSL_VERIFYHOST, 2),
            (pycurl.HTTP_VERSION, HTTP_VERSION),
            (pycurl.USERAGENT, USER_AGENT),
            # Never a proxy (nor its exceptions) from the environment: only GORGE_WEBHOOK_PROXY.
            (pycurl.PROXY, "" if proxy is None else proxy.url),
            (pycurl.NOPROXY, "" if proxy is None else proxy.no_proxy),
            (pycurl.MAXCONNECTS, CONNECTIONS_PER_HANDLE),
        ):
            curl.setopt(option, value)
        if ca.path is not None:
            curl.setopt(pycurl.CAINFO, ca.path)
        curl.setopt(pycurl.WRITEFUNCTION, transfer.write)
        curl.setopt(pycurl.HEADERFUNCTION, transfer.header)
        curl.setopt(pycurl.OPENSOCKETFUNCTION, self._open_socket)
        self.hops: ProxyHops | None = None
        self._proxy_addresses: tuple[IPAddress, ...] = ()
        if proxy is not None:
            self.hops = hops = ProxyHops(resolver)

            def header(data: bytes) -> None:
                hops.header(data)
                transfer.header(data)

            curl.setopt(pycurl.HEADERFUNCTION, header)
            curl.setopt(
                pycurl.PREREQFUNCTION, lambda *_: pycurl.PREREQFUNC_OK if hops.sending() else pycurl.PREREQFUNC_ABORT
            )

    def _open_socket(self, purpose: int, address: Any) -> int:
        host, port = address.addr[0], address.addr[1]
        if self.hops is not None:
            if not self.hops.opening():
                return int(pycurl.SOCKET_BAD)
            proxy = self.proxy
            if proxy is not None and port == proxy.port and parse_ip(host) in self._proxy_addresses:
                return socket.socket(address.family, address.socktype, address.protocol).detach()
        if not self.transfer.allowed(host):
            return int(pycurl.SOCKET_BAD)
        return socket.socket(address.family, address.socktype, address.protocol).detach()

    def perform(
        self,
        *,
        url: bytes,
        pin: tuple[str, str, int, tuple[IPAddress, ...]] | None,
        proxy_addresses: tuple[IPAddress, ...],
        body: bytes,
        headers: Sequence[str],
        timeout_ms: int,
        blacklist: Sequence[IPNetwork],
        resolver: Resolver,
    ) -> Exchange:
        curl, transfer, hops = self.curl, self.transfer, self.hops
        transfer.reset(blacklist)
        if hops is not None:
            hops.resolver = resolver
            hops.reset(url, blacklist, time.monotonic() + timeout_ms / 1000)
        if url != self._url:
            try:
                curl.setopt(pycurl.URL, url)
            except (pycurl.error, ValueError, TypeError):
                self._url = b""
                return Exchange(pycurl.E_URL_MALFORMAT)
            self._url = url
        curl.setopt(pycurl.POSTFIELDS, body)
        curl.setopt(pycurl.HTTPHEADER, list(headers))
        curl.setopt(pycurl.TIMEOUT_MS, timeout_ms)
        self.checked = blacklist
        fresh = pin is not None and self._pin(pin)
        proxy = self.proxy
        if proxy is not None:
            self._proxy_addresses = proxy_addresses
            if parse_ip(proxy.host) is None:  # a name: libcurl connects where it was looked up
                fresh = self._pin(("proxy", proxy.host, proxy.port, proxy_addresses)) or fresh
        if fresh != self._fresh:
            curl.setopt(pycurl.FRESH_CONNECT, int(fresh))
            self._fresh = fresh
        error = 0
        try:
            curl.perform()
        except pycurl.error as exc:
            error = int(exc.args[0])
        if len(body) > HELD_BODY_MAX:  # pycurl holds the body it was given until the next one
            curl.setopt(pycurl.POSTFIELDS, b"")
        self.kept = int(curl.getinfo(pycurl.ACTIVESOCKET))
        self.bulky = transfer.head_bytes > IDLE_HEADERS_MAX
        redirects = int(curl.getinfo(pycurl.REDIRECT_COUNT))
        try:
            if hops is not None and (hops.refused or hops.error):
                return Exchange(hops.error, hops.refused, redirects=redirects)
            if transfer.refused or error:
                return Exchange(error, transfer.refused, redirects=redirects)
            status, body_seen = transfer.judge(redirects)
            wait = transfer.retry_after(redirects) if status in RETRY_AFTER_STATUSES else None
            return Exchange(0, False, status, redirects, transfer.body_bytes, body_seen, wait)
        finally:
            transfer.release()

    def _pin(self, pin: tuple[str, str, int, tuple[IPAddress, ...]]) -> bool:
        """Pins the first hop's host name to its checked addresses (libcurl keeps a pin until it is
        replaced); when they changed, the transfer starts on a fresh connection, not on one made for an
        address no longer checked."""
        scheme, host, port, addresses = pin
        wanted = frozenset(map(str, addresses))
        before = self.pins.get((scheme, host, port))
        fresh = before is not None and before != wanted
        if before != wanted:
            listed = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in addresses)
            self.curl.setopt(pycurl.RESOLVE, [f"{host}:{port}:{listed}"])
            self.pins[(scheme, host, port)] = wanted
        return fresh

    def reusable(self, blacklist: Sequence[IPNetwork], ca: CaBundle, proxy: Proxy | None) -> bool:
        """Whether the handle's kept connection may serve the next transfer: made under the outbound
        blacklist in force now (libcurl would also reuse it for a redirect hop, where a fresh connection is
        not asked for) and verified against the CA bundle in force now, through the proxy in force, and with
        no bytes on it that no request asked for (a second answer, a body after a 204, a close), which
        libcurl would read as the next answer. If not, the handle is replaced."""
        if self.checked is not None and blacklist is not self.checked and blacklist != self.checked:
            return False
        if ca != self.ca or proxy != self.proxy:
            return False
        return not self._unclean()

    def _unclean(self) -> bool:
        if self.kept < 0:
            return False
        if self._polled != self.kept:
            self._poll = select.poll()
            self._poll.register(self.kept, select.POLLIN)
            self._polled = self.kept
        return bool(self._poll.poll(0))

    def close(self) -> None:
        self.curl.close()


class Handles:
    """The hooks' handles: taken by the job delivering to a hook, given back after each attempt, at most
    `idle` of them kept between jobs."""

    def __init__(self, idle: int = IDLE_HANDLES) -> None:
        self.idle = idle
        self._idle: OrderedDict[str, list[_Handle]] = OrderedDict()
        self._waits: dict[str, float] = {}  # hook: time.monotonic() its last Retry-After asked to wait until
        self._lock = threading.Lock()

    def exchange(self, owner: str, *, ca: CaBundle, proxy: Proxy | None, **transfer: Any) -> Exchange:
        handle = self._take(owner)
        if handle is None or not handle.reusable(transfer["blacklist"], ca, proxy):
            if handle is not None:
                handle.close()
            handle = _Handle(ca, proxy, transfer["resolver"])
        try:
            exchange = handle.perform(**transfer)
        except BaseException:
            handle.close()
            raise
        if handle.bulky:
            handle.close()
        else:
            self._give(owner, handle)
        if exchange.retry_after is not None:
            with self._lock:
                self._waits[owner] = time.monotonic() + exchange.retry_after
        return exchange

    def retry_after(self, owner: str) -> float | None:
        """Until when (time.monotonic()) the owner's last 429 or 503 answer asked to wait, once: None if none did."""
        with self._lock:
            return self._waits.pop(owner, None)

    def _take(self, owner: str) -> _Handle | None:
        with self._lock:
            kept = self._idle.get(owner)
            if kept:
                handle = kept.pop()
                if not kept:
                    del self._idle[owner]
                return handle
        return None

    def _give(self, owner: str, handle: _Handle) -> None:
        closing: list[_Handle] = []
        with self._lock:
            kept = self._idle.setdefault(owner, [])
            self._idle.move_to_end(owner)
            if kept:
                closing.append(handle)  # one job a hook at a time: a second handle is not worth keeping
            else:
                kept.append(handle)
            while len(self._idle) > self.idle:
                closing.extend(self._idle.popitem(last=False)[1])
        for extra in closing:
            extra.close()

    def close(self) -> None:
        with self._lock:
            handles = [handle for kept in self._idle.values() for handle in kept]
            self._idle.clear()
        for handle in handles:
            handle.close()
