"""The way out of one Apprise send: a forward proxy of ours on 127.0.0.1, in the watcher's process, that the
send's own process (apprise_send.py) reaches every server through. requests takes the proxy from the
environment it is started with (HTTP_PROXY, HTTPS_PROXY), as it does for any program: nothing of Apprise or
requests is changed.

Whatever the plugin does, the guard holds:
* the address: every host asked for (a CONNECT's, a plain http request's) is resolved here, every address
  checked against Phorge's outbound blacklist (phorge/netguard.py), and the connection made to a checked
  address (no second look-up); a host in the blacklist is answered 403 and never connected to (`blocked`);
* the size: the bytes the servers send, every connection of the send together, at most `max_bytes`
  (TLS and heads included); past that the connection is shut (`too_large`);
* the time: `close()` at the send's deadline shuts every socket, whatever is under way.

Inside a CONNECT tunnel (https) it sees bytes only: not the status, not the headers, not a redirect. The send's
process tells the statuses it met (apprise_send.py), and Apprise's own switch (`redirects`) keeps requests
from following a redirect; a redirect followed anyway would come back here for its host, and be checked.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..config import IPNetwork
from ..phorge import netguard

HEAD_BYTES = 64 * 1024  # a request's head from the send's process: far more than any plugin writes
CHUNK = 16 * 1024
DROPPED = {b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive"}


@dataclass
class GuardReport:
    """What the send met on its way out; safe to log (no host, no URL)."""

    blocked: bool = False  # a host asked for is in the outbound blacklist: not connected to
    too_large: bool = False  # the servers sent more than the send may read: cut off
    error: str | None = None  # why a server could not be reached, by kind (requests' word: ConnectionError)
    received: int = 0  # bytes from the servers


class Guard:
    """One send's proxy: listening from `__enter__` to `close()` (its `__exit__`)."""

    def __init__(
        self,
        blacklist: Sequence[IPNetwork],
        max_bytes: int,
        deadline: float,
        resolver: netguard.Resolver = netguard.system_resolver,
    ) -> None:
        self.blacklist = tuple(blacklist)
        self.max_bytes = max_bytes
        self.deadline = deadline  # time.monotonic()
        self.resolver = resolver
        self.report = GuardReport()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port: int = self.listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Guard:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut every socket: a blocked read or write in any of the guard's threads ends at once."""
        with self._lock:
            self._closed = True
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in (self.listener, *sockets):
            _shut(sock)
            sock.close()
        for thread in threads:
            thread.join(1)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name="apprise-guard", daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _keep(self, sock: socket.socket) -> bool:
        """Track `sock` so that close() shuts it; False (and `sock` closed) once the guard is closed."""
        with self._lock:
            if not self._closed:
                self._sockets.append(sock)
                return True
        sock.close()
        return False

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self._keep(client):
                self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        try:
            head, rest = _read_head(client)
            if head is None:
                return
            line = head.split(b"\r\n", 1)[0].split(b" ")
            if len(line) != 3:
                client.sendall(_answer(400))
                return
            method, target, version = line
            if method == b"CONNECT":
                host, port = _host_port(target.decode("latin-1"), 443)
                upstream = self._open(client, host, port)
                if upstream is None:
                    return
                client.sendall(version + b" 200 Connection established\r\n\r\n")
                first = rest
            else:
                parts = urlsplit(target.decode("latin-1"))
                if parts.scheme != "http" or not parts.hostname:
                    client.sendall(_answer(400))
                    return
                upstream = self._open(client, parts.hostname, parts.port or 80)
                if upstream is None:
                    return
                first = _origin_form(head, parts.path or "/", parts.query) + rest
            upstream.sendall(first)
            self._relay(client, upstream, plain=method != b"CONNECT")
        except (OSError, ValueError):
            pass  # the send's process or the server went away, or close() shut the sockets
        finally:
            client.close()

    def _open(self, client: socket.socket, host: str, port: int) -> socket.socket | None:
        """A connection to `host` at an address outside the blacklist; None once the send's process was told
        why not (403: blacklisted, 502: not reachable)."""
        try:
            addresses = self._addresses(host, port)
        except (netguard.InvalidURI, OSError):
            self._refuse(client, 502, "ConnectionError")
            return None
        if any(netguard.is_blocked(address, self.blacklist) for address in addresses):
            self.report.blocked = True
            self._refuse(client, 403, None)
            return None
        for address in addresses:
            try:
                upstream = socket.create_connection((str(address), port), timeout=self._remaining())
            except OSError:
                continue
            upstream.settimeout(None)  # bounded by close() at the deadline
            return upstream if self._keep(upstream) else None
        self._refuse(client, 502, "ConnectionError")
        return None

    def _addresses(self, host: str, port: int) -> list[netguard.IPAddress]:
        literal = netguard.parse_ip(host)
        if literal is not None:
            return [literal]
        return self.resolver(host, port, self._remaining())

    def _refuse(self, client: socket.socket, status: int, error: str | None) -> None:
        if error is not None and self.report.error is None:
            self.report.error = error
        client.sendall(_answer(status))

    def _remaining(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    def _relay(self, client: socket.socket, upstream: socket.socket, *, plain: bool) -> None:
        """Both ways until either side closes; the servers' bytes counted against `max_bytes`. A plain answer's
        head says `Connection: close` to the send's process, so that its next request comes on a connection
        of its own (and its host is checked)."""
        head: bytes | None = b"" if plain else None  # the answer's head while it is read
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while True:
                for key, _ in selector.select():
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(CHUNK)
                    if not data:
                        return
                    allowed = self._count(data) if source is upstream else data
                    if allowed is None:
                        return
                    if source is upstream and head is not None:
                        head += allowed
                        if b"\r\n\r\n" not in head:
                            continue
                        allowed, head = _closing(head), None
                    key.data.sendall(allowed)

    def _count(self, data: bytes) -> bytes | None:
        """`data` as far as the send may still read; None once past the limit (the connection is then shut)."""
        with self._lock:
            allowed = self.max_bytes - self.report.received
            self.report.received += len(data)
            if len(data) <= allowed:
                return data
            self.report.too_large = True
        return None


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected, or already shut


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > HEAD_BYTES:
            return None, b""
        chunk = sock.recv(CHUNK)
        if not chunk:
            return None, b""
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    return head, rest


def _host_port(authority: str, default: int) -> tuple[str, int]:
    """`host:port` or `[v6]:port` of a CONNECT."""
    parts = urlsplit(f"//{authority}")
    if not parts.hostname:
        raise ValueError("no host")
    return parts.hostname, parts.port or default


def _origin_form(head: bytes, path: str, query: str) -> bytes:
    """The request as the server is sent it: its target without scheme and host, and one request on this
    connection (the next one, perhaps for another host, comes on a new connection and is checked again)."""
    line, _, rest = head.partition(b"\r\n")
    method, _target, version = line.split(b" ", 2)
    target = (path + (f"?{query}" if query else "")).encode("latin-1")
    return _closing(b"\r\n".join([b" ".join([method, target, version]), *([rest] if rest else [])]) + b"\r\n\r\n")


def _closing(answer: bytes) -> bytes:
    """The answer with its head saying `Connection: close` (and nothing else of its connection)."""
    head, rest = answer.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    kept = [line for line in lines[1:] if line.split(b":", 1)[0].strip().lower() not in DROPPED]
    return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n" + rest


def _answer(status: int) -> bytes:
    return f"HTTP/1.1 {status} Guard\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
