"""Any chat through Apprise (GORGE_ALERT_URLS): each URL a channel of its own, sent on by sending.py like the
others (a lease, a thread, backoff, refusals given up). The chat webhook (GORGE_ALERT_WEBHOOK_URL) is one
more Apprise send: its JSON plugin, posting only `{"text": ...}` (`chat_plugin`).

A URL is a secret (a token is the host part of many of them: `slack://T.../B.../x...`, `tgram://<bot token>/`),
so it is named by its scheme and its host, the host only where Apprise's service takes a host there
(`json://`, `mmosts://`, `matrixs://`, `ntfys://...`): `apprise:json://127.0.0.1#1`, `apprise:slack#2`.

A send runs in a process of its own (apprise_send.py, with Apprise as published) whose environment names a
guard of ours as its proxy (apprise_guard.py, requests takes HTTP_PROXY and HTTPS_PROXY from the environment):
the guard resolves every host the plugin asks for and refuses one in Phorge's outbound blacklist before any
connection, reads at most ANSWER_BYTES from the servers, and is shut with the process once
GORGE_ALERT_CHANNEL_TIMEOUT_SEC is up. What comes back is said by kind: accepted, an HTTP status, blacklisted,
too large, out of time, an exception's class; never a URL. Services that do not send over HTTP (mail, IRC,
MQTT, XMPP, syslog, the desktop ones) open sockets of their own that no proxy sees: they are refused
(`problem`), e-mail having its own channel.

The text is rendered for the markup of the service (markup.py: escaped for Markdown, HTML, or the plain text
of a service that shows it as it is) in the format the plugin sends, and declared in that format, so that
Apprise converts nothing; on top of messages.plain() (no mention, link or line of Phorge's) no service's own
markup (`<!channel>`, `<@id>`, `**bold**`, HTML) holds either. No redirect is followed (Apprise's own
switch, `http_redirects`): a 3xx answer is a failed send. Apprise's own log lines can hold a URL with its
token (its DEBUG lines do): its logger is silenced, here (gorge_site/settings.py) and in the send's process,
and failures are told by our lines, by kind (an HTTP status, an exception's class).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import IPNetwork
from . import markup
from .apprise_guard import Guard, GuardReport
from .apprise_send import ASSET
from .channels import ChannelError, chat_text
from .config import AlertConfig

ANSWER_BYTES = 64 * 1024  # all a send reads from the servers, TLS and heads included
SEND_MODULE = "webhook_delivery.alerts.apprise_send"
ROOT = Path(__file__).resolve().parents[2]  # where `webhook_delivery` is imported from
# What the send's process keeps of the watcher's environment: how to run Python and which certificates to
# trust (an internal chat server's own CA), nothing of the service's settings. PYTHONPATH comes after ROOT.
PASSED_ENVIRONMENT = (
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
)  # fmt: skip
# Apprise plugin modules that open sockets of their own (read from Apprise 2.3.0's plugins: these import
# socket, smtplib or a client library instead of requests); tests/process/test_apprise_channels.py reads the
# installed Apprise again, so an upgrade that adds one fails the suite until it is listed.
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
    # As the send's process makes it (apprise_send.ASSET): the same URL read the same way.
    return apprise.AppriseAsset(storage_mode=apprise.PersistentStoreMode.MEMORY, **ASSET)


def _plugin(url: str) -> Any:
    """A fresh plugin for the URL (none kept between sends: no throttling wait left from an earlier one),
    or None when Apprise cannot read it."""
    return _apprise().Apprise.instantiate(url, asset=_asset(), suppress_exceptions=True)


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


def chat_options(url: str) -> dict[str, Any]:
    """GORGE_ALERT_WEBHOOK_URL as the options of Apprise's JSON plugin posting the incoming-webhook JSON Slack
    and Mattermost accept, to exactly that URL; raises ChannelError (nothing of the URL said) when it cannot be
    read."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise ChannelError("not a URL (GORGE_ALERT_WEBHOOK_URL)", refused=True) from None
    host = parts.hostname or ""
    if not host:
        raise ChannelError("no host (GORGE_ALERT_WEBHOOK_URL)", refused=True)
    return {
        "secure": parts.scheme.lower() == "https",
        "host": f"[{host}]" if ":" in host else host,
        "port": port,
        "user": parts.username,  # as written in the URL: Apprise unquotes them
        "password": parts.password,
        "fullpath": (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),  # sent as written
        "payload": CHAT_PAYLOAD,
    }


def chat_plugin(url: str) -> Any:
    """The chat webhook's plugin (`chat_options`)."""
    from apprise.plugins.custom_json import NotifyJSON  # loaded with Apprise, on first use

    return NotifyJSON(asset=_asset(), **chat_options(url))  # type: ignore[no-untyped-call]


