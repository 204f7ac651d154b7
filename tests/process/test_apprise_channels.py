"""Alerts through Apprise (GORGE_ALERT_URLS), with Apprise's real plugins against a real local receiver:
json:// and form:// (Apprise's generic ones), Mattermost's (mmost://127.0.0.1:<port>/<token> reaches a local
host as it is) and Slack's (whose plugin posts only to hooks.slack.com, its class attribute `webhook_url`:
pointed at the receiver). Each URL is a channel of its own: told once, failures logged once and counted per
channel, bounded in total time and answer size, named by scheme and host, never by its secret parts.

No redirect is followed (issue 39, finding 5): against a local server answering 301 to 308 to another origin,
and a redirect loop, a 3xx is a failed send: one request, nothing to the other origin, logged once, retried
with backoff (before, a 307 re-posted the alert to the other origin, a 302 turned it into a GET that counted
as sent, and a loop made 31 POSTs per pass)."""

from __future__ import annotations

import ast
import dataclasses
import ipaddress
import json
import logging
import re
import resource
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.support.alert_channels import (
    HOSTILE,
    Smtp,
    _free_port,
    alert_config,
    configure_email,
    failing_hook,
    hostile_hook,
)
from tests.support.chat_services import point_plugins
from tests.support.helpers import PHORGE_DB, Phorge, worker_env
from tests.support.processes import SiteDatabase, manage
from tests.support.rawserver import Counting, RawServer, endless_http, trickling_http
from tests.support.receiver import Receiver
from webhook_delivery.alerts import apprise_channels, metrics
from webhook_delivery.alerts.channels import ChannelError
from webhook_delivery.alerts.config import AlertConfig, load_alert_config
from webhook_delivery.alerts.models import AlertChannel, AlertNotification
from webhook_delivery.alerts.sending import channel_names
from webhook_delivery.alerts.watcher import Watcher

SLACK_TOKENS = ("T1JJ3T3L2", "A1BRTD4JD", "TIiajkdnlazkcOXrIdevi7")
MATTERMOST_TOKEN = "mm0ttoken0secret0hooks"
DISCORD_TOKEN = "d1scordt0kensecret"


def with_urls(config: AlertConfig, *urls: str) -> AlertConfig:
    return dataclasses.replace(config, apprise_urls=urls)


def received(receiver: Receiver, prefix: str) -> list[Any]:
    """The requests under `prefix` the receiver answered (it marks one answered just after sending its answer,
    which the sender may see first: a moment's wait for that)."""
    deadline = time.monotonic() + 2
    while True:
        found = [r for r in receiver.requests if r.path.startswith(prefix)]
        if all(r.answered_at for r in found) or time.monotonic() > deadline:
            return [r for r in found if r.answered_at]
        time.sleep(0.01)


# -- configuration -------------------------------------------------------------------------------------


def test_urls_are_split_on_blanks_and_commas_and_named_by_scheme_and_host_only() -> None:
    raw = (
        f"json://127.0.0.1:8080/p/SECRET1?x=a,b, mmost://mm.example.com/{MATTERMOST_TOKEN}\n"
        f"slack://{'/'.join(SLACK_TOKENS)}  ntfys://ntfy.example.com/private-topic,ntfy://another-secret-topic"
    )
    config, errors = load_alert_config({"GORGE_ALERT_URLS": raw})
    assert not errors
    assert config.apprise_urls[0] == "json://127.0.0.1:8080/p/SECRET1?x=a,b", "a comma inside a URL stays there"
    targets = apprise_channels.targets(config.apprise_urls)
    assert [target.name for target in targets] == [
        "apprise:json://127.0.0.1#1",
        "apprise:mmost://mm.example.com#2",
        "apprise:slack#3",  # Slack's first token is where a host would be: not shown
        "apprise:ntfys://ntfy.example.com#4",
        "apprise:ntfys#5",  # a topic on ntfy.sh is a secret too (Apprise posts to it over https)
    ]
    assert channel_names(config) == tuple(target.name for target in targets)
    shown = repr(config) + " ".join(channel_names(config))
    for secret in ("SECRET1", MATTERMOST_TOKEN, *SLACK_TOKENS, "private-topic", "another-secret-topic"):
        assert secret not in shown


