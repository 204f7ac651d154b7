"""Alerts: a real SMTP server (aiosmtpd), a real chat receiver (tests/support/receiver.py), real worker and watcher
processes, Phorge's real tables in MariaDB, and for the process tests Django's own tables in a throwaway
MariaDB database (gwtest<pid>_site) shared by the processes, as a deployment shares it.

Here: what runs on Django's test databases; the rest is in tests/process/test_alerts.py."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import Any

import pytest
from django.conf import settings

from tests.support.alert_channels import (
    SECRET,
    Chat,
    Smtp,
    alert_config,
    assert_no_secrets,
    configure_email,
    count_in,
    failing_hook,
)
from tests.support.helpers import PHORGE_DB, Phorge, with_event
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for
from webhook_delivery.alerts import metrics
from webhook_delivery.alerts.models import AlertChannel, AlertCondition, AlertNotification, HookLoss
from webhook_delivery.alerts.watcher import Watcher
from webhook_delivery.reads.alert_state import active_alerts, lost_total

pytestmark = PHORGE_DB


RETENTION = 7 * 86400


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
    phorge.next_second()  # a newer observation than the last one applied (Phorge's clock has 1 s steps)
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
    phorge.next_second()
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
    failing = with_event(caplog.records, "alert.channel_failing")
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
        assert len(with_event(caplog.records, "alert.channel_back")) == 2
        assert active_alerts()[0].notified_at is not None
        assert_no_secrets(smtp.bodies + chat.texts + [caplog.text], phorge, chat)
    finally:
        smtp.stop()


def test_watcher_runs_as_a_daemon_thread_and_stops_on_its_event(phorge: Phorge, receiver: Receiver, chat: Chat) -> None:
    """The way deliver_webhooks runs it (GORGE_ALERT_IN_WORKER): a daemon thread, stopped by an Event."""
    hook = failing_hook(phorge, receiver, "threaded")
    watcher = Watcher(alert_config(None, chat), dataclasses.replace(settings.GORGE_WEBHOOK, error_threshold=3))
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: count_in(chat.texts, "ALERT", hook) == 1, 10, "the alert from the thread")
        time.sleep(1)
        assert count_in(chat.texts, "ALERT", hook) == 1
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_alerts_holds_and_losses_are_shown_where_operators_look(
    phorge: Phorge, receiver: Receiver, chat: Chat, client: Any, django_user_model: Any, settings: Any
) -> None:
    from tests.support.helpers import viewer
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
