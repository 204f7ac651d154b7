# ruff: noqa: RUF001 - the messages use the multiplication sign
"""Each alert condition, start and recovery, on Phorge's real tables with a fixed clock: MariaDB's own session
clock (`SET timestamp`) for Phorge's side, a fixed host clock for the heartbeats. What is asserted is what the
e-mail says (Django's locmem outbox: the real message the e-mail channel sends), keyed on the condition."""

from __future__ import annotations

import calendar
import dataclasses
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings
from django.core import mail

from tests.support.clock import PhorgeClock
from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.phorge_app_db import AppDatabases
from webhook_delivery.alerts import messages
from webhook_delivery.alerts.config import AlertConfig
from webhook_delivery.alerts.messages import SUBJECT_LIMIT
from webhook_delivery.alerts.models import AlertCondition, AlertNotification
from webhook_delivery.alerts.watcher import Watcher
from webhook_delivery.records.models import WorkerHeartbeat
from webhook_delivery.wording import ELLIPSIS

pytestmark = PHORGE_DB

T = calendar.timegm((2026, 12, 1, 20, 45, 0))  # 20:45 UTC on Phorge's database clock
SITE = "https://gorge.example.org"


@pytest.fixture
def clock(phorge: Phorge) -> Iterator[PhorgeClock]:
    fixed = PhorgeClock(phorge, T)
    yield fixed
    fixed.release()


def watcher(clock: PhorgeClock, **delivery: Any) -> Watcher:
    config = AlertConfig(email_to=("ops@example.com",), site_url=SITE, interval_sec=0.2, channel_timeout_sec=5)
    return Watcher(config, dataclasses.replace(settings.GORGE_WEBHOOK, **delivery), clock=clock)


def said(key: str, transition: str) -> tuple[str, str]:
    """(subject, text) of this condition's start or end, as recorded once and as the e-mail carried it."""
    [note] = AlertNotification.objects.filter(key=key, transition=transition)
    subject, text = note.subject, note.text
    assert "\n" not in subject and len(subject) <= SUBJECT_LIMIT, subject
    if subject.endswith(ELLIPSIS):
        assert subject[-2] != " ", "cut at a word"
    sent = [message for message in mail.outbox if text in str(message.body).replace("\r\n", "\n")]
    assert len(sent) == 1, "sent once"
    if len(AlertNotification.objects.filter(sent_at=note.sent_at)) == 1:
        assert sent[0].subject == subject, "a lone notification keeps its own subject"
    return subject, text


def failed_row(phorge: Phorge, hook: str, at: int, error: tuple[str, str], **columns: Any) -> None:
    properties = {"retry": "never", "transactionPHIDs": [], "triggerPHIDs": [hook]}
    properties |= {"errorType": error[0], "errorCode": error[1]}
    phorge.request(
        hook,
        properties=json.dumps(properties),
        created=at,
        status=columns.pop("status", "failed"),
        lastRequestResult=columns.pop("lastRequestResult", "fail"),
        lastRequestEpoch=columns.pop("lastRequestEpoch", at),
        dateModified=at,
        **columns,
    )


def test_a_failing_hook_counts_only_this_incidents_failures_and_ends_when_it_delivers(
    phorge: Phorge, clock: PhorgeClock, worker_db: AppDatabases, settings: Any, staff: Any
) -> None:
    worker_db.create(["maniphest"])
    task = worker_db.task(title="Fix the build")
    (task_id,) = worker_db.execute(f"SELECT id FROM {worker_db.table('maniphest', 'maniphest_task')}")[0]
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, phorge_base_uri="https://phorge.example.org")
    hook = phorge.hook("http://127.0.0.1:9/ci", name="ci-bridge")
    success = T - 3600  # 19:45
    phorge.request(hook, created=success, status="sent", lastRequestResult="okay", lastRequestEpoch=success)
    for age in (7200, 7100, 7000):  # old failures, before the last success: not this incident's
        failed_row(phorge, hook, T - age, ("hook", "uri"), lastRequestResult="none", lastRequestEpoch=0)
    failed_row(phorge, hook, T - 5000, ("http", "503"))
    for minute in range(6):
        failed_row(phorge, hook, T - 1200 + 60 * minute, ("http", "500"))  # from 20:25
    failed_row(phorge, hook, T - 300, ("timeout", "28"), status="queued", objectPHID=task)
    w = watcher(clock, error_threshold=100)
    assert w.tick().entered == [f"receiver:{hook}"]
    subject, body = said(f"receiver:{hook}", "entered")
    assert subject == "[gorge-webhook] Hook `ci-bridge` failing since 20:25 UTC"
    assert f"Hook `ci-bridge` ({hook}) has been failing since 20:25 UTC (20 min)." in body
    assert "Its last success was at 19:45 UTC. 7 requests failed since then: HTTP 500 × 6, Timeout (28) × 1." in body
    assert f"Last error: Timeout (28) (timeout/28), for `T{task_id}`." in body
    assert "1 queued, 1 due now." in body  # its retry backoff (300 s) ran out just now
    assert f"    {SITE}/hooks/{hook}/" in body.splitlines()
    assert "    https://phorge.example.org/herald/webhook/view/" in body
    # The object's page is a link of its own (issue 39, finding 7): outside the task's literal block, a link on
    # the dashboard.
    assert body.splitlines()[-1] == f"    https://phorge.example.org/T{task_id}"
    text = messages.task_opened(subject, body, f"receiver:{hook}", 1).body
    assert f"\nhttps://phorge.example.org/T{task_id}\n" in text
    assert f"https://phorge.example.org/T{task_id}" not in "".join(re.findall(r"%%%.*?%%%", text, re.DOTALL))
    what = staff.get("/").content.decode().split('<td class="gw-alert-what">', 1)[1].split("</td>", 1)[0]
    assert f'<a href="https://phorge.example.org/T{task_id}">https://phorge.example.org/T{task_id}</a>' in what
    assert f'<a href="{SITE}/hooks/{hook}/">' in what
    assert f"for <code>T{task_id}</code>." in what and "<code>ci-bridge</code>" in what and "`" not in what

    clock.advance(60)
    phorge.request(hook, created=T + 60, status="sent", lastRequestResult="okay", lastRequestEpoch=T + 60)
    clock.advance(60)
    assert w.tick().recovered == [f"receiver:{hook}"]
    subject, body = said(f"receiver:{hook}", "recovered")
    assert subject == "[gorge-webhook] Hook `ci-bridge` delivers again"
    assert "a request succeeded at 20:46 UTC; it had been failing since 20:25 UTC (22 min). 1 queued." in body


