"""The two channels: e-mail through Django's e-mail backend, and a Slack/Mattermost-style chat webhook.

Each send is bounded by the channel timeout. Errors are described by kind only (an exception's class, an
HTTP status): a requests error names its URL, and the chat URL is a secret.
"""

from __future__ import annotations

import smtplib

import requests
from django.core.mail import EmailMessage, get_connection

from .config import AlertConfig


class ChannelError(Exception):
    """A send failed; str() is safe to log (no URL, no credential)."""


def send_email(config: AlertConfig, subject: str, body: str) -> None:
    try:
        connection = get_connection(timeout=config.channel_timeout_sec)
        message = EmailMessage(subject, body, config.email_from, list(config.email_to), connection=connection)
        message.send(fail_silently=False)
    except smtplib.SMTPResponseException as exc:
        raise ChannelError(f"SMTP {exc.smtp_code}") from None
    except (TimeoutError, smtplib.SMTPException, OSError) as exc:
        raise ChannelError(type(exc).__name__) from None


def send_chat(config: AlertConfig, subject: str, body: str) -> None:
    timeout = config.channel_timeout_sec
    try:
        response = requests.post(
            config.chat_url, json={"text": body}, timeout=(timeout, timeout), allow_redirects=False
        )
    except requests.RequestException as exc:
        raise ChannelError(type(exc).__name__) from None
    try:
        if not 200 <= response.status_code < 300:
            raise ChannelError(f"HTTP {response.status_code}")
    finally:
        response.close()


SENDERS = {"email": send_email, "chat": send_chat}
