"""Real alert channels for the tests: an SMTP server on 127.0.0.1 (aiosmtpd) that can stop and start on its
port, and a chat webhook that is a path of the real receiver (tests/support/receiver.py). Fixtures in conftest.py."""

from __future__ import annotations

import dataclasses
import email
import json
import socket
import threading
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

from tests.support.helpers import Phorge
from tests.support.receiver import Receiver
from webhook_delivery.alerts.config import AlertConfig


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


SECRET = "s3cret"


def alert_config(smtp: Smtp | None, chat: Chat | None, **changes: Any) -> AlertConfig:
    return dataclasses.replace(
        AlertConfig(
            email_to=("ops@example.com",) if smtp else (),
            chat_url=chat.url if chat else "",
            site_url="https://gorge.example.com",
            channel_timeout_sec=2.0,  # an Apprise send starts a process (about 0.3 s): room for a busy machine
            interval_sec=0.2,
        ),
        **changes,
    )


def configure_email(smtp: Smtp) -> Any:
    return {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": smtp.port,
    }


def failing_hook(phorge: Phorge, receiver: Receiver, name: str, *, failures: int = 3) -> str:
    """A hook whose URI carries a credential, with `failures` requests failed just now (HTTP 500)."""
    uri = f"http://user:{SECRET}@127.0.0.1:{receiver.port}/{name}/s500"
    hook = phorge.hook(uri, name=name)
    now = phorge.now()
    for _ in range(failures):
        phorge.request(
            hook,
            properties=json.dumps(
                {"retry": "forever", "transactionPHIDs": [], "triggerPHIDs": [hook]}
                | {"errorType": "http", "errorCode": "500"}
            ),
            lastRequestResult="fail",
            lastRequestEpoch=now,
            dateModified=now,
        )
    return hook


def hook_keys(phorge: Phorge) -> list[str]:
    return [k.decode() if isinstance(k, bytes) else k for (k,) in phorge.execute("SELECT hmacKey FROM herald_webhook")]


def assert_no_secrets(texts: list[str], phorge: Phorge, chat: Chat | None = None) -> None:
    secrets = [SECRET, "user:", *hook_keys(phorge)]
    if chat is not None:
        secrets += [chat.url, "T0KEN-chat-secret", "/chat/"]
    for body in texts:
        for secret in secrets:
            assert secret not in body, f"{secret!r} leaked into: {body[:300]}"


def count_in(texts: list[str], *needles: str) -> int:
    return sum(1 for text in texts if all(needle in text for needle in needles))


def channel_config(**changes: Any) -> AlertConfig:
    return dataclasses.replace(AlertConfig(email_to=("ops@example.com",), channel_timeout_sec=1.5), **changes)


HOSTILE = "<!channel> <https://evil.example|click here> @here @all @channel [x](https://evil.example) &amp;"


def hostile_hook(phorge: Phorge, receiver: Receiver, *, error_type: str = "http", error_code: str = "500") -> str:
    hook = phorge.hook(receiver.url("/hostile/s500"), name=HOSTILE)
    now = phorge.now()
    properties = {"retry": "forever", "transactionPHIDs": [], "triggerPHIDs": [hook]}
    for _ in range(3):
        phorge.request(
            hook,
            properties=json.dumps(properties | {"errorType": error_type, "errorCode": error_code}),
            lastRequestResult="fail",
            lastRequestEpoch=now,
            dateModified=now,
        )
    return hook
