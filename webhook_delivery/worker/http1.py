"""HTTP/1.1 for deliveries: a request written whole, its answer read to the end and dropped, over sockets
pinned to checked addresses and kept alive in pools that every delivery thread shares.

It replaced urllib3 and http.client on the delivery path, which cost five times the CPU of an exchange
(docs/performance.md). The answer is read by http.client's rules and limits (a line at most 65,536 bytes,
at most 100 header lines, 100 Continue skipped, its framing and keep-alive rules), and fails with
http.client's exceptions, so that every failure keeps the libcurl number it had (transport.classify).

Sockets stay non-blocking: a read or write that cannot go on waits in poll() for the time left in the
attempt, so no answer, however it trickles or floods, holds a thread past the attempt's deadline.
"""

from __future__ import annotations

import math
import re
import select
import socket
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from http.client import BadStatusLine, HTTPException, IncompleteRead, LineTooLong, RemoteDisconnected, UnknownProtocol
from typing import Protocol, cast

MAX_LINE = 65536  # http.client's _MAXLINE
MAX_HEADERS = 100  # http.client's _MAXHEADERS
READ_SIZE = 64 * 1024
IDLE_PER_ADDRESS = 64  # idle keep-alive connections kept per receiver address; more in flight open their own
FRESH_SEC = 1.0  # an idle connection younger than this is used without asking whether the server closed it
ADDRESSES = 256  # receiver addresses with idle connections; the least recently used one is closed beyond
_END_OF_HEAD = (b"\r\n", b"\n", b"")
_FIELD_NAME = re.compile(r"[\041-\071\073-\176]*")  # what the email parser under http.client takes for a name


class Deadline(Protocol):
    def remaining(self) -> float:
        """Seconds left; raises TimeoutError once there are none."""


class ConnectFailed(OSError):
    """No checked address took the connection (curl's 7)."""


class ConflictingLength(Exception):
    """Content-Length given more than once, with different values."""


@dataclass(frozen=True)
class Key:
    """Which idle connections an exchange may use: the checked address, and the name TLS verifies."""

    scheme: str
    address: str
    port: int
    server_name: str  # https: the host name the certificate must carry; http: ""


@dataclass(frozen=True)
class Answer:
    status: int
    location: str | None  # every Location field, joined by ", " (as urllib3 joined them)
    size: int  # bytes of the body (after de-chunking)
    kept: bytes  # the body's first bytes, as many as asked for


def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


TLS_CONTEXT = _tls_context()


