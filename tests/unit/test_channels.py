"""alerts/channels.py, database-free: an SMTP server that trickles costs one channel timeout; a subject that
is not ASCII is folded as one header (the rest: tests/db/test_channels.py; the chat webhook:
tests/unit/test_apprise_channels.py)."""

from __future__ import annotations

import re
import socket
import time
from typing import Any

import pytest

from tests.support.alert_channels import channel_config, configure_email
from tests.support.rawserver import RawServer
from webhook_delivery.alerts.channels import ChannelError, send_email


def trickling_smtp(sock: socket.socket) -> None:
    for byte in b"220 mail.example ESMTP ready, slowly\r\n" * 100:
        sock.sendall(bytes([byte]))
        time.sleep(0.3)


def test_a_trickling_smtp_server_costs_one_channel_timeout(settings: Any) -> None:
    with RawServer(trickling_smtp) as server:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
        started = time.monotonic()
        with pytest.raises(ChannelError, match=r"no complete exchange within 1\.5 s"):
            send_email(channel_config(), "s", "b")
        assert time.monotonic() - started < 4


def test_a_non_ascii_subject_is_folded_without_an_empty_first_line(smtp: Any, settings: Any) -> None:
    """Issue 39, finding 7: Django encoded a non-ASCII subject without the header's name, so the first
    encoded word went to a line of its own after an empty `Subject:`, and the subject read back started with a
    space."""
    from email.header import decode_header, make_header

    for key, value in configure_email(smtp).items():
        setattr(settings, key, value)
    subjects = [
        "[gorge-webhook] Hook `ci-bridge \u00fcn\u00efcode` failing since 14:02 UTC",
        "[gorge-webhook] Hook `\u00dcberwachung der Bestellungen (Lager S\u00fcd)` failing since\u2026",
        "[gorge-webhook] Hook `\u77ed\u3044` failing",
        "[gorge-webhook] an ASCII subject long enough to be folded by the mail library somewhere",
    ]
    for subject in subjects:
        send_email(channel_config(), subject, "body")
    received = [message["Subject"] for message in smtp.sink.messages]
    assert len(received) == len(subjects)
    for raw, subject in zip(received, subjects, strict=True):
        assert raw.split("\n")[0].strip(), f"an empty first line: {raw!r}"
        unfolded = re.sub(r"\r?\n(?=[ \t])", "", raw)  # RFC 5322's unfolding
        assert str(make_header(decode_header(unfolded))) == subject
