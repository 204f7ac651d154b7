"""Any chat through Apprise (GORGE_ALERT_URLS): each URL a channel of its own, sent on by sending.py like the
others (a lease, a thread, backoff, refusals given up). The chat webhook (GORGE_ALERT_WEBHOOK_URL) is one
more Apprise send: its JSON plugin, posting only `{"text": ...}` (`chat_plugin`).

A URL is a secret (a token is the host part of many of them: `slack://T.../B.../x...`, `tgram://<bot token>/`),
so it is named by its scheme and its host, the host only where Apprise's service takes a host there
(`json://`, `mmosts://`, `matrixs://`, `ntfys://...`): `apprise:json://127.0.0.1#1`, `apprise:slack#2`.

A send is bounded as the other channels are: Apprise's plugins call `requests.post` (get, put, request) on
the name `requests` of their own modules, and that name, in every plugin module Apprise has loaded, is bound
to outbound.ROUTED (`_route`); the plugin runs inside outbound.bounded_requests, so its calls go through that
block's OutgoingSession (the Watchdog shuts its sockets once GORGE_ALERT_CHANNEL_TIMEOUT_SEC is up; each
answer is read up to ANSWER_BYTES) while requests itself stays as it is for every other caller. Services
that do not send over HTTP (mail, IRC, MQTT, XMPP, syslog, the desktop ones) open sockets of their own that
nothing here can shut: they are refused (`problem`), e-mail having its own channel.

The text is rendered for the markup of the service (markup.py: escaped for Markdown, HTML, or the plain text
of a service that shows it as it is) in the format the plugin sends, and declared in that format, so that
Apprise converts nothing; on top of messages.plain() (no mention, link or line of Phorge's) no service's own
markup (`<!channel>`, `<@id>`, `**bold**`, HTML) holds either. No redirect is followed: a 3xx answer is a
failed send (outbound.bounded_requests). Apprise's own log lines can hold a URL with its token (its DEBUG
lines do): its logger is silenced (gorge_site/settings.py), and failures are told by our lines, by kind (an
HTTP status, an exception's class).
"""

from __future__ import annotations

import functools
import sys
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import requests

from .. import outbound
from . import markup
from .channels import ChannelError, chat_text
from .config import AlertConfig

ANSWER_BYTES = 64 * 1024
# Apprise plugin modules that open sockets of their own (read from Apprise 2.3.0's plugins: these import
# socket, smtplib or a client library instead of requests); tests/process/test_alert_apprise.py reads the installed
# Apprise again, so an upgrade that adds one fails the suite until it is listed.
NOT_HTTP = frozenset(
    {
        "amqp",
        "aprs",
        "blink1",
        "dbus",
        "email",
        "glib",
        "gnome",
        "growl",
        "irc",
        "macosx",
        "mqtt",
        "nostr",
        "rsyslog",
        "smpp",
        "syslog",
        "windows",
        "xmpp",
    }
)


@dataclass(frozen=True)
class AppriseTarget:
    url: str = field(repr=False)
    position: int  # its place in GORGE_ALERT_URLS, from 1
    scheme: str
    host: str  # the service's host, when the URL names one there; "" when that part is a token

    @property
    def label(self) -> str:
        """The URL as shown: its scheme and host, nothing else."""
        return f"{self.scheme}://{self.host}" if self.host else f"{self.scheme}://"

    @property
    def name(self) -> str:
        """The channel's name in Django's database (AlertChannel.name, AlertNotification.channel)."""
        return f"apprise:{self.label.removesuffix('://')}#{self.position}"


def _apprise() -> Any:
    import apprise

    return apprise


@functools.lru_cache(maxsize=1)
def _asset() -> Any:
    apprise = _apprise()
    # Nothing kept on disk between sends (Apprise's persistent store caches lookups, tokens among them). No
    # image of Apprise's: its default icon is a GitHub address that every chat client showing an alert would
    # fetch (Mattermost, Slack and others send it as the message's icon); an icon_url= of the URL still counts.
    return apprise.AppriseAsset(storage_mode=apprise.PersistentStoreMode.MEMORY, image_url_mask="", image_url_logo="")


def _plugin(url: str) -> Any:
    """A fresh plugin for the URL (none kept between sends: no throttling wait left from an earlier one),
    or None when Apprise cannot read it."""
    return _apprise().Apprise.instantiate(url, asset=_asset(), suppress_exceptions=True)


def _route() -> None:
    """Bind `requests` to outbound.ROUTED in every Apprise plugin module loaded so far that imported it."""
    for name, module in list(sys.modules.items()):
        if name.startswith("apprise.plugins") and getattr(module, "requests", None) is requests:
            setattr(module, "requests", outbound.ROUTED)  # noqa: B010 - a module's global, by name


def _module(plugin: Any) -> str:
    """The plugin's family in Apprise (`custom_json`, `email`, `irc`, ...), by its class and those it comes from."""
    for cls in type(plugin).__mro__:
        parts = cls.__module__.split(".")
        if len(parts) >= 3 and parts[:2] == ["apprise", "plugins"] and parts[2] in NOT_HTTP:
            return parts[2]
    parts = type(plugin).__module__.split(".")
    return parts[2] if len(parts) >= 3 else ""


def problem(url: str, plugin: Any = None) -> str | None:
    """Why Apprise cannot carry alerts to `url` (None: it can); safe to show (no part of the URL)."""
    if plugin is None:
        plugin = _plugin(url)
    if plugin is None:
        return "not a URL Apprise knows (an unknown service, or a part missing)"
    if _module(plugin) in NOT_HTTP:
        return (
            f"{plugin.service_name} does not send over HTTP, so a send could not be bounded in time "
            "(e-mail has its own channel: GORGE_ALERT_EMAIL_TO)"
        )
    return None


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower()[:32]