class Connection:
    """One socket, used by one thread at a time, with the bytes read from it and not yet parsed."""

    def __init__(self, sock: socket.socket, key: Key) -> None:
        self.sock = sock
        self.key = key
        self.received = False  # a byte of an answer arrived during the current exchange
        self.idle_since = 0.0
        self._buffer = b""
        self._at = 0  # how much of the buffer is parsed
        self._poll = select.poll()
        self._mask = 0
        sock.setblocking(False)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def dropped(self) -> bool:
        """An idle connection that the server closed, or that has bytes no request asked for. One idle for
        less than FRESH_SEC is not asked (a system call saved on every exchange of a busy receiver): if the
        server closed it all the same, the exchange finds out before any answer and starts again."""
        if self._at < len(self._buffer):
            return True
        return time.monotonic() - self.idle_since > FRESH_SEC and bool(self._await(select.POLLIN, 0))

    def _await(self, mask: int, milliseconds: int) -> list[tuple[int, int]]:
        if self._mask != mask:
            if self._mask:
                self._poll.modify(self.sock, mask)
            else:
                self._poll.register(self.sock, mask)
            self._mask = mask
        return self._poll.poll(milliseconds)

    def _wait(self, mask: int, deadline: Deadline) -> None:
        if not self._await(mask, math.ceil(deadline.remaining() * 1000)):
            deadline.remaining()
            raise TimeoutError("delivery deadline reached")

    def send(self, data: bytes, deadline: Deadline) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view) :]
            except (BlockingIOError, ssl.SSLWantWriteError):
                self._wait(select.POLLOUT, deadline)
            except ssl.SSLWantReadError:
                self._wait(select.POLLIN, deadline)

    def handshake(self, deadline: Deadline) -> None:
        sock = cast(ssl.SSLSocket, self.sock)
        while True:
            try:
                sock.do_handshake()
                return
            except ssl.SSLWantReadError:
                self._wait(select.POLLIN, deadline)
            except ssl.SSLWantWriteError:
                self._wait(select.POLLOUT, deadline)

    def _fill(self, deadline: Deadline) -> bool:
        """More bytes into the buffer; False at the end of the stream."""
        deadline.remaining()  # a flood that never makes us wait still ends at the deadline
        while True:
            try:
                data = self.sock.recv(READ_SIZE)
                break
            except (BlockingIOError, ssl.SSLWantReadError):
                self._wait(select.POLLIN, deadline)
            except ssl.SSLWantWriteError:
                self._wait(select.POLLOUT, deadline)
        if not data:
            return False
        self.received = True
        self._buffer = self._buffer[self._at :] + data
        self._at = 0
        return True

    def _line(self, deadline: Deadline) -> bytes:
        """As http.client's readline(MAX_LINE + 1): up to and with b"\\n", at most MAX_LINE + 1 bytes, what is
        left at the end of the stream."""
        while True:
            end = self._buffer.find(b"\n", self._at, self._at + MAX_LINE + 1)
            if end >= 0:
                line, self._at = self._buffer[self._at : end + 1], end + 1
                return line
            if len(self._buffer) - self._at > MAX_LINE or not self._fill(deadline):
                line = self._buffer[self._at : self._at + MAX_LINE + 1]
                self._at += len(line)
                return line

    def _take(self, limit: int, deadline: Deadline) -> bytes:
        """Up to `limit` bytes, at least one; b"" only at the end of the stream."""
        if self._at == len(self._buffer) and not self._fill(deadline):
            return b""
        data = self._buffer[self._at : self._at + limit]
        self._at += len(data)
        return data

    def answer(self, deadline: Deadline, keep: int) -> tuple[Answer, bool]:
        """The answer to the request just sent, its body drained; and whether the connection can serve
        another request."""
        if self._at == len(self._buffer) and not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            self._wait(select.POLLIN, deadline)  # an answer is never there yet: poll first, then read
        version, status, fields = self._head(deadline)
        will_close = _will_close(version, fields)
        chunked = (_first(fields, "transfer-encoding") or "").lower() == "chunked"
        length = None if chunked else _length(fields)
        if status in (204, 304) or 100 <= status < 200:
            length = 0
        body = _Body(keep)
        if chunked:
            self._chunks(body, deadline)
        elif length is None:
            while data := self._take(READ_SIZE, deadline):
                body.add(data)
            will_close = True
        else:
            self._exactly(length, body, deadline)
        locations = [value for name, value in fields if name == "location"]
        answer = Answer(status, ", ".join(locations) if locations else None, body.size, body.kept)
        return answer, not will_close and self._at == len(self._buffer)

    def _exactly(self, size: int, body: _Body, deadline: Deadline) -> None:
        """`size` bytes of body; IncompleteRead when the stream ends first."""
        while size:
            data = self._take(min(size, READ_SIZE), deadline)
            if not data:
                raise IncompleteRead(b"", size)
            body.add(data)
            size -= len(data)

    def _head(self, deadline: Deadline) -> tuple[int, int, list[tuple[str, str]]]:
        while True:
            version, status = self._status_line(deadline)
            fields = self._fields(deadline)
            if status != 100:
                break
        if version in ("HTTP/1.0", "HTTP/0.9"):
            return 10, status, fields
        if version.startswith("HTTP/1."):
            return 11, status, fields
        raise UnknownProtocol(version)

    def _status_line(self, deadline: Deadline) -> tuple[str, int]:
        raw = self._line(deadline)
        if len(raw) > MAX_LINE:
            raise LineTooLong("status line")
        if not raw:
            raise RemoteDisconnected("Remote end closed connection without response")
        line = str(raw, "iso-8859-1")
        parts = line.split(None, 2)
        version = parts[0] if len(parts) >= 2 else ""
        if not version.startswith("HTTP/"):
            raise BadStatusLine(line)
        try:
            status = int(parts[1])
        except ValueError:
            raise BadStatusLine(line) from None
        if not 100 <= status <= 999:
            raise BadStatusLine(line)
        return version, status

    def _fields(self, deadline: Deadline) -> list[tuple[str, str]]:
        if self._buffer.startswith(b"\r\n", self._at):  # no fields
            self._at += 2
            return []
        end = self._buffer.find(b"\r\n\r\n", self._at, self._at + MAX_LINE)
        if end >= 0 and b"\n" not in self._buffer[self._at : end].replace(b"\r\n", b""):
            # The usual answer: the whole head is in, every line ends in CRLF. Taken apart at once.
            raw = self._buffer[self._at : end].split(b"\r\n")
            if len(raw) < MAX_HEADERS:
                self._at = end + 4
                return _parsed([line + b"\r\n" for line in raw])
        lines: list[bytes] = []
        while True:
            line = self._line(deadline)
            if len(line) > MAX_LINE:
                raise LineTooLong("header line")
            lines.append(line)
            if len(lines) > MAX_HEADERS:
                raise HTTPException(f"got more than {MAX_HEADERS} headers")
            if line in _END_OF_HEAD:
                break
        return _parsed(lines[:-1])

    def _chunks(self, body: _Body, deadline: Deadline) -> None:
        while True:
            line = self._line(deadline)
            if len(line) > MAX_LINE:
                raise LineTooLong("chunk size")
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise IncompleteRead(b"") from None
            if size < 0:
                raise IncompleteRead(b"")
            if size == 0:
                break
            self._exactly(size, body, deadline)
            for _ in range(2):  # the line end after the chunk, whatever its two bytes
                if not self._take(1, deadline):
                    raise IncompleteRead(b"")
        while True:  # the trailer
            line = self._line(deadline)
            if len(line) > MAX_LINE:
                raise LineTooLong("trailer line")
            if line in _END_OF_HEAD:
                return