def send_chat(config: AlertConfig, subject: str, body: str, blacklist: Sequence[IPNetwork] = ()) -> None:
    """One message to the chat webhook, bounded as every Apprise send is: `{"text": <body>}`, as it always
    was (an incoming webhook's JSON has no title)."""
    del subject
    plugin = chat_plugin(config.chat_url)
    job = {
        "plugin": _class(plugin),
        "options": chat_options(config.chat_url),
        "title": "",
        "body": chat_text(body),
        "format": _text_format(plugin).value,
    }
    _notify(job, str(plugin.service_name), config.channel_timeout_sec, blacklist)


def send(target: AppriseTarget, timeout: float, subject: str, body: str, blacklist: Sequence[IPNetwork] = ()) -> None:
    """One message through Apprise, bounded in total by `timeout` (the channel timeout), to no address in
    `blacklist`; raises ChannelError."""
    plugin = _plugin(target.url)
    if plugin is None:
        raise ChannelError("not a URL Apprise knows", refused=True)
    # Rendered here for what the plugin sends, and declared so: Apprise converts nothing (markup.py).
    form = _text_format(plugin).value
    family = _module(plugin)
    job = {
        "plugin": _class(plugin),
        "url": target.url,
        "title": markup.render(family, form, subject),
        "body": markup.render(family, form, body),
        "format": form,
    }
    _notify(job, str(plugin.service_name), timeout, blacklist)


def _class(plugin: Any) -> str:
    """The plugin's class as the send's process imports it (`module:Class`)."""
    return f"{type(plugin).__module__}:{type(plugin).__qualname__}"


def _text_format(plugin: Any) -> Any:
    """The format the plugin sends a text in (its own, when it has one)."""
    return plugin.resolve_format(_apprise().NotifyFormat.TEXT)


@dataclass(frozen=True)
class Outcome:
    """What one send's process and its guard said; safe to log."""

    guard: GuardReport
    timed_out: bool
    accepted: bool = False
    statuses: tuple[int, ...] = ()
    error: str | None = None  # an exception's class, or why the send's process said nothing


def _environment(proxy: str) -> dict[str, str]:
    passed = {name: os.environ[name] for name in PASSED_ENVIRONMENT if name in os.environ}
    path = os.pathsep.join(filter(None, [str(ROOT), passed.get("PYTHONPATH", "")]))
    return passed | {"PYTHONPATH": path, "http_proxy": proxy, "https_proxy": proxy}


def run(job: dict[str, Any], timeout: float, blacklist: Sequence[IPNetwork]) -> Outcome:
    """Run the send's process for `job` behind a guard, both ended by `timeout` seconds from now."""
    deadline = time.monotonic() + timeout
    with Guard(blacklist, ANSWER_BYTES, deadline) as guard:
        process = subprocess.Popen(  # noqa: S603 - our own module, run with this very Python
            [sys.executable, "-m", SEND_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_environment(guard.url),
            cwd=ROOT,
        )
        try:
            out, _ = process.communicate(json.dumps(job).encode(), timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return Outcome(guard.report, timed_out=True)
    try:
        said = json.loads(out)
        return Outcome(guard.report, False, bool(said["accepted"]), tuple(said["statuses"]), said["error"])
    except (ValueError, KeyError, TypeError):
        return Outcome(guard.report, False, error=f"the send's process ended with {process.returncode}")


def _notify(job: dict[str, Any], service: str, timeout: float, blacklist: Sequence[IPNetwork]) -> None:
    """Send in a process of its own, and tell a failure by its kind; raises ChannelError."""
    outcome = run(job, timeout, blacklist)
    guard = outcome.guard
    if guard.blocked:
        raise ChannelError("the chat server's address is in the outbound blacklist", refused=True)
    if outcome.timed_out:
        raise ChannelError(f"no complete answer within {timeout:g} s")
    if guard.error is not None:
        raise ChannelError(guard.error)
    redirect = next((status for status in outcome.statuses if 300 <= status < 400), None)
    if redirect is not None:
        # Not followed (Apprise's switch): a failed send, retried with backoff, whatever the plugin made of it.
        raise ChannelError(f"HTTP {redirect}: a redirect, not followed")
    answered = bool(outcome.statuses) and all(200 <= status < 300 for status in outcome.statuses)
    if outcome.accepted or (guard.too_large and answered):
        return  # taken (an answer too long to read to its end says so in its status line)
    refusal = next((status for status in reversed(outcome.statuses) if not 200 <= status < 300), None)
    if refusal is not None:
        refused = 400 <= refusal < 500 and refusal not in (408, 429)
        raise ChannelError(f"HTTP {refusal}", refused=refused)
    if outcome.error is not None:
        raise ChannelError(outcome.error)
    if guard.too_large:
        raise ChannelError(f"an answer over {ANSWER_BYTES // 1024} KiB, cut off")
    raise ChannelError(f"{service} did not take the message")
