"""alerts/channels.py in a process of its own: the chat webhook follows no redirect."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.rawserver import Counting
from webhook_delivery.alerts.channels import ChannelError, send_chat
from webhook_delivery.alerts.config import AlertConfig


def test_the_chat_webhook_follows_no_redirect_either() -> None:
    with Counting(200, lambda: "") as elsewhere, Counting(307, lambda: f"{elsewhere.url}/x") as server:
        config = dataclasses.replace(AlertConfig(channel_timeout_sec=3), chat_url=f"{server.url}/hooks/SECRET")
        with pytest.raises(ChannelError, match=r"^HTTP 307: a redirect, not followed$"):
            send_chat(config, "subject", "body")
        assert len(server.lines) == 1 and elsewhere.lines == []
