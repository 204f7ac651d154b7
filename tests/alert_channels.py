"""Real alert channels for the tests: an SMTP server on 127.0.0.1 (aiosmtpd) that can stop and start on its
port, and a chat webhook that is a path of the real receiver (tests/receiver.py). Fixtures in conftest.py."""

from __future__ import annotations

import email
import json
import socket
import threading
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

from tests.receiver import Receiver


class _Sink:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        with self.lock:
            self.messages.append(email.message_from_bytes(envelope.content))
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Smtp:
    """An SMTP server on 127.0.0.1 that can be stopped and started again on the same port."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.sink = _Sink()
        self.controller: Controller | None = None

    def start(self) -> Smtp:
        self.controller = Controller(self.sink, hostname="127.0.0.1", port=self.port)
        self.controller.start()
        return self

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    @property
    def bodies(self) -> list[str]:
        with self.sink.lock:
            messages = list(self.sink.messages)
        return [f"Subject: {m['Subject']}\n{m.get_payload(decode=True).decode()}" for m in messages]  # type: ignore[union-attr]


class Chat:
    """The chat webhook: a path of the real receiver; `hang()` holds every call until `answer()`."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.url = receiver.url("/chat/T0KEN-chat-secret/ok")
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._accepted: list[Any] = []
        receiver.state.on_receive = self._gate

    def _gate(self, received: Any) -> None:
        # A hung call is never answered (the sender gave up on it): the connection is dropped once released.
        if received.path.startswith("/chat/") and not self._open.is_set():
            self._open.wait(20)
            raise ConnectionAbortedError("hung call dropped")
        if received.path.startswith("/chat/"):
            # Taken before its answer leaves: the receiver marks a request answered only after sendall(),
            # which the sender may see (and a test then read) first.
            with self._lock:
                self._accepted.append(received)

    def hang(self) -> None:
        self._open.clear()

    def answer(self) -> None:
        self._open.set()

    @property
    def texts(self) -> list[str]:
        """What the chat service accepted (answered, or about to be), in order."""
        with self._lock:
            return [json.loads(r.body)["text"] for r in self._accepted]