def test_bad_urls_are_refused_by_position_and_scheme_never_by_what_they_hold() -> None:
    _config, errors = load_alert_config({"GORGE_ALERT_URLS": "json://ok.example.com/x not-a-url-SECRET2"})
    assert [str(error) for error in errors] == ["GORGE_ALERT_URLS: entry 1 is not a URL (service://...)"]
    problems = apprise_channels.problems(
        (
            "json://127.0.0.1/x",
            "mailto://user:SECRET3@mail.example.com",
            "ircs://irc.example.com/#chan",
            "nosuchservice://SECRET4@example.com",
        )
    )
    assert len(problems) == 3
    assert problems[0].startswith("entry 2 (mailto://): ") and "does not send over HTTP" in problems[0]
    assert problems[1].startswith("entry 3 (ircs://): ")
    assert problems[2].startswith("entry 4 (nosuchservice://): not a URL Apprise knows")
    assert not any("SECRET" in problem for problem in problems)


def test_every_plugin_of_the_installed_apprise_that_opens_its_own_sockets_is_refused() -> None:
    """NOT_HTTP was read from Apprise 2.3.0; this reads the installed Apprise again (an upgrade that adds a
    plugin sending otherwise than through requests fails here until it is listed)."""
    import apprise.plugins

    own_sockets = re.compile(
        r"^\s*(import|from)\s+(socket|smtplib|paho|pika|slixmpp|gntp|smpplib|dbus|hid|gi|ssl|syslog|subprocess|"
        r"win32\w*)\b|wrap_socket|utils\.socket import",
        re.MULTILINE,
    )
    plugins = Path(apprise.plugins.__file__).parent
    found = set()
    for path in plugins.rglob("*.py"):
        family = path.relative_to(plugins).parts[0].removesuffix(".py")
        if family in ("__init__", "base"):
            continue
        source = path.read_text()
        if own_sockets.search(source) or (path.parent == plugins and "requests" not in source):
            found.add(family)
    inherited = {"guilded", "jellyfin", "deltachat"}  # subclasses of discord, emby (HTTP) and email (refused)
    assert found - inherited == apprise_channels.NOT_HTTP, sorted(found ^ apprise_channels.NOT_HTTP)
    assert apprise_channels.problem("deltachat://user:pass@mail.example.com") is not None


def _never_more_than_the_switch(value: Any) -> bool:
    """`self.redirects`, `False`, or a choice between those (`False if credentials else self.redirects`)."""
    if isinstance(value, ast.IfExp):
        return _never_more_than_the_switch(value.body) and _never_more_than_the_switch(value.orelse)
    return value is not None and ast.unparse(value) in ("self.redirects", "False")


