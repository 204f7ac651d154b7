"""A loopback TCP server whose every connection is handled by a test-supplied function."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import Any

# How often a test server's serve_forever() looks for shutdown(): stopping one costs at most this (its
# default, 0.5 s, was paid by every test that stopped a server).
STOP_POLL_SEC = 0.02


def serve_in_thread(server: socketserver.BaseServer, *, start: bool = True) -> threading.Thread:
    """A daemon thread serving `server` until its shutdown(), which then returns within STOP_POLL_SEC."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": STOP_POLL_SEC}, daemon=True)
    if start:
        thread.start()
    return thread


class RawServer:
    def __init__(self, handler: Callable[[socket.socket], None], host: str = "127.0.0.1", **wrap: Any) -> None:
        self.handler = handler
        self.listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._wrap = wrap.get("wrap")

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        try:
            if self._wrap is not None:
                client = self._wrap(client)
            self.handler(client)
        except OSError:
            pass
        finally:
            try:
                client.close()
            except OSError:
                pass

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way at once
        except OSError:
            pass
        self.listener.close()
        self._thread.join(2)


def read_message(sock: socket.socket, buffer: bytes = b"") -> tuple[bytes, bytes, bytes] | None:
    """One HTTP request off `sock` after what `buffer` already holds: (head up to its blank line, body by
    its Content-Length, what followed it); None when the client closes first."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[:length], rest[length:]


def read_request(sock: socket.socket) -> bytes:
    """Reads one request (its bytes; empty when the client closed first), to answer it."""
    message = read_message(sock)
    return b"" if message is None else message[0] + b"\r\n\r\n" + message[1]


def trickling_http(sock: socket.socket) -> None:
    """Reads the request, then answers one byte every 0.3 s for ever."""
    read_message(sock)
    for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" * 1000:
        sock.sendall(bytes([byte]))
        time.sleep(0.3)


def endless_http(sock: socket.socket) -> None:
    """Reads the request, then answers 200 with a body that never ends (a 512 MB answer, and more)."""
    read_message(sock)
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 600000000\r\n\r\n")
    chunk = b"x" * 65536
    for _ in range(9000):
        sock.sendall(chunk)


class Counting:
    """A local HTTP server answering every request with `status` and a Location `where()` names; it keeps
    each request line."""

    def __init__(self, status: int, where: Callable[[], str]) -> None:
        self.status = status
        self.where = where
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.server = RawServer(self._answer)

    def _answer(self, sock: socket.socket) -> None:
        buffer = b""
        while (message := read_message(sock, buffer)) is not None:
            head, _body, buffer = message
            with self.lock:
                self.lines.append(head.split(b"\r\n", 1)[0].decode())
            location = f"Location: {self.where()}\r\n" if self.status >= 300 else ""
            sock.sendall(f"HTTP/1.1 {self.status} X\r\n{location}Content-Length: 2\r\n\r\nok".encode())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def __enter__(self) -> Counting:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__()
