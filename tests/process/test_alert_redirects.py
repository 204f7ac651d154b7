"""Alert channels never follow a redirect (issue 39, finding 5): Apprise's real json:// plugin against a local
server answering 302, 307, 308 to another origin, and a redirect loop. Before, a 307 re-posted the alert to
the other origin, a 302 turned it into a GET that counted as sent, and a loop made 31 POSTs per pass. Now a
3xx is a failed send: one request, nothing to the other origin, logged once, retried with backoff."""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.alert_channels import alert_config, failing_hook
from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.rawserver import RawServer, read_message
from tests.support.receiver import Receiver
from webhook_delivery.alerts import apprise_channels
from webhook_delivery.alerts.channels import ChannelError, send_chat
from webhook_delivery.alerts.config import AlertConfig
from webhook_delivery.alerts.models import AlertChannel, AlertNotification
from webhook_delivery.alerts.watcher import Watcher


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


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_a_failed_send_and_never_followed(status: int) -> None:
    with Counting(200, lambda: "") as elsewhere, Counting(status, lambda: f"{elsewhere.url}/x") as server:
        [target] = apprise_channels.targets((f"json://127.0.0.1:{server.server.port}/SECRET/alerts",))
        with pytest.raises(ChannelError) as failed:
            apprise_channels.send(target, 3, "subject", "body")
        assert str(failed.value) == f"HTTP {status}: a redirect, not followed"
        assert not failed.value.refused, "retried with backoff, not given up"
        assert server.lines == ["POST /SECRET/alerts HTTP/1.1"], "one request, as made"
        assert elsewhere.lines == [], "nothing reached the other origin"


def test_a_redirect_loop_is_one_request() -> None:
    holder: list[Counting] = []
    with Counting(302, lambda: f"{holder[0].url}/again") as server:
        holder.append(server)
        [target] = apprise_channels.targets((f"json://127.0.0.1:{server.server.port}/loop",))
        with pytest.raises(ChannelError, match=r"^HTTP 302: a redirect, not followed$"):
            apprise_channels.send(target, 3, "subject", "body")
        assert len(server.lines) == 1


def test_the_chat_webhook_follows_no_redirect_either() -> None:
    with Counting(200, lambda: "") as elsewhere, Counting(307, lambda: f"{elsewhere.url}/x") as server:
        config = dataclasses.replace(AlertConfig(channel_timeout_sec=3), chat_url=f"{server.url}/hooks/SECRET")
        with pytest.raises(ChannelError, match=r"^HTTP 307: a redirect, not followed$"):
            send_chat(config, "subject", "body")
        assert len(server.lines) == 1 and elsewhere.lines == []


@PHORGE_DB
def test_a_redirecting_channel_is_logged_once_and_retried_with_backoff(
    phorge: Phorge, receiver: Receiver, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    failing_hook(phorge, receiver, "redirected-alerts")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    with Counting(200, lambda: "") as elsewhere, Counting(302, lambda: f"{elsewhere.url}/x") as server:
        config = dataclasses.replace(
            alert_config(None, None), apprise_urls=(f"json://127.0.0.1:{server.server.port}/SECRET/alerts",)
        )
        watcher = Watcher(config, delivery)
        channel = "apprise:json://127.0.0.1#1"
        assert watcher.tick().failed == {channel: "HTTP 302: a redirect, not followed"}
        state = AlertChannel.objects.get(name=channel)
        assert state.retry_at is not None and state.failures == 1
        watcher.tick()
        assert len(server.lines) == 1, "backing off: not tried again at once"
        AlertChannel.objects.update(retry_at=None)
        assert watcher.tick().failed == {channel: "HTTP 302: a redirect, not followed"}
        assert AlertChannel.objects.get(name=channel).failures == 2
        assert len(server.lines) == 2 and elsewhere.lines == []
    assert AlertNotification.objects.filter(channel=channel, sent_at__isnull=True).count() == 1, "still to send"
    failing = [r for r in caplog.records if getattr(r, "event", "") == "alert.channel_failing"]
    assert [getattr(r, "channel", "") for r in failing] == [channel], "logged once"
    assert "SECRET" not in caplog.text