def test_every_plugin_of_the_installed_apprise_asks_requests_through_its_module_and_honours_redirects(
    receiver: Receiver,
) -> None:
    """Apprise is used as published: after a send, every plugin module's `requests` is requests itself (no name
    rebound), and every call a plugin makes (`requests.post(...)`, get, put, ...) passes Apprise's switch
    `allow_redirects=self.redirects` (which the send turns off), or follows no redirect at all, and goes through
    requests' module functions, which take the guard from the environment (no session or function of its own),
    read from the installed Apprise: an upgrade that adds a call of another kind fails here."""
    import sys

    import apprise.plugins
    import requests

    [target] = apprise_channels.targets((f"json://127.0.0.1:{receiver.port}/published/ok",))
    apprise_channels.send(target, 5, "s", "b")
    assert len(received(receiver, "/published/")) == 1
    modules = {name: module for name, module in sys.modules.items() if name.startswith("apprise.plugins")}
    using = {name for name, module in modules.items() if hasattr(module, "requests")}
    assert len(using) > 100, "Apprise's plugins are all loaded"
    assert {name for name in using if modules[name].requests is not requests} == set()
    calls, careless = 0, []
    plugins = Path(apprise.plugins.__file__).parent
    for path in plugins.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "requests"):
                continue
            if node.func.attr in ("Session", "session"):
                careless.append(f"{path.name}:{node.lineno} a session of its own")
                continue
            if node.func.attr not in ("get", "post", "put", "patch", "delete", "head", "request"):
                continue
            calls += 1
            switch = next((keyword.value for keyword in node.keywords if keyword.arg == "allow_redirects"), None)
            if not _never_more_than_the_switch(switch):
                careless.append(f"{path.name}:{node.lineno} allow_redirects={switch and ast.unparse(switch)}")
    assert calls > 150 and careless == []
    other_ways = re.compile(r"from\s+requests(\.api|\.sessions)?\s+import|requests\.Session\(")
    assert [str(p) for p in plugins.rglob("*.py") if other_ways.search(p.read_text())] == []


# -- real plugins, a real receiver ---------------------------------------------------------------------


def assert_neutral(text: str) -> None:
    """Phorge's hostile hook name, as every service must get it: no mention, no link, readable (Slack's own
    markup, <!channel> and <url|label>, is Slack's to escape: see the Slack test)."""
    words = text.replace("\N{WORD JOINER}", " ").split()
    for mention in ("@here", "@all", "@channel"):
        assert mention not in text.split(), f"{mention} would ping"
        assert mention.removeprefix("@") in words
    assert "](" not in text
    assert "https://evil.example" not in text and "\n" not in HOSTILE


