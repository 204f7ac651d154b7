"""alerts/sending.py: a hanging channel is logged once, counted and backed off, and holds up no other; a note
the channel refuses is given up after three tries and the next one goes out."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from typing import Any

import pytest

from tests.support.alert_channels import (
    channel_config,
    failing_hook,
)
from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.rawserver import RawServer, read_message, trickling_http
from tests.support.receiver import Receiver
from webhook_delivery.alerts import metrics
from webhook_delivery.alerts.models import AlertChannel, AlertNotification
from webhook_delivery.alerts.watcher import Watcher


class Refusing:
    """A chat service that refuses (HTTP 400) any message holding `marker` and takes the rest."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.accepted: list[str] = []
        self.refused = 0
        self.lock = threading.Lock()

    def __call__(self, sock: socket.socket) -> None:
        message = read_message(sock)
        assert message is not None
        text = json.loads(message[1])["text"]
        with self.lock:
            if self.marker in text:
                self.refused += 1
                sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            self.accepted.append(text)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


@PHORGE_DB
def test_a_hanging_channel_is_logged_once_counted_and_backed_off(
    phorge: Phorge, receiver: Receiver, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    failing_hook(phorge, receiver, "down")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    with RawServer(trickling_http) as server:
        channel = dataclasses.replace(channel_config(), email_to=(), chat_url=f"http://127.0.0.1:{server.port}/x")
        watcher = Watcher(dataclasses.replace(channel, interval_sec=0.1), delivery)
        before = metrics.NOTIFICATIONS_FAILED.labels("chat")._value.get()
        started = time.monotonic()
        watcher.tick()
        assert time.monotonic() - started < 5
        for _ in range(5):
            watcher.tick()
            time.sleep(0.1)
    failing = [r for r in caplog.records if getattr(r, "event", "") == "alert.channel_failing"]
    assert len(failing) == 1
    tries = metrics.NOTIFICATIONS_FAILED.labels("chat")._value.get() - before
    assert 1 <= tries < 6, "retried with a growing wait, not at every pass"


@PHORGE_DB
def test_a_note_the_channel_refuses_is_given_up_after_three_tries_and_the_next_goes_out(
    phorge: Phorge, receiver: Receiver, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    failing_hook(phorge, receiver, "unsendable")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    service = Refusing("unsendable")
    with RawServer(service) as server:
        channel = dataclasses.replace(channel_config(), email_to=(), chat_url=f"http://127.0.0.1:{server.port}/x")
        watcher = Watcher(dataclasses.replace(channel, interval_sec=0.05), delivery)
        for _ in range(3):
            watcher.tick()
            AlertChannel.objects.update(retry_at=None)  # the backoff's wait, over
        assert service.refused == 3
        assert AlertNotification.objects.filter(given_up=True).count() == 1
        failing_hook(phorge, receiver, "fine")
        watcher.tick()
    assert [t for t in service.accepted if "`fine`" in t], "the alert after the refused one went out"
    [given_up] = [r for r in caplog.records if getattr(r, "event", "") == "alert.given_up"]
    assert getattr(given_up, "notifications", 0) == 1
