"""A real HTTP receiver on loopback that records every request byte for byte.

Answers by the last path segment, as the golden captures' receiver did: `ok` 200, `sNNN` that status,
`timeout` holds the connection longer than any test timeout, `r307`/`r302` redirect to the same path
ending in `redirected`, `slow` answers 200 after `slow_seconds`. A hook path (the path without its last
segment) listed in `state.down` answers 503 whatever its segment says: an outage, ended by taking it out. It
also tracks concurrent calls per hook path and can run in its own process (`python -m tests.support.receiver`).
"""

from __future__ import annotations

import json
import select
import socket
import socketserver
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.rawserver import read_message, serve_in_thread


@dataclass
class Received:
    method: str
    path: str
    request_line: str
    headers: list[tuple[str, str]]
    raw_head: bytes
    body: bytes
    at: float
    answered_at: float = 0.0

    @property
    def object_phid(self) -> str:
        return str(json.loads(self.body)["object"]["phid"])

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


@dataclass
class ReceiverState:
    slow_seconds: float = 0.5
    hold_seconds: float = 30.0
    redirect_to: str = ""
    retry_after: str = ""  # sent as Retry-After with every 429 and 503 answer when set
    down: set[str] = field(default_factory=set)  # hook paths in an outage: 503 for every call
    on_receive: Callable[[Received], None] | None = None
    requests: list[Received] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    max_in_flight: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _hook_path(path: str) -> str:
    return path.rsplit("/", 1)[0]


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(60)
        buffer = b""
        try:
            while (message := read_message(sock, buffer)) is not None:
                head, body, buffer = message
                lines = head.decode("latin-1").split("\r\n")
                request_line = lines[0]
                headers = [tuple(line.split(": ", 1)) for line in lines[1:] if ": " in line]
                method, path, _version = request_line.split(" ", 2)
                received = Received(
                    method, path, request_line, [(k, v) for k, v in headers], head + b"\r\n\r\n", body, time.time()
                )
                if not self._answer(sock, received):
                    return
        except OSError:
            return

    def _answer(self, sock: socket.socket, received: Received) -> bool:
        state = self.server.state
        hook = _hook_path(received.path)
        with state.lock:
            state.requests.append(received)
            state.in_flight[hook] += 1
            state.max_in_flight[hook] = max(state.max_in_flight[hook], state.in_flight[hook])
        counted = True

        def answered() -> None:
            # The call ends when its answer leaves: counting until this thread runs again after sendall()
            # would see the sender's next call overlap whenever this thread waits for the GIL.
            nonlocal counted
            if counted:
                counted = False
                with state.lock:
                    state.in_flight[hook] -= 1

        try:
            behaviour = received.path.rsplit("/", 1)[-1]
            if hook in state.down:
                behaviour = "s503"
            if behaviour == "timeout":
                time.sleep(state.hold_seconds)
                return False
            status, extra = 200, ""
            if state.on_receive is not None:
                state.on_receive(received)
            if behaviour == "slow":
                time.sleep(state.slow_seconds)
                if _client_gone(sock):
                    return False
            elif behaviour.startswith("s") and behaviour[1:].isdigit():
                status = int(behaviour[1:])
            elif behaviour.startswith("r") and behaviour[1:].isdigit():
                status = int(behaviour[1:])
                extra = f"Location: {received.path.rsplit('/', 1)[0]}/redirected\r\n"
            elif behaviour == "away":
                status, extra = 302, f"Location: {state.redirect_to}\r\n"
            elif behaviour == "loop":
                status, extra = 302, f"Location: {received.path}\r\n"
            if status in (429, 503) and state.retry_after:
                extra += f"Retry-After: {state.retry_after}\r\n"
            reason = {200: "OK", 204: "No Content", 307: "Temporary Redirect", 302: "Found"}.get(status, "X")
            body = b"" if status == 204 else b"ok"
            length = "" if status == 204 else f"Content-Length: {len(body)}\r\n"
            answer = f"HTTP/1.1 {status} {reason}\r\n{extra}{length}\r\n".encode() + body
            answered()
            sock.sendall(answer)
            received.answered_at = time.time()
            return True
        finally:
            answered()


def _client_gone(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    state: ReceiverState


class Receiver:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        _Server.address_family = family
        self.server = _Server((host, port), _Handler)
        self.server.state = ReceiverState(**options)
        self.host = host
        self.port = int(self.server.server_address[1])
        self._thread = serve_in_thread(self.server, start=False)

    @property
    def state(self) -> ReceiverState:
        return self.server.state

    @property
    def requests(self) -> list[Received]:
        with self.state.lock:
            return list(self.state.requests)

    def url(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    """Run in its own process; prints its port, then a JSON summary when stdin closes."""
    receiver = Receiver(slow_seconds=float(sys.argv[1]) if len(sys.argv) > 1 else 0.5)
    with receiver:
        print(receiver.port, flush=True)
        sys.stdin.read()
        state = receiver.state
        with state.lock:
            summary = {
                "requests": [
                    {"path": r.path, "body": r.body.decode(), "at": r.at, "answered_at": r.answered_at}
                    for r in state.requests
                ],
                "max_in_flight": dict(state.max_in_flight),
            }
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()


def calls(receiver: Receiver, prefix: str) -> Counter[str]:
    """Object PHIDs the receiver was sent under this path prefix, with how often each came."""
    return Counter(r.object_phid for r in list(receiver.requests) if r.path.startswith(prefix))
