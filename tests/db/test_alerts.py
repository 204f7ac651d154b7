"""Alerts: a real SMTP server (aiosmtpd), a real chat receiver (tests/receiver.py), real worker and watcher
processes, Phorge's real tables in MariaDB, and for the process tests Django's own tables in a throwaway
MariaDB database (gwtest<pid>_site) shared by the processes, as a deployment shares it."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from django.conf import settings

from tests.alert_channels import Chat, Smtp
from tests.helpers import PHORGE_DB, Phorge, mysql_admin, worker_env
from tests.processes import ROOT, WorkerProcess, wait_for
from tests.receiver import Receiver
from webhook_delivery.alerts import metrics
from webhook_delivery.alerts.config import AlertConfig
from webhook_delivery.alerts.models import AlertChannel, AlertCondition, AlertNotification, HookLoss
from webhook_delivery.alerts.watcher import Watcher
from webhook_delivery.reads.alert_state import active_alerts, lost_total

pytestmark = PHORGE_DB

SECRET = "s3cret"
RETENTION = 7 * 86400


def alert_config(smtp: Smtp | None, chat: Chat | None, **changes: Any) -> AlertConfig:
    return dataclasses.replace(
        AlertConfig(
            email_to=("ops@example.com",) if smtp else (),
            chat_url=chat.url if chat else "",
            site_url="https://gorge.example.com",
            channel_timeout_sec=1.0,
            interval_sec=0.2,
        ),
        **changes,
    )


def configure_email(smtp: Smtp) -> Any:
    return {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": smtp.port,
    }


# -- Phorge's rows -----------------------------------------------------------------------------------


def failing_hook(phorge: Phorge, receiver: Receiver, name: str, *, failures: int = 3) -> str:
    """A hook whose URI carries a credential, with `failures` requests failed just now (HTTP 500)."""
    uri = f"http://user:{SECRET}@127.0.0.1:{receiver.port}/{name}/s500"
    hook = phorge.hook(uri, name=name)
    now = phorge.now()
    for _ in range(failures):
        phorge.request(
            hook,
            properties=json.dumps(
                {"retry": "forever", "transactionPHIDs": [], "triggerPHIDs": [hook]}
                | {"errorType": "http", "errorCode": "500"}
            ),
            lastRequestResult="fail",
            lastRequestEpoch=now,
            dateModified=now,
        )
    return hook


def hook_keys(phorge: Phorge) -> list[str]:
    return [k.decode() if isinstance(k, bytes) else k for (k,) in phorge.execute("SELECT hmacKey FROM herald_webhook")]


def assert_no_secrets(texts: list[str], phorge: Phorge, chat: Chat | None = None) -> None:
    secrets = [SECRET, "user:", *hook_keys(phorge)]
    if chat is not None:
        secrets += [chat.url, "T0KEN-chat-secret", "/chat/"]
    for body in texts:
        for secret in secrets:
            assert secret not in body, f"{secret!r} leaked into: {body[:300]}"


# -- in-process watcher ------------------------------------------------------------------------------


def test_fifty_failing_hooks_make_one_digest_per_channel_and_one_recovery_digest(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    for key, value in configure_email(smtp).items():
        setattr(settings, key, value)
    hooks = [failing_hook(phorge, receiver, f"hook{i:02d}") for i in range(50)]
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    watcher = Watcher(alert_config(smtp, chat), delivery)
    result = watcher.tick()
    assert len(result.entered) == 50
    # E-mail: one digest. Chat: what fits in a message the chat service accepts, in as few parts as that takes.
    chat_parts = len(chat.texts)
    assert len(smtp.bodies) == 1 and chat_parts == 2
    assert all(len(text) <= 12_000 for text in chat.texts)
    assert chat.texts[0].startswith("gorge-webhook: 50 new alerts (part 1 of 2)")
    for body in (smtp.bodies[0], "\n".join(chat.texts)):
        for hook in hooks:
            assert body.count(hook) >= 1
        assert "50 new" in body
        assert "http/500" in body
        assert "breaker backoff" in body
        assert f"https://gorge.example.com/hooks/{hooks[0]}/" in body
    for _ in range(3):
        watcher.tick()
    assert len(smtp.bodies) == 1 and len(chat.texts) == chat_parts, "a condition that holds is not notified again"
    assert {a.kind for a in active_alerts()} == {"receiver"} and all(a.notified_at for a in active_alerts())

    now = phorge.now()
    phorge.execute(
        "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = %s",
        (now + 1,),
    )
    time.sleep(1.1)  # a newer observation than the last one applied (Phorge's clock has 1 s steps)
    result = watcher.tick()
    assert len(result.recovered) == 50
    recovered = chat.texts[chat_parts:]
    assert len(smtp.bodies) == 2 and recovered
    assert "50 recovered" in recovered[0] and all(hook in "\n".join(recovered) for hook in hooks)
    chat_parts = len(chat.texts)
    watcher.tick()
    assert len(smtp.bodies) == 2 and len(chat.texts) == chat_parts
    assert_no_secrets(smtp.bodies + chat.texts + [caplog.text], phorge, chat)


def test_collection_warning_names_the_hook_and_the_count(phorge: Phorge, receiver: Receiver, chat: Chat) -> None:
    hook = phorge.hook(f"http://user:{SECRET}@127.0.0.1:{receiver.port}/old/ok", name="old backlog")
    fresh = phorge.hook(receiver.url("/fresh/ok"), name="fresh")
    now = phorge.now()
    for _ in range(3):
        phorge.request(hook, created=now - (6 * 86400 + 23 * 3600))
    phorge.request(hook, created=now)
    phorge.request(fresh, created=now)
    watcher = Watcher(alert_config(None, chat), dataclasses.replace(settings.GORGE_WEBHOOK))
    result = watcher.tick()
    assert f"collection:{hook}" in result.entered
    assert f"collection:{fresh}" not in result.entered
    [text] = chat.texts
    assert f"3 requests to hook `old backlog` ({hook}) will be deleted by Phorge in 1 hour unless delivered" in text
    assert_no_secrets(chat.texts, phorge, chat)


def test_phorge_collector_deleting_queued_rows_is_counted_and_notified(
    phorge: Phorge, receiver: Receiver, chat: Chat, caplog: pytest.LogCaptureFixture
) -> None:
    hook = phorge.hook(receiver.url("/gone/ok"), name="collected")
    now = phorge.now()
    old = [phorge.request(hook, created=now - RETENTION - 60) for _ in range(4)]
    sent_old = phorge.request(hook, created=now - RETENTION - 60, status="sent", lastRequestResult="okay")
    kept = phorge.request(hook, created=now)
    first, second = (Watcher(alert_config(None, chat), settings.GORGE_WEBHOOK) for _ in range(2))
    before = metrics.REQUESTS_LOST._value.get()
    assert first.tick().lost == 0
    assert second.tick().lost == 0
    assert "at Phorge's next garbage collection" in chat.texts[0]

    # Phorge's collector, verbatim: regardless of status.
    phorge.execute(f"DELETE FROM herald_webhookrequest WHERE dateCreated < {now} - {RETENTION} LIMIT 100")
    assert {row["phid"] for row in phorge.rows()} == {kept}
    time.sleep(1.1)
    assert first.tick().lost + second.tick().lost == 4, "each loss counted once, whichever watcher saw it"
    assert first.tick().lost == 0 and second.tick().lost == 0
    assert metrics.REQUESTS_LOST._value.get() - before == 4
    assert lost_total(hook) == 4 and HookLoss.objects.get(hook_phid=hook).hook_name == "collected"
    lost = [t for t in chat.texts if "LOST" in t]
    assert len(lost) == 1
    assert f"4 queued requests to hook `collected` ({hook}) were deleted by Phorge's garbage collection" in lost[0]
    assert all(phid in lost[0] for phid in old) and sent_old not in lost[0]
    assert "4 lost in all for this hook" in lost[0]
    assert not AlertCondition.objects.filter(key=f"collection:{hook}", active=True).exists()
    assert_no_secrets([*chat.texts, caplog.text], phorge, chat)


@pytest.mark.slow
def test_failing_channels_are_logged_once_and_catch_up_when_back(
    phorge: Phorge, receiver: Receiver, chat: Chat, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    smtp = Smtp()  # not started: connections refused
    for key, value in configure_email(smtp).items():
        setattr(settings, key, value)
    chat.hang()
    hook = failing_hook(phorge, receiver, "down")
    delivery = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3)
    watcher = Watcher(alert_config(smtp, chat, interval_sec=5.0), delivery)
    failed_before = metrics.NOTIFICATIONS_FAILED.labels("email")._value.get()
    caplog.set_level(logging.INFO)
    for _ in range(3):
        started = time.monotonic()
        result = watcher.tick()
        assert time.monotonic() - started < 8, "a pass is bounded by the channel timeout"
        assert set(result.failed) <= {"email", "chat"}
    failing = [r for r in caplog.records if r.getMessage().startswith("alert channel failing")]
    assert sorted(getattr(r, "channel", "") for r in failing) == ["chat", "email"], "logged once per outage"
    # Retried with backoff, not at every pass: the passes right after a failure leave the channel alone.
    assert metrics.NOTIFICATIONS_FAILED.labels("email")._value.get() == failed_before + 1
    assert AlertChannel.objects.get(name="email").retry_at is not None
    assert AlertNotification.objects.filter(sent_at__isnull=True).count() == 2
    assert [a.pending_channels for a in active_alerts()] == [("chat", "email")]

    smtp.start()
    chat.answer()
    AlertChannel.objects.update(retry_at=None)  # the backoff's wait, over
    try:
        wait_for(lambda: bool(watcher.tick().sent.keys() >= {"email"}) or len(smtp.bodies) == 1, 10, "e-mail back")
        wait_for(lambda: watcher.tick() is not None and len(chat.texts) >= 1, 10, "chat back")
        for _ in range(2):
            watcher.tick()
        assert len(smtp.bodies) == 1 and len(chat.texts) == 1
        assert hook in smtp.bodies[0] and hook in chat.texts[0]
        assert [r.getMessage() for r in caplog.records].count("alert channel works again: pending alerts sent") == 2
        assert active_alerts()[0].notified_at is not None
        assert_no_secrets(smtp.bodies + chat.texts + [caplog.text], phorge, chat)
    finally:
        smtp.stop()


# -- processes against a shared MariaDB `default` database -------------------------------------------


class WatcherProcess(WorkerProcess):
    command = "watch_webhooks"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                super().stop()


@pytest.fixture
def watchers(workers: Any) -> Any:
    """Real `manage.py watch_webhooks` processes, stopped (SIGTERM) at the end like the workers."""
    return lambda name, *args, **env: workers(name, *args, kind=WatcherProcess, **env)


def channel_env(site: str, smtp: Smtp, chat: Chat, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": site,
        "EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}",
        "GORGE_ALERT_EMAIL_TO": "ops@example.com,oncall@example.com",
        "GORGE_ALERT_WEBHOOK_URL": chat.url,
        "GORGE_ALERT_SITE_URL": "https://gorge.example.com",
        "GORGE_ALERT_INTERVAL_SEC": "0.3",
        "GORGE_ALERT_CHANNEL_TIMEOUT_SEC": "2",
        **extra,
    }


def _count(texts: list[str], *needles: str) -> int:
    return sum(1 for text in texts if all(needle in text for needle in needles))


@pytest.mark.slow
def test_receiver_failing_breaker_opens_one_message_then_one_recovery(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: str, workers: Any, watchers: Any
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
    worker = workers("worker", DATABASE_URL=site, **delivery).start()
    watcher = watchers("watcher", **channel_env(site, smtp, chat, GORGE_ALERT_FAILING_MINUTES="60", **delivery)).start()

    wait_for(lambda: _count([r.path for r in receiver.requests], "/breaks/") >= 3, 20, "three failed attempts")
    opened = time.monotonic()
    wait_for(lambda: _count(smtp.bodies, "ALERT", hook) and _count(chat.texts, "ALERT", hook), 20, "the alert")
    assert time.monotonic() - opened < 60
    for body in smtp.bodies + chat.texts:
        assert "breaker backoff" in body and "http/500" in body and "`breaks`" in body
    time.sleep(3)  # ten more passes while it keeps failing
    assert _count(smtp.bodies, "ALERT", hook) == 1 and _count(chat.texts, "ALERT", hook) == 1

    phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", (uri.replace("s500", "ok"), hook))
    wait_for(lambda: _count(smtp.bodies, "RECOVERED", hook) and _count(chat.texts, "RECOVERED", hook), 25, "recovery")
    time.sleep(1.5)
    assert _count(smtp.bodies, "RECOVERED", hook) == 1 and _count(chat.texts, "RECOVERED", hook) == 1
    assert _count(smtp.bodies, "ALERT", hook) == 1 and _count(chat.texts, "ALERT", hook) == 1
    watcher.stop()
    worker.stop()
    assert_no_secrets(smtp.bodies + chat.texts + [watcher.log.read_text()], phorge, chat)


@pytest.mark.slow
def test_two_watchers_side_by_side_notify_each_condition_exactly_once(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: str, watchers: Any
) -> None:
    hooks = [failing_hook(phorge, receiver, f"pair{i}") for i in range(10)]
    env = channel_env(site, smtp, chat, GORGE_WEBHOOK_ERROR_THRESHOLD="3", GORGE_ALERT_INTERVAL_SEC="0.1")
    pair = [watchers("a", **env).start(), watchers("b", **env).start()]
    wait_for(lambda: all(_count(smtp.bodies, "ALERT", h) for h in hooks), 20, "every hook's alert by e-mail")
    wait_for(lambda: all(_count(chat.texts, "ALERT", h) for h in hooks), 20, "every hook's alert in chat")
    time.sleep(2)
    now = phorge.now()
    phorge.execute(
        "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = %s", (now,)
    )
    wait_for(lambda: all(_count(smtp.bodies, "RECOVERED", h) for h in hooks), 20, "every recovery by e-mail")
    wait_for(lambda: all(_count(chat.texts, "RECOVERED", h) for h in hooks), 20, "every recovery in chat")
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
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: str, workers: Any, watchers: Any
) -> None:
    hook = phorge.hook(receiver.url("/alive/ok"), name="alive")
    worker = workers("worker", DATABASE_URL=site, GORGE_WEBHOOK_POLL_INTERVAL_MS="100").start()
    name = site.rsplit("/", 1)[1]

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
    assert not _count(chat.texts, "No deliver_webhooks worker")
    assert worker.proc is not None
    worker.proc.kill()
    worker.proc.wait(10)
    killed = time.monotonic()
    for _ in range(3):
        phorge.request(hook)
    wait_for(
        lambda: (
            _count(chat.texts, "No deliver_webhooks worker", "3 requests are due")
            and _count(smtp.bodies, "No deliver_webhooks worker")
        ),
        2 * threshold,
        "the no-worker alert within twice the heartbeat threshold",
    )
    assert time.monotonic() - killed <= 2 * threshold
    watcher.stop()


@pytest.mark.slow
def test_watch_test_sends_to_every_channel_and_exits_by_result(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: str
) -> None:
    env = worker_env(**channel_env(site, smtp, chat))
    done = subprocess.run(
        [sys.executable, "manage.py", "watch_webhooks", "--test"], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"email: sent" in done.stdout and b"chat: sent" in done.stdout
    assert _count(smtp.bodies, "test message") == 1 and _count(chat.texts, "test message") == 1

    smtp.stop()
    done = subprocess.run(
        [sys.executable, "manage.py", "watch_webhooks", "--test"], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 1
    assert b"email: FAILED" in done.stdout and b"chat: sent" in done.stdout
    output = (done.stdout + done.stderr).decode()
    assert "T0KEN-chat-secret" not in output and chat.url not in output

    once = subprocess.run(
        [sys.executable, "manage.py", "watch_webhooks", "--once"],
        cwd=ROOT,
        env=worker_env(**channel_env(site, Smtp(), chat)),
        capture_output=True,
        timeout=60,
    )
    assert once.returncode == 0, once.stderr.decode()
    assert b"entered 0" in once.stdout


def test_watcher_runs_as_a_daemon_thread_and_stops_on_its_event(phorge: Phorge, receiver: Receiver, chat: Chat) -> None:
    """The way deliver_webhooks runs it (GORGE_ALERT_IN_WORKER): a daemon thread, stopped by an Event."""
    hook = failing_hook(phorge, receiver, "threaded")
    watcher = Watcher(alert_config(None, chat), dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3))
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: _count(chat.texts, "ALERT", hook) == 1, 10, "the alert from the thread")
        time.sleep(1)
        assert _count(chat.texts, "ALERT", hook) == 1
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.slow
def test_the_watcher_inside_a_worker_never_holds_up_delivery_while_both_channels_fail(
    phorge: Phorge, receiver: Receiver, chat: Chat, site: str, workers: Any
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
        wait_for(lambda: _count([r.path for r in receiver.requests], "/healthy/") == 100, 30, "the healthy hook")
        hung = [r for r in receiver.requests if r.path.startswith("/chat/")]
        delivered = [r for r in receiver.requests if r.path.startswith("/healthy/")]
        assert not chat.texts, "nothing reached the chat channel yet"
        assert any(h.at <= d.at <= h.at + 2 for h in hung for d in delivered), "delivered while a chat call hung"

        def failing_lines() -> int:
            messages = [line.get("message", "") for line in worker.lines()]
            return len([m for m in messages if m.startswith("alert channel failing")])

        wait_for(lambda: failing_lines() >= 2, 15, "both channels logged as failing")
        time.sleep(1.5)  # several more passes
        assert failing_lines() == 2  # chat and e-mail, once each
        smtp.start()
        chat.answer()
        wait_for(
            lambda: _count(smtp.bodies, "ALERT", broken) == 1 and _count(chat.texts, "ALERT", broken) == 1,
            30,
            "catch-up",
        )
    finally:
        worker.stop()
        smtp.stop()
    assert_no_secrets(smtp.bodies + chat.texts + [worker.log.read_text()], phorge, chat)


def test_alerts_holds_and_losses_are_shown_where_operators_look(
    phorge: Phorge, receiver: Receiver, chat: Chat, client: Any, django_user_model: Any, settings: Any
) -> None:
    from tests.helpers import viewer
    from webhook_delivery.records.holds import hold

    hook = failing_hook(phorge, receiver, "shown")
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3, service_token="t0ken")
    Watcher(alert_config(None, chat), settings.GORGE_WEBHOOK).tick()
    HookLoss.objects.create(hook_phid=hook, hook_name="shown", lost_total=4)
    hold(hook, reason="receiver <b>moving</b>", held_by="ops")
    client.force_login(viewer(django_user_model))
    for page in (client.get("/").content.decode(), client.get(f"/hooks/{hook}/").content.decode()):
        assert 'id="alerts"' in page and f'data-key="receiver:{hook}"' in page
        assert 'id="holds"' in page and "receiver &lt;b&gt;moving&lt;/b&gt;" in page
    assert "4 requests of this hook were deleted by Phorge" in client.get(f"/hooks/{hook}/").content.decode()
    health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN="t0ken").content)["data"]
    assert [a["key"] for a in health["alerts"]] == [f"receiver:{hook}"]
    assert health["lost_to_collection"] == {hook: 4}
    assert [h["hook"] for h in health["holds"]] == [hook]
    scraped = client.get("/metrics").content.decode()
    assert 'gorge_webhook_alert_conditions_active{kind="receiver"} 1.0' in scraped
    assert f'gorge_webhook_requests_lost_to_collection_total{{hook="{hook}"}} 4.0' in scraped
    assert_no_secrets([scraped, json.dumps(health)], phorge, chat)


# The dashboard as the web process renders it from Django's shared database (static files uncollected).
PAGE = """
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from tests.helpers import viewer
user = get_user_model().objects.filter(username="operator").first() or viewer(get_user_model())
client = Client()
client.force_login(user)
plain = {**settings.STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
with override_settings(STORAGES=plain):
    print(client.get("/", HTTP_HOST="localhost").content.decode())
"""


@pytest.mark.slow
def test_a_worker_stopped_by_sigterm_reads_as_stopped_cleanly_on_the_page_and_in_the_alert(
    phorge: Phorge, receiver: Receiver, smtp: Smtp, chat: Chat, site: str, workers: Any
) -> None:
    from tests.processes import manage
    from webhook_delivery.wording import moment

    hook = phorge.hook(receiver.url("/after/ok"), name="after the stop")
    worker = workers("worker", DATABASE_URL=site, GORGE_WEBHOOK_POLL_INTERVAL_MS="100").start()
    name = site.rsplit("/", 1)[1]

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

    page = manage("shell", "-c", PAGE, env=worker_env(DATABASE_URL=site, ALLOWED_HOSTS="localhost")).stdout
    assert 'data-last="stopped"' in page
    assert f"stopped cleanly at {stopped_at}" in page
    assert 'data-state="stopped"' in page, "the workers table lists it as stopped"