def test_a_hook_in_backoff_is_told_at_once_with_the_breaker_figures(phorge: Phorge, clock: PhorgeClock) -> None:
    hook = phorge.hook("http://127.0.0.1:9/ci", name="backs off")
    for seconds in (100, 80, 60):
        failed_row(phorge, hook, T - seconds, ("http", "502"), status="queued")
    w = watcher(clock, error_threshold=3, error_backoff_sec=300)
    assert w.tick().entered == [f"receiver:{hook}"]
    subject, body = said(f"receiver:{hook}", "entered")
    assert subject == "[gorge-webhook] Hook `backs off` in Phorge's breaker backoff"
    assert "3 failed attempts in the last 5 min (threshold 3); failing since 20:43 UTC (2 min)." in body
    assert "It has no success on record; 3 requests have failed: HTTP 502 × 3." in body


def test_requests_near_collection_are_told_with_the_deadline_and_end_once_delivered(
    phorge: Phorge, clock: PhorgeClock
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/ci", name="old backlog")
    old = [phorge.request(hook, created=T - 7 * 86400 + 3 * 3600) for _ in range(3)]
    w = watcher(clock)
    WorkerHeartbeat.objects.create(
        worker_id="w:1:aaaaaa", hostname="w", pid=1, started_at=_host(T - 60), last_seen=_host(T), state={}
    )
    assert f"collection:{hook}" in w.tick().entered
    subject, body = said(f"collection:{hook}", "entered")
    assert subject == "[gorge-webhook] 3 requests to `old backlog` deleted by Phorge in 3 hours"
    assert "the oldest was queued at 2026-11-24 23:45 UTC, and Phorge keeps requests 7 days" in body
    phorge.execute(
        "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = %s "
        f"WHERE phid IN ({', '.join(['%s'] * len(old))})",
        (T + 30, *old),
    )
    clock.advance(60)
    assert f"collection:{hook}" in w.tick().recovered
    subject, body = said(f"collection:{hook}", "recovered")
    assert subject == "[gorge-webhook] No request to `old backlog` near Phorge's collection"
    assert "within 24 h of Phorge's garbage collection any more: delivered, requeued or deleted" in body


def _host(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def test_no_worker_says_the_last_one_stopped_cleanly_and_which_one_came_back(
    phorge: Phorge, clock: PhorgeClock
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/ci", name="due")
    for _ in range(4):
        phorge.request(hook, created=T - 120)
    WorkerHeartbeat.objects.create(
        worker_id="web1:41:abc123",
        hostname="web1",
        pid=41,
        started_at=_host(T - 3600),
        last_seen=_host(T - 840),
        state={"stopped": "clean", "phorge_now": T - 840},  # 20:31
    )
    w = watcher(clock)
    assert "no_worker" in w.tick().entered
    subject, body = said("no_worker", "entered")
    assert subject == "[gorge-webhook] No worker delivering: 4 requests due"
    assert "alive while 4 requests are due (the oldest due since 20:43 UTC, 2 min)." in body
    assert "The last worker, `web1:41:abc123`, stopped cleanly at 20:31 UTC." in body
    assert f"    {SITE}/" in body.splitlines()

    clock.advance(120)
    WorkerHeartbeat.objects.create(
        worker_id="web2:7:def456", hostname="web2", pid=7, started_at=_host(T + 100), last_seen=_host(T + 118), state={}
    )
    assert "no_worker" in w.tick().recovered
    subject, body = said("no_worker", "recovered")
    assert subject == "[gorge-webhook] A worker delivers again"
    assert "A deliver_webhooks worker is alive again (`web2:7:def456`), after 4 min without one." in body


def test_no_worker_after_silence_is_not_called_a_stop(phorge: Phorge, clock: PhorgeClock) -> None:
    hook = phorge.hook("http://127.0.0.1:9/ci", name="due")
    phorge.request(hook, created=T - 120)
    WorkerHeartbeat.objects.create(
        worker_id="web1:41:abc123",
        hostname="web1",
        pid=41,
        started_at=_host(T - 3600),
        last_seen=_host(T - 960),
        state={"phorge_now": T - 960},  # 20:29, no last beat
    )
    w = watcher(clock)
    assert "no_worker" in w.tick().entered
    _subject, body = said("no_worker", "entered")
    assert "was last heard at 20:29 UTC, with no clean stop (killed, crashed, or cut off" in body
    phorge.execute("UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay'")
    clock.advance(60)
    assert "no_worker" in w.tick().recovered
    _subject, body = said("no_worker", "recovered")
    assert "Nothing is due any more, after 3 min; still no deliver_webhooks worker is alive" in body


def test_one_php_task_is_no_alert_and_php_delivering_for_a_minute_is_one(
    phorge: Phorge, clock: PhorgeClock, worker_db: AppDatabases
) -> None:
    worker_db.create(["worker"])
    w = watcher(clock)
    worker_db.worker_task(archived=True, at=T - 5)  # one webhook delivered by phd, just now
    for step in (0, 20, 20, 20):  # 20:45:00 .. 20:46:00: "active" for a minute after the task, then not
        clock.advance(step)
        assert "php_delivery" not in w.tick().entered
    assert not mail.outbox and not AlertCondition.objects.filter(key="php_delivery", active=True).exists()

    worker_db.worker_task(at=clock.now)  # a task queued: PHP still schedules its own deliveries
    passes = []
    for step in (0, 30, 31):
        clock.advance(step)
        passes.append(w.tick().entered)
    assert passes == [[], [], ["php_delivery"]], "told once it has held 60 s"
    subject, body = said("php_delivery", "entered")
    assert subject == "[gorge-webhook] Phorge's PHP worker delivers webhooks too"
    assert "1 HeraldWebhookWorker task in Phorge's worker queue; the last delivered at 20:44 UTC." in body

    worker_db.truncate("worker", "worker_activetask")
    worker_db.truncate("worker", "worker_archivetask")
    ends = []
    for step in (30, 30, 31):
        clock.advance(step)
        ends.append(w.tick().recovered)
    assert ends == [[], [], ["php_delivery"]], "its end told once it has been clear 60 s"
    subject, body = said("php_delivery", "recovered")
    assert subject == "[gorge-webhook] Phorge's PHP worker no longer delivers webhooks"
    assert "has delivered no webhook for at least 60 s (the last at 20:44 UTC)" in body


def test_stalled_is_told_on_the_second_pass_and_ends_on_the_second_clear_one(
    phorge: Phorge, clock: PhorgeClock
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/ci", name="stuck")
    phorge.request(hook, created=T - 400)
    WorkerHeartbeat.objects.create(
        worker_id="w:1:aaaaaa", hostname="w", pid=1, started_at=_host(T - 60), last_seen=_host(T), state={}
    )
    w = watcher(clock)
    assert "stalled" not in w.tick().entered
    clock.advance(1)
    assert "stalled" in w.tick().entered
    subject, body = said("stalled", "entered")
    assert subject == "[gorge-webhook] Delivery stalled: oldest due request waiting 7 min"
    assert "has waited 7 min (since 20:38 UTC; stalled beyond 5 min); 1 request due." in body
    phorge.execute("UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay'")
    clock.advance(1)
    assert "stalled" not in w.tick().recovered
    clock.advance(1)
    assert "stalled" in w.tick().recovered
    _subject, body = said("stalled", "recovered")
    assert "Delivery is no longer stalled: nothing is due, after 7 min." in body


def test_herald_unreachable_is_told_on_the_second_pass_and_its_end_on_the_second_answer(
    phorge: Phorge, clock: PhorgeClock
) -> None:
    import socket

    from django.db import connections

    connection = connections["phorge"]
    port = connection.settings_dict["PORT"]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    w = watcher(clock)
    try:
        connection.close()
        connection.settings_dict["PORT"] = dead  # herald's server refuses connections now
        ticks = []
        for _step in range(2):
            clock.now += 1  # the host's clock: Phorge's cannot be read
            ticks.append(w.tick().entered)
        assert ticks == [[], ["database"]]
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    subject, body = said("database", "entered")
    assert subject == "[gorge-webhook] Phorge's herald database unreachable"
    assert "does not answer the alert watcher (OperationalError) since 20:45 UTC" in body
    clock.set(T + 180)
    assert w.tick().recovered == []
    clock.advance(1)
    assert w.tick().recovered == ["database"]
    _subject, body = said("database", "recovered")
    assert "answers the alert watcher again, after 3 min." in body