@PHORGE_DB
def test_json_and_form_receivers_get_each_alert_once_and_its_end_once(
    phorge: Phorge, receiver: Receiver, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = hostile_hook(phorge, receiver)
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    config = with_urls(
        alert_config(None, None),
        f"json://127.0.0.1:{receiver.port}/json/SECRET5/ok",
        f"form://u:SECRET6@127.0.0.1:{receiver.port}/form/ok",
    )
    watcher = Watcher(config, delivery)
    result = watcher.tick()
    assert result.sent == {"apprise:json://127.0.0.1#1": 1, "apprise:form://127.0.0.1#2": 1}
    [as_json] = received(receiver, "/json/")
    [as_form] = received(receiver, "/form/")
    payload = json.loads(as_json.body)
    assert payload["title"].startswith("[gorge-webhook] Hook `") and payload["type"] == "info"
    form = {key: values[0] for key, values in parse_qs(as_form.body.decode()).items()}
    assert form["message"] == payload["message"], "the same text whatever the service"
    assert_neutral(payload["message"])
    assert "@here" not in payload["title"].split() and "://evil" not in payload["title"]  # cut at 78 characters
    assert hook in payload["message"] and "http/500" in payload["message"]
    assert f"https://gorge.example.com/hooks/{hook}/" in payload["message"], "our own link is kept"
    for _ in range(2):
        watcher.tick()
    assert len(received(receiver, "/json/")) == 1 and len(received(receiver, "/form/")) == 1

    now = phorge.now()
    phorge.execute(
        "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = %s",
        (now + 1,),
    )
    time.sleep(1.1)
    assert watcher.tick().recovered == [f"receiver:{hook}"]
    watcher.tick()
    ends = [json.loads(r.body)["message"] for r in received(receiver, "/json/")[1:]]
    assert len(ends) == 1 and ends[0].startswith("RECOVERED") and "delivers again" in ends[0]
    assert len(received(receiver, "/form/")) == 2
    for secret in ("SECRET5", "SECRET6", "/json/", "/form/", "u:"):
        assert secret not in caplog.text, f"{secret!r} in a log line"


@PHORGE_DB
def test_slack_mattermost_and_discord_plugins_post_their_own_shapes_with_the_text_neutralised(
    phorge: Phorge,
    receiver: Receiver,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    pointed = {"slack.NotifySlack.webhook_url": "/services", "discord.NotifyDiscord.notify_url": "/api/webhooks"}
    point_plugins(monkeypatch, tmp_path, {name: receiver.url(path) for name, path in pointed.items()})
    hostile_hook(phorge, receiver, error_code="[y](https://e.x)")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    slack = "https://hooks.slack.com/services/" + "/".join(SLACK_TOKENS)  # Apprise reads Slack's own URL too
    mattermost = f"mmost://127.0.0.1:{receiver.port}/{MATTERMOST_TOKEN}"
    discord = f"discord://1234/{DISCORD_TOKEN}"
    result = Watcher(with_urls(alert_config(None, None), slack, mattermost, discord), delivery).tick()
    assert set(result.sent) == {"apprise:slack#1", "apprise:mmost://127.0.0.1#2", "apprise:discord#3"}
    assert not result.failed

    [to_slack] = received(receiver, "/services/")
    assert to_slack.path == "/services/" + "/".join(SLACK_TOKENS)
    slack_payload = json.loads(to_slack.body)
    [attachment] = slack_payload["attachments"]
    assert slack_payload["mrkdwn"] is False, "declared plain text: Slack is told not to read it as mrkdwn"
    text = attachment["text"]
    assert "&lt;\N{WORD JOINER}!channel&gt;" in text and "&amp;amp;" in text, "escaped as Slack reads text (&, <, >)"
    assert "<!channel>" not in text and "<https" not in text
    assert_neutral(text)

    # Mattermost's and Discord's webhooks read Markdown (and Mattermost's turns <!channel> into @channel):
    # every markup character of Phorge's is escaped, every < followed by a word joiner.
    [to_mattermost] = received(receiver, "/hooks/")
    assert to_mattermost.path == f"/hooks/{MATTERMOST_TOKEN}"
    [to_discord] = received(receiver, "/api/webhooks/")
    assert to_discord.path.startswith(f"/api/webhooks/1234/{DISCORD_TOKEN}")
    for payload in (slack_payload, json.loads(to_mattermost.body), json.loads(to_discord.body)):
        assert "github" not in json.dumps(payload).lower(), "no chat client sent to fetch Apprise's icon"
    assert "icon_url" not in json.loads(to_mattermost.body)
    for shown in (json.loads(to_mattermost.body)["text"], json.loads(to_discord.body)["content"]):
        assert_neutral(shown)
        assert "<!channel>" not in shown and "<https" not in shown and "[x]" not in shown
        assert "<\N{WORD JOINER}\\!channel\\>" in shown, "there, and unable to page the channel"
    for secret in (*SLACK_TOKENS, MATTERMOST_TOKEN, DISCORD_TOKEN):
        assert secret not in caplog.text


# -- hostile servers -------------------------------------------------------------------------------------


def _target(port: int) -> apprise_channels.AppriseTarget:
    [target] = apprise_channels.targets((f"json://127.0.0.1:{port}/SECRET7",))
    return target


def test_a_trickling_receiver_behind_json_costs_one_channel_timeout() -> None:
    with RawServer(trickling_http) as server:
        started = time.monotonic()
        with pytest.raises(ChannelError, match=r"^no complete answer within 1\.5 s$"):
            apprise_channels.send(_target(server.port), 1.5, "s", "b")
        assert time.monotonic() - started < 4


def test_an_endless_answer_behind_json_is_cut_off_and_read_only_so_far() -> None:
    apprise_channels.targets(("json://127.0.0.1/warm-up",))  # Apprise's plugins loaded before measuring
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with RawServer(endless_http) as server:
        started = time.monotonic()
        apprise_channels.send(_target(server.port), 1.5, "s", "b")  # 200: accepted, the rest not read
        assert time.monotonic() - started < 4
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 50, f"the answer was kept in memory: +{grown_mb:.0f} MB"


@PHORGE_DB
def test_a_hanging_url_is_logged_once_counted_backed_off_and_holds_up_no_other(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    for key, value in configure_email(smtp).items():
        setattr(settings, key, value)
    hostile_hook(phorge, receiver)
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    with RawServer(trickling_http) as server:
        config = with_urls(
            alert_config(smtp, None, interval_sec=0.1, channel_timeout_sec=1.5),
            f"json://127.0.0.1:{server.port}/SECRET8",
            f"json://localhost:{receiver.port}/fine/ok",
        )
        watcher = Watcher(config, delivery)
        hanging = "apprise:json://127.0.0.1#1"
        before = metrics.NOTIFICATIONS_FAILED.labels(hanging)._value.get()
        started = time.monotonic()
        result = watcher.tick()
        assert time.monotonic() - started < 5
        assert set(result.sent) == {"email", "apprise:json://localhost#2"}, "the others went out meanwhile"
        assert result.failed == {hanging: "no complete answer within 1.5 s"}
        for _ in range(4):
            watcher.tick()
            time.sleep(0.1)
    failing = [r for r in caplog.records if getattr(r, "event", "") == "alert.channel_failing"]
    assert [getattr(r, "channel", "") for r in failing] == [hanging]
    assert 1 <= metrics.NOTIFICATIONS_FAILED.labels(hanging)._value.get() - before < 5, "retried with backoff"
    state = AlertChannel.objects.get(name=hanging)
    assert state.failing_since is not None and state.last_failed_at is not None and state.retry_at is not None
    assert len(smtp.bodies) == 1 and len(received(receiver, "/fine/")) == 1
    assert "SECRET8" not in caplog.text


@pytest.mark.slow
@PHORGE_DB
def test_watch_test_sends_to_each_url_and_names_each_that_fails_by_scheme_and_host(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, site: SiteDatabase
) -> None:
    closed = _free_port()  # nothing listens there
    urls = f"json://127.0.0.1:{receiver.port}/works/ok,json://localhost:{closed}/SECRET9"
    env = worker_env(
        DATABASE_URL=site.url,
        EMAIL_URL=f"smtp://127.0.0.1:{smtp.port}",
        GORGE_ALERT_EMAIL_TO="ops@example.com",
        GORGE_ALERT_URLS=urls,
        GORGE_ALERT_CHANNEL_TIMEOUT_SEC="3",
    )
    done = manage("watch_webhooks", "--test", env=env, ok=False, timeout=90)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "email: sent" in output
    assert "apprise:json://127.0.0.1#1: sent" in output
    assert "apprise:json://localhost#2: FAILED (ConnectionError)" in output
    assert "SECRET9" not in output and str(closed) not in output
    assert len(received(receiver, "/works/")) == 1


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


@PHORGE_DB
def test_a_chat_server_in_phorges_outbound_blacklist_is_refused_without_a_connection(
    phorge: Phorge, receiver: Receiver, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher reads the blacklist in force as the worker does (here GORGE_WEBHOOK_OUTBOUND_BLACKLIST):
    the chat webhook and an Apprise URL on a loopback address are refused, never connected to."""
    failing_hook(phorge, receiver, "blacklisted-alerts")
    loopback = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3, outbound_blacklist=loopback)
    with Counting(200, lambda: "") as server:
        config = dataclasses.replace(
            with_urls(alert_config(None, None, channel_timeout_sec=5), f"json://127.0.0.1:{server.server.port}/SECRET"),
            chat_url=f"{server.url}/hooks/SECRET",
        )
        result = Watcher(config, delivery).tick()
        refused = "the chat server's address is in the outbound blacklist"
        assert result.failed == {"chat": refused, "apprise:json://127.0.0.1#1": refused}
        assert server.server.connections == 0
    assert set(AlertChannel.objects.filter(refusals=1).values_list("name", flat=True)) == set(result.failed)
    assert "SECRET" not in caplog.text