def _parsed(lines: list[bytes]) -> list[tuple[str, str]]:
    """Header lines (each with its line end) as (lower-case name, value), as the email parser under
    http.client reads them."""
    fields: list[tuple[str, str]] = []
    for raw in lines:
        text = str(raw, "iso-8859-1")
        if text[:1] in (" ", "\t"):
            if fields:  # a folded line continues the field before it
                fields[-1] = (fields[-1][0], fields[-1][1] + text)
            continue
        name, colon, value = text.partition(":")
        if not colon or not _FIELD_NAME.fullmatch(name):
            break  # the email parser takes the rest for a body: those lines are no fields
        fields.append((name.lower(), value.lstrip(" \t")))
    return [(name, value.rstrip("\r\n")) for name, value in fields]


class _Body:
    """A body counted and dropped, but for its first `keep` bytes."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.size = 0
        self.kept = b""

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if len(self.kept) < self.keep:
            self.kept += data[: self.keep - len(self.kept)]


def _first(fields: list[tuple[str, str]], name: str) -> str | None:
    return next((value for field, value in fields if field == name), None)


def _length(fields: list[tuple[str, str]]) -> int | None:
    values = [value for name, value in fields if name == "content-length"]
    if not values:
        return None
    try:
        if len({int(part) for value in values for part in value.split(",")}) > 1:
            raise ConflictingLength
    except ValueError:
        pass
    try:
        length = int(values[0])
    except ValueError:
        return None
    return length if length >= 0 else None


def _will_close(version: int, fields: list[tuple[str, str]]) -> bool:
    """http.client's rule: whether the server closes the connection after this answer."""
    connection = (_first(fields, "connection") or "").lower()
    if version == 11:
        return "close" in connection
    if _first(fields, "keep-alive") or "keep-alive" in connection:
        return False
    return "keep-alive" not in (_first(fields, "proxy-connection") or "").lower()


def connect(key: Key, addresses: tuple[str, ...], deadline: Deadline) -> Connection:
    """A new connection to the first of `addresses` that takes it, in turn, like curl; TLS verified against
    the key's server name."""
    last: OSError | None = None
    for address in addresses:
        sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(deadline.remaining())
            sock.connect((address, key.port))
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            last = exc
            continue
        if key.scheme != "https":
            return Connection(sock, key)
        try:
            tls = TLS_CONTEXT.wrap_socket(sock, server_hostname=key.server_name, do_handshake_on_connect=False)
        except BaseException:
            sock.close()
            raise
        connection = Connection(tls, key)
        try:
            connection.handshake(deadline)
        except BaseException:
            connection.close()
            raise
        return connection
    raise ConnectFailed("failed to connect") from last


class Pools:
    """Idle keep-alive connections by key, shared by every delivery thread."""

    def __init__(self, idle_per_key: int = IDLE_PER_ADDRESS, keys: int = ADDRESSES) -> None:
        self.idle_per_key = idle_per_key
        self.keys = keys
        self._idle: OrderedDict[Key, list[Connection]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: Key) -> Connection | None:
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                connection = idle.pop()
            if not connection.dropped():
                return connection
            connection.close()

    def give(self, connection: Connection) -> None:
        closing: list[Connection] = []
        with self._lock:
            idle = self._idle.get(connection.key)
            if idle is None:
                idle = self._idle[connection.key] = []
                while len(self._idle) > self.keys:
                    closing.extend(self._idle.popitem(last=False)[1])
            else:
                self._idle.move_to_end(connection.key)
            if len(idle) < self.idle_per_key:
                connection.idle_since = time.monotonic()
                idle.append(connection)
            else:
                closing.append(connection)
        for extra in closing:
            extra.close()

    def exchange(
        self, key: Key, addresses: tuple[str, ...], request: bytes, deadline: Deadline, keep: int = 0
    ) -> Answer:
        """Send `request` and read its answer, on an idle connection when there is one. A kept-alive
        connection that the server closed before any byte of an answer is replaced by a new one, once, as
        curl does."""
        connection = self.take(key)
        if connection is not None:
            try:
                return self._over(connection, request, deadline, keep)
            except ConnectionError:
                if connection.received:
                    raise
        return self._over(connect(key, addresses, deadline), request, deadline, keep)

    def _over(self, connection: Connection, request: bytes, deadline: Deadline, keep: int) -> Answer:
        connection.received = False
        try:
            connection.send(request, deadline)
            answer, reusable = connection.answer(deadline, keep)
        except BaseException:
            connection.close()
            raise
        if reusable:
            self.give(connection)
        else:
            connection.close()
        return answer

    def close(self) -> None:
        with self._lock:
            idle = [connection for connections in self._idle.values() for connection in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()
