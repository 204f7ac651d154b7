"""Alerts: a real SMTP server (aiosmtpd), a real chat receiver (tests/support/receiver.py), real worker and watcher
processes, Phorge's real tables in MariaDB, and for the process tests Django's own tables in a throwaway
MariaDB database (gwtest<pid>_site) shared by the processes, as a deployment shares it.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/db/test_alerts.py."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from tests.support.alert_channels import SECRET, Chat, Smtp, assert_no_secrets, count_in, failing_hook
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin, with_event, worker_env
from tests.support.processes import SiteDatabase, WatcherProcess, manage
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = PHORGE_DB


@pytest.fixture
def watchers(workers: Any) -> Any:
    """Real `manage.py watch_webhooks` processes, stopped (SIGTERM) at the end like the workers."""
    return lambda name, *args, **env: workers(name, *args, kind=WatcherProcess, **env)


def channel_env(site: SiteDatabase, smtp: Smtp, chat: Chat, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": site.url,
        "EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}",
        "GORGE_ALERT_EMAIL_TO": "ops@example.com,oncall@example.com",
        "GORGE_ALERT_WEBHOOK_URL": chat.url,
        "GORGE_ALERT_SITE_URL": "https://gorge.example.com",
        "GORGE_ALERT_INTERVAL_SEC": "1",
        "GORGE_ALERT_CHANNEL_TIMEOUT_SEC": "2",
        **extra,
    }


@pytest.mark.slow
def test_receiver_failing_breaker_opens_one_message_then_one_recovery(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: SiteDatabase, workers: Any, watchers: Any
) -> None:
    uri = f"http://user:{SECRET}@127.0.0.1:{receiver.port}/breaks/s500"
    hook = phorge.hook(uri, name="breaks")
    for _ in range(4):
        phorge.request(hook, retry="forever")
    delivery = {  # the worker and the watcher read the same settings, as in a deployment
        "GORGE_WEBHOOK_ERROR_THRESHOLD": "3",
        "GORGE_WEBHOOK_ERROR_BACKOFF_SEC": "4",
        "GORGE_WEBHOOK_RETRY_BACKOFF_SEC": "1",
        "GORGE_WEBHOOK_POLL_INTERVAL_MS": "100",
        "GORGE_WEBHOOK_DELIVERY_TIMEOUT": "3",
    }
    worker = workers("worker", DATABASE_URL=site.url, **delivery).start()
    watcher = watchers("watcher", **channel_env(site, smtp, chat, GORGE_ALERT_FAILING_MINUTES="60", **delivery)).start()

    wait_for(lambda: count_in([r.path for r in receiver.requests], "/breaks/") >= 3, 20, "three failed attempts")
    wait_for(lambda: count_in(smtp.bodies, "ALERT", hook) and count_in(chat.texts, "ALERT", hook), 20, "the alert")
    for body in smtp.bodies + chat.texts:
        assert "breaker backoff" in body and "http/500" in body and "`breaks`" in body
    time.sleep(3)  # ten more passes while it keeps failing
    assert count_in(smtp.bodies, "ALERT", hook) == 1 and count_in(chat.texts, "ALERT", hook) == 1

    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", (uri.replace("s500", "ok"), hook))
    wait_for(
        lambda: count_in(smtp.bodies, "RECOVERED", hook) and count_in(chat.texts, "RECOVERED", hook), 25, "recovery"
    )
    time.sleep(1.5)
    assert count_in(smtp.bodies, "RECOVERED", hook) == 1 and count_in(chat.texts, "RECOVERED", hook) == 1
    assert count_in(smtp.bodies, "ALERT", hook) == 1 and count_in(chat.texts, "ALERT", hook) == 1
    watcher.stop()
    worker.stop()
    assert_no_secrets(smtp.bodies + chat.texts + [watcher.log.read_text()], phorge, chat)


@pytest.mark.slow
def test_two_watchers_side_by_side_notify_each_condition_exactly_once(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: SiteDatabase, watchers: Any
) -> None:
    hooks = [failing_hook(phorge, receiver, f"pair{i}") for i in range(10)]
    env = channel_env(site, smtp, chat, GORGE_WEBHOOK_ERROR_THRESHOLD="3", GORGE_ALERT_INTERVAL_SEC="1")
    pair = [watchers("a", **env).start(), watchers("b", **env).start()]
    wait_for(lambda: all(count_in(smtp.bodies, "ALERT", h) for h in hooks), 20, "every hook's alert by e-mail")
    wait_for(lambda: all(count_in(chat.texts, "ALERT", h) for h in hooks), 20, "every hook's alert in chat")
    time.sleep(2)
    now = phorge.now()
    phorge.execute(
        "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = %s", (now,)
    )
    wait_for(lambda: all(count_in(smtp.bodies, "RECOVERED", h) for h in hooks), 20, "every recovery by e-mail")
    wait_for(lambda: all(count_in(chat.texts, "RECOVERED", h) for h in hooks), 20, "every recovery in chat")
    time.sleep(2)
    for texts in (smtp.bodies, chat.texts):
        joined = "\n".join(texts).replace("\r\n", "\n")
        for index, hook in enumerate(hooks):
            assert joined.count(f"ALERT      Hook `pair{index}` ({hook})") == 1, hook
            assert joined.count(f"RECOVERED  Hook `pair{index}` ({hook})") == 1, hook
    for process in pair:
        process.stop()
        assert process.proc is not None and process.proc.returncode == 0


@pytest.mark.slow
def test_every_worker_killed_while_requests_are_due(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: SiteDatabase, workers: Any, watchers: Any
) -> None:
    hook = phorge.hook(receiver.url("/alive/ok"), name="alive")
    worker = workers("worker", DATABASE_URL=site.url, GORGE_WEBHOOK_POLL_INTERVAL_MS="100").start()
    name = site.name

    def beats() -> int:
        admin = mysql_admin(name)
        try:
            cursor = admin.cursor()
            cursor.execute("SELECT COUNT(*) FROM delivery_status_workerheartbeat")
            return int(cursor.fetchone()[0])
        finally:
            admin.close()

    wait_for(lambda: beats() == 1, 15, "the worker's heartbeat")
    threshold = 8
    watcher = watchers("watcher", **channel_env(site, smtp, chat, GORGE_ALERT_WORKER_DEAD_SEC=str(threshold))).start()
    phorge.request(hook)
    wait_for(lambda: len(receiver.requests) == 1, 15, "a delivery while the worker lives")
    time.sleep(2)
    assert not count_in(chat.texts, "No deliver_webhooks worker")
    assert worker.proc is not None
    worker.proc.kill()
    worker.proc.wait(10)
    killed = time.monotonic()
    for _ in range(3):
        phorge.request(hook)
    wait_for(
        lambda: (
            count_in(chat.texts, "No deliver_webhooks worker", "3 requests are due")
            and count_in(smtp.bodies, "No deliver_webhooks worker")
        ),
        2 * threshold,
        "the no-worker alert within twice the heartbeat threshold",
    )
    assert time.monotonic() - killed <= 2 * threshold
    watcher.stop()


@pytest.mark.slow
def test_watch_test_sends_to_every_channel_and_exits_by_result(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: SiteDatabase
) -> None:
    env = worker_env(**channel_env(site, smtp, chat))
    done = manage("watch_webhooks", "--test", env=env, ok=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "email: sent" in done.stdout and "chat: sent" in done.stdout
    assert count_in(smtp.bodies, "test message") == 1 and count_in(chat.texts, "test message") == 1

    smtp.stop()
    done = manage("watch_webhooks", "--test", env=env, ok=False, timeout=60)
    assert done.returncode == 1
    assert "email: FAILED" in done.stdout and "chat: sent" in done.stdout
    output = done.stdout + done.stderr
    assert "T0KEN-chat-secret" not in output and chat.url not in output

    once = manage("watch_webhooks", "--once", env=worker_env(**channel_env(site, Smtp(), chat)), ok=False, timeout=60)
    assert once.returncode == 0, once.stderr
    assert "entered 0" in once.stdout


@pytest.mark.slow
def test_the_watcher_inside_a_worker_never_holds_up_delivery_while_both_channels_fail(
    phorge: Phorge, receiver: Receiver, chat: Chat, site: SiteDatabase, workers: Any
) -> None:
    """`deliver_webhooks --watch` with SMTP down and the chat URL hanging: the healthy hook's requests go out
    while the chat call hangs, the failures are logged once, and the alert goes out once both are back."""
    smtp = Smtp()  # not started yet: refused
    chat.hang()
    broken = phorge.hook(receiver.url("/broken/s500"), name="broken")
    phorge.request(broken, retry="forever")
    env = channel_env(site, smtp, chat, GORGE_WEBHOOK_ERROR_THRESHOLD="1", GORGE_WEBHOOK_POLL_INTERVAL_MS="100")
    worker = workers("worker", "--watch", **env).start()
    try:
        wait_for(lambda: any(r.path.startswith("/chat/") for r in receiver.requests), 30, "a chat call (it hangs)")
        healthy = phorge.hook(receiver.url("/healthy/ok"), name="healthy")
        for _ in range(100):
            phorge.request(healthy)
        wait_for(lambda: count_in([r.path for r in receiver.requests], "/healthy/") == 100, 30, "the healthy hook")
        hung = [r for r in receiver.requests if r.path.startswith("/chat/")]
        delivered = [r for r in receiver.requests if r.path.startswith("/healthy/")]
        assert not chat.texts, "nothing reached the chat channel yet"
        assert any(h.at <= d.at <= h.at + 2 for h in hung for d in delivered), "delivered while a chat call hung"

        def failing_lines() -> int:
            return len(with_event(worker.lines(), "alert.channel_failing"))

        wait_for(lambda: failing_lines() >= 2, 15, "both channels logged as failing")
        time.sleep(1.5)  # several more passes
        assert failing_lines() == 2  # chat and e-mail, once each
        smtp.start()
        chat.answer()
        wait_for(
            lambda: count_in(smtp.bodies, "ALERT", broken) == 1 and count_in(chat.texts, "ALERT", broken) == 1,
            30,
            "catch-up",
        )
    finally:
        worker.stop()
        smtp.stop()
    assert_no_secrets(smtp.bodies + chat.texts + [worker.log.read_text()], phorge, chat)


# The dashboard as the web process renders it from Django's shared database (static files uncollected).
PAGE = """
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from tests.support.helpers import viewer
user = get_user_model().objects.filter(username="operator").first() or viewer(get_user_model())
client = Client()
client.force_login(user)
plain = {**settings.STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
with override_settings(STORAGES=plain):
    print(client.get("/", HTTP_HOST="localhost").content.decode())
"""


@pytest.mark.slow
def test_a_worker_stopped_by_sigterm_reads_as_stopped_cleanly_on_the_page_and_in_the_alert(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: SiteDatabase, workers: Any
) -> None:
    from tests.support.processes import manage
    from webhook_delivery.wording import moment

    hook = phorge.hook(receiver.url("/after/ok"), name="after the stop")
    worker = workers("worker", DATABASE_URL=site.url, GORGE_WEBHOOK_POLL_INTERVAL_MS="100").start()
    name = site.name

    def beat() -> dict[str, Any] | None:
        admin = mysql_admin(name)
        try:
            cursor = admin.cursor()
            cursor.execute("SELECT worker_id, state FROM delivery_status_workerheartbeat")
            rows = cursor.fetchall()
            return None if not rows else {"worker_id": rows[0][0], **json.loads(rows[0][1])}
        finally:
            admin.close()

    wait_for(lambda: beat() is not None, 15, "the worker's heartbeat")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    last = beat()
    assert last is not None and last["stopped"] == "clean", last
    stopped_at = moment(last["phorge_now"], phorge.now())
    for _ in range(2):
        phorge.request(hook, created=phorge.now() - 60)

    env = worker_env(**channel_env(site, smtp, chat, GORGE_ALERT_WORKER_DEAD_SEC="1"))
    manage("watch_webhooks", "--once", env=env)
    [text] = [t for t in chat.texts if "No deliver_webhooks worker" in t]
    assert f"The last worker, `{last['worker_id']}`, stopped cleanly at {stopped_at}." in text
    assert "2 requests are due" in text

    page = manage("shell", "-c", PAGE, env=worker_env(DATABASE_URL=site.url, ALLOWED_HOSTS="localhost")).stdout
    assert 'data-last="stopped"' in page
    assert f"stopped cleanly at {stopped_at}" in page
    assert 'data-state="stopped"' in page, "the workers table lists it as stopped"


@pytest.mark.slow
@PHORGE_DB
def test_the_watchers_metrics_listen_where_metrics_addr_says(site: SiteDatabase, watchers: Any) -> None:
    """Issue 39, finding 7: `watch_webhooks --metrics-port` listened on every interface, with no
    `--metrics-addr` to say otherwise (the worker has one)."""
    import socket
    import urllib.request

    from tests.support.alert_channels import _free_port

    port = _free_port()
    watcher = watchers("metrics", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", DATABASE_URL=site.url)
    watcher.start()

    def scraped() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                return b"gorge_webhook_alert_conditions_active" in answer.read()
        except OSError:
            return False

    wait_for(scraped, 30, "the watcher's metrics on 127.0.0.1")
    with socket.socket() as elsewhere:  # another address of this host (all of 127/8 is loopback)
        assert elsewhere.connect_ex(("127.0.0.2", port)) != 0, "listening beyond the address given"
    assert watcher.proc is not None and watcher.proc.poll() is None
