"""E-mail through Django's e-mail backend, and what every channel shares: its limits, its error and the chat
webhook's text (the other channels: apprise_channels.py, the chat webhook among them, and phorge_tasks.py).

Each send is bounded in total by the channel timeout (an e-mail's by outbound.Watchdog, an Apprise send's by
the end of its process and proxy: a server that trickles cannot stretch it). Errors are described by kind
only (an exception's class, an SMTP code or an HTTP status): a library's error may name its URL, and a chat
URL is a secret. `ChannelError.refused` tells a channel that
refuses what it was given (a 4xx or 5xx SMTP answer, a 4xx HTTP one) from one that is down.
"""

from __future__ import annotations

import smtplib
from dataclasses import dataclass
from email.header import Header
from email.message import Message
from typing import Any

from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend

from ..outbound import WatchedSMTP, WatchedSMTPSSL, watched
from .config import AlertConfig


@dataclass(frozen=True)
class Limits:
    """What one pass sends on a channel: messages of at most `chars` characters and `entries` entries, at
    most `parts` of them; the rest are counted at the end (and are on the dashboard)."""

    chars: int
    entries: int
    parts: int


# A chat message stays under Mattermost's default post limit (16,383) and Slack's (40,000).
LIMITS = {"email": Limits(1_000_000, 200, 1), "chat": Limits(12_000, 1000, 4)}


class ChannelError(Exception):
    """A send failed; str() is safe to log (no URL, no credential)."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused  # the channel refuses this message (it would refuse it again)


class WatchedEmailBackend(EmailBackend):
    """Django's SMTP backend whose sockets the send's Watchdog can shut (a trickling server)."""

    @property
    def connection_class(self) -> Any:
        return WatchedSMTPSSL if self.use_ssl else WatchedSMTP


class AlertEmail(EmailMessage):
    """Django's e-mail, its subject folded as one header when it is not ASCII: Django encodes such a subject
    without the header's name, so the first encoded word does not fit beside `Subject:` and goes to a line of
    its own, after an empty one, and the subject read back starts with a space."""

    def message(self, **kwargs: Any) -> Any:
        msg = super().message(**kwargs)
        subject = str(self.subject)
        if not subject.isascii():
            del msg["Subject"]
            # Message's own __setitem__: Django's refuses a Header (it checks the text, which was checked above).
            Message.__setitem__(msg, "Subject", Header(subject, self.encoding or "utf-8", header_name="Subject"))
        return msg


def send_email(config: AlertConfig, subject: str, body: str) -> None:
    timeout = config.channel_timeout_sec
    try:
        with watched(timeout) as watchdog:
            connection = get_connection(timeout=timeout)
            if type(connection) is EmailBackend:  # the configured SMTP server: bounded in total, not per read
                connection = WatchedEmailBackend(timeout=timeout)
            message = AlertEmail(subject, body, config.email_from, list(config.email_to), connection=connection)
            message.send(fail_silently=False)
    except smtplib.SMTPResponseException as exc:
        raise ChannelError(f"SMTP {exc.smtp_code}", refused=500 <= exc.smtp_code < 600) from None
    except (TimeoutError, smtplib.SMTPException, OSError) as exc:
        if watchdog.fired:
            raise ChannelError(f"no complete exchange within {timeout:g} s") from None
        raise ChannelError(type(exc).__name__) from None


def chat_text(body: str) -> str:
    """The message as Slack and Mattermost must get it: &, < and > escaped (their markup, and Slack's
    <!channel> and <url|label>, start with them). Phorge's text in it was neutralised by messages.plain()."""
    return body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