def _service_scheme(plugin: Any, url: str) -> str:
    """The scheme Apprise writes the service's URLs with (`slack` for a hooks.slack.com address it reads too)."""
    try:
        written = str(plugin.url(privacy=True))
    except Exception:  # noqa: BLE001 - a plugin that cannot write its URL is named by the one given
        return _scheme(url)
    scheme = written.split("://", 1)[0].lower()
    return scheme if scheme.isascii() and scheme.replace("+", "").isalnum() and len(scheme) <= 32 else _scheme(url)


@functools.lru_cache(maxsize=8)
def targets(urls: tuple[str, ...]) -> tuple[AppriseTarget, ...]:
    """The usable URLs of GORGE_ALERT_URLS, named (Apprise is loaded on first use, by the watcher only); the
    others are left out (the system check and the watcher say which)."""
    found = []
    for position, url in enumerate(urls, 1):
        plugin = _plugin(url)
        if problem(url, plugin) is not None:
            continue
        takes_host = "host" in getattr(plugin, "template_tokens", {})
        host = str(getattr(plugin, "host", "") or "") if takes_host else ""
        if not host or any(c in host for c in "@/:?#") or not host.isprintable():
            host = ""
        found.append(AppriseTarget(url, position, _service_scheme(plugin, url), host[:200].lower()))
    return tuple(found)


def problems(urls: tuple[str, ...]) -> list[str]:
    """What is wrong with each unusable entry of GORGE_ALERT_URLS, by its place and scheme."""
    return [
        f"entry {position} ({_scheme(url)}://): {reason}"
        for position, url in enumerate(urls, 1)
        if (reason := problem(url)) is not None
    ]


# Apprise's JSON plugin sending only `{"text": ...}`: its message renamed, its other fields dropped.
CHAT_PAYLOAD = {"message": "text", "version": "", "title": "", "attachments": "", "type": ""}


def chat_plugin(url: str) -> Any:
    """GORGE_ALERT_WEBHOOK_URL as Apprise's JSON plugin posting the incoming-webhook JSON Slack and Mattermost
    accept, to exactly that URL; raises ChannelError (nothing of the URL said) when it cannot be read."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise ChannelError("not a URL (GORGE_ALERT_WEBHOOK_URL)", refused=True) from None
    host = parts.hostname or ""
    if not host:
        raise ChannelError("no host (GORGE_ALERT_WEBHOOK_URL)", refused=True)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    from apprise.plugins.custom_json import NotifyJSON  # loaded with Apprise, on first use

    return NotifyJSON(  # type: ignore[no-untyped-call]
        asset=_asset(),
        secure=parts.scheme.lower() == "https",
        host=f"[{host}]" if ":" in host else host,
        port=port,
        user=parts.username,  # as written in the URL: Apprise unquotes them
        password=parts.password,
        fullpath=target,  # as written: the JSON plugin sends its own `fullpath` unchanged
        payload=CHAT_PAYLOAD,
    )


def send_chat(config: AlertConfig, subject: str, body: str) -> None:
    """One message to the chat webhook, bounded as every Apprise send is: `{"text": <body>}`, as it always
    was (an incoming webhook's JSON has no title)."""
    del subject
    plugin = chat_plugin(config.chat_url)
    _notify(plugin, _text_format(plugin), config.channel_timeout_sec, "", chat_text(body))


def send(target: AppriseTarget, timeout: float, subject: str, body: str) -> None:
    """One message through Apprise, bounded in total by `timeout` (the channel timeout); raises ChannelError."""
    plugin = _plugin(target.url)
    if plugin is None:
        raise ChannelError("not a URL Apprise knows", refused=True)
    # Rendered here for what the plugin sends, and declared so: Apprise converts nothing (markup.py).
    form = _text_format(plugin)
    family = _module(plugin)
    _notify(plugin, form, timeout, markup.render(family, form.value, subject), markup.render(family, form.value, body))


def _text_format(plugin: Any) -> Any:
    """The format the plugin sends a text in (its own, when it has one)."""
    return plugin.resolve_format(_apprise().NotifyFormat.TEXT)


def _notify(plugin: Any, form: Any, timeout: float, subject: str, body: str) -> None:
    """Send, declared in `form`, and tell a failure by its kind; raises ChannelError."""
    plugin.redirects = False  # Apprise's own switch: its plugins ask requests to follow none either
    _route()
    with outbound.bounded_requests(timeout, ANSWER_BYTES) as call:
        try:
            accepted = plugin.notify(body=body, title=subject, body_format=form)
        except Exception as exc:  # noqa: BLE001 - a plugin's failure is this channel's failure, told by kind
            raise ChannelError(type(exc).__name__) from None
    if call.redirected is not None:
        # Not followed (outbound.bounded_requests): a failed send, retried with backoff, whatever the plugin
        # made of the answer.
        raise ChannelError(f"HTTP {call.redirected}: a redirect, not followed")
    if accepted:
        return
    if call.fired:
        raise ChannelError(f"no complete answer within {timeout:g} s")
    refusal = next((status for status in reversed(call.statuses) if not 200 <= status < 300), None)
    if refusal is not None:
        refused = 400 <= refusal < 500 and refusal not in (408, 429)
        raise ChannelError(f"HTTP {refusal}", refused=refused)
    if call.errors:
        raise ChannelError(call.errors[-1])
    if call.too_large:
        raise ChannelError(f"an answer over {ANSWER_BYTES // 1024} KiB, cut off")
    raise ChannelError(f"{plugin.service_name} did not take the message")
