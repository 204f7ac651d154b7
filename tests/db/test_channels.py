"""alerts/channels.py through the watcher: Phorge's text in a chat message can neither mention nor link, and a
line break of Phorge's reaches neither a mail header nor a line of its own."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.support.alert_channels import (
    Chat,
    Smtp,
    alert_config,
    configure_email,
    hostile_hook,
)
from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.receiver import Receiver
from webhook_delivery.alerts.watcher import Watcher


@PHORGE_DB
def test_chat_markup_from_phorge_neither_mentions_nor_links(
    phorge: Phorge, receiver: Receiver, chat: Chat, settings: Any
) -> None:
    hostile_hook(phorge, receiver, error_type="http", error_code="[y](https://e.x)")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    Watcher(alert_config(None, chat), delivery).tick()
    [text] = chat.texts
    assert "<!channel>" not in text and "<https://" not in text and "<" not in text and ">" not in text
    words = text.replace("\N{WORD JOINER}", " ").split()
    for mention in ("@here", "@all", "@channel"):
        assert mention not in text.split(), f"{mention} would ping the channel"
        assert mention.removeprefix("@") in words  # still readable
    assert "](" not in text, "no markdown link"
    assert "&lt;!channel&gt;" in text and "&amp;amp;" in text, "escaped as Slack and Mattermost read it"
    assert "https://evil.example" not in text, "no link that the service would show under its name"


@PHORGE_DB
def test_line_breaks_in_error_types_reach_neither_a_header_nor_a_forged_line(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, settings: Any
) -> None:
    for key, value in configure_email(smtp).items():
        setattr(settings, key, value)
    hostile_hook(phorge, receiver, error_type="http\r\nBcc: evil@example.com\r\n\r\nRECOVERED  all fine")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    result = Watcher(alert_config(smtp, None), delivery).tick()
    assert result.sent == {"email": 1} and not result.failed
    [body] = smtp.bodies
    assert "Bcc" not in body.split("\n", 1)[0]
    assert not any(line.startswith("RECOVERED") for line in body.splitlines())
    assert not [m for m in smtp.sink.messages if m["Bcc"]]
