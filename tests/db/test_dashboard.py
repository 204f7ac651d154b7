"""The staff dashboard: who may see it, what it shows, and that every query it runs uses an index."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.support.helpers import PHORGE_DB, Phorge, as_request_row
from tests.support.tally import refresh_statements
from tests.support.ui_helpers import full_scans, logged_attempt, properties, seed_bulk, seed_contract
from tests.support.urlwalk import every_page, is_public
from webhook_delivery.phorge.herald import is_due, next_due
from webhook_delivery.reads import herald as selectors
from webhook_delivery.reads import phorge_status, queue
from webhook_delivery.records.models import DeliveryAttempt
from webhook_delivery.state import PhpDelivery
from webhook_delivery.web import dashboard
from webhook_delivery.worker.loop import build_worker

pytestmark = [PHORGE_DB]


def test_anonymous_is_sent_to_the_admin_login(client: Any, phorge: Phorge) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/"


def test_a_logged_in_non_staff_user_is_sent_to_the_login_too(
    client: Any, django_user_model: Any, phorge: Phorge
) -> None:
    client.force_login(django_user_model.objects.create_user("someone", password="pw-someone-1"))
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_staff_see_counts_hooks_chart_and_failures(staff: Any, phorge: Phorge) -> None:
    state = seed_contract(phorge)
    now = phorge.now()
    phorge.request(
        state.enabled,
        status="queued",
        lastRequestResult="fail",
        lastRequestEpoch=now - 1,  # after the last success (now - 5): the hook is failing
        dateModified=now - 1,
        properties=properties(retry="forever", errorType="http", errorCode=503),
    )
    # The chart draws this service's attempts: the two deliveries and the failed attempt, as logged.
    sent = [r for r in phorge.rows() if r["status"] == "sent"]
    DeliveryAttempt.objects.bulk_create(
        [logged_attempt(r["phid"], state.enabled, ended=now - 5, result="okay", code=200) for r in sent]
        + [logged_attempt(state.requests[0], state.enabled, ended=now - 1, result="fail", code=503)]
    )
    response = staff.get("/")
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")
    page = response.content.decode()
    counts = {name: re.search(rf'id="count-{name}">(\d+)<', page).group(1) for name in ("queued", "sent", "failed")}
    assert counts == {"queued": "4", "sent": "2", "failed": "1"}
    assert 'id="count-due">3<' in page  # the retry waits its backoff
    assert state.enabled in page and "contract enabled" in page and "contract disabled" in page
    assert re.search(r'<tr class="gw-row-failing" data-phid="' + state.enabled, page)
    assert re.search(r'<tr class="gw-row-disabled" data-phid="' + state.disabled, page)
    assert "HTTP 503 \u00d7 1" in page and "Hook error: Hook Disabled \u00d7 1" in page
    assert '<svg class="gw-chart"' in page and 'data-sent-total="2"' in page and 'data-failed-total="1"' in page
    assert "Phorge's PHP worker: unknown" in page
    assert 'id="no-worker"' in page


@pytest.mark.parametrize(
    ("php", "shown", "absent"),
    [
        ({"state": "idle"}, "Phorge's PHP worker: idle", "also delivering"),
        ({"state": "active", "active_tasks": 3}, "3 HeraldWebhookWorker tasks active", "worker: idle"),
        ({"state": "unknown"}, "Phorge's PHP worker: unknown", "also delivering"),
        ({"state": "recent", "last_delivery": 1_700_000_000}, "2023-11-14 22:13:20 UTC", "also delivering"),
    ],
)
def test_the_php_worker_area_follows_php_delivery_state(
    staff: Any, phorge: Phorge, monkeypatch: pytest.MonkeyPatch, php: Any, shown: str, absent: str
) -> None:
    monkeypatch.setattr(phorge_status, "php_delivery_state", lambda: PhpDelivery.from_json(php))
    page = staff.get("/").content.decode()
    assert f'data-state="{php["state"]}"' in page
    assert shown in page
    assert absent not in page
    if php["state"] == "active":
        assert "gw-php-active" in page and "Phorge's PHP worker is also delivering webhooks" in page


def test_lag_is_measured_from_when_a_request_became_due(staff: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/lag")
    now = phorge.now()
    phorge.request(hook, created=now - 45)  # untouched: due since created
    phorge.request(
        hook, created=now - 4000, lastRequestResult="fail", lastRequestEpoch=now - 400, dateModified=now - 400
    )  # failed attempt, due 100 s ago (300 s backoff)
    health = queue.queue_health(settings.GORGE_WEBHOOK)
    assert health.due_now == 2
    assert 98 <= health.oldest_due_age <= 102
    assert health.lag_state == "late"
    stalled = queue.queue_health(dataclasses.replace(settings.GORGE_WEBHOOK, retry_backoff_sec=30))
    assert stalled.oldest_due_age >= 369 and stalled.lag_state == "stalled"


def test_due_counts_and_ages_follow_the_worker_rule(phorge: Phorge) -> None:
    """The SQL behind "due now" and the lag agrees with store.is_due()/next_due(), row by row."""
    config = settings.GORGE_WEBHOOK
    lease, retry = config.claim_lease_sec, config.retry_backoff_sec
    now = phorge.now()
    shapes = [
        {"created": now - 40},  # untouched
        {"created": now - 40, "dateModified": now - 5},  # claimed, lease running
        {"created": now - 400, "dateModified": now - 100},  # claimed, lease expired
        {"created": now - 900, "lastRequestResult": "fail", "lastRequestEpoch": now - 400, "dateModified": now - 400},
        {"created": now - 900, "lastRequestResult": "fail", "lastRequestEpoch": now - 100, "dateModified": now - 100},
        {"created": now - 900, "lastRequestResult": "fail", "lastRequestEpoch": now - 400, "dateModified": now - 20},
        {"created": now - 2, "lastRequestResult": "fail", "lastRequestEpoch": now - 2, "dateModified": now - 2},
        {"created": now - 50, "status": "failed"},
    ]
    for shape in shapes:
        phorge.request(phorge.hook("http://127.0.0.1:9/rule"), **shape)
    health = queue.queue_health(config)
    for hook in health.hooks:
        (row,) = [r for r in phorge.rows() if r["webhookPHID"] == hook.phid]
        snapshot = as_request_row(row)
        due = is_due(snapshot, health.due_basis, lease, retry)
        assert hook.due == int(due), row
        expected = (next_due(snapshot, lease, retry) or snapshot.date_created) if due else None
        assert hook.oldest_due_since == expected, row


def test_held_hooks_do_not_count_as_lag(staff: Any, phorge: Phorge) -> None:
    unsigned = phorge.hook("http://127.0.0.1:9/nokey", key="")
    phorge.request(unsigned, created=phorge.now() - 3600)
    health = queue.queue_health(settings.GORGE_WEBHOOK)
    assert (health.due_now, health.due_held, health.oldest_due_age, health.lag_state) == (1, 1, None, "healthy")
    assert health.hooks[0].state == "misconfigured"


def test_hooks_needing_attention_come_first_and_the_list_is_capped(
    staff: Any, phorge: Phorge, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet = [phorge.hook("http://127.0.0.1:9/q", name=f"a quiet {i}") for i in range(3)]
    broken = phorge.hook("http://127.0.0.1:9/b", name="z broken")
    phorge.request(
        broken,
        status="failed",
        lastRequestResult="fail",
        lastRequestEpoch=phorge.now(),
        properties=properties(errorType="http", errorCode=500),
    )
    monkeypatch.setattr(dashboard, "HOOKS_SHOWN", 2)
    page = staff.get("/").content.decode()
    shown = re.findall(r'<tr class="gw-row-\w+" data-phid="([^"]+)"', page)
    assert shown == [broken, quiet[0]]
    assert "2 more healthy or quiet hooks not shown" in page


def test_the_database_going_away_shows_a_page_not_a_traceback(staff: Any, phorge: Phorge) -> None:
    from tests.support.helpers import phorge_unreachable

    with phorge_unreachable():
        response = staff.get("/")
    assert response.status_code == 503
    page = response.content.decode()
    assert "does not answer" in page
    assert "Traceback" not in page and "3306" not in page and "OperationalError" not in page


def test_every_dashboard_and_api_query_uses_an_index(
    staff: Any, phorge: Phorge, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EXPLAIN each SELECT the UI sends to Phorge's database, the counts' refreshes included (on a connection
    of their own): none may scan all of herald_webhookrequest."""
    bulk = seed_bulk(phorge)
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token="t0ken")
    # The PHP-guard, settings and partition-map reads go to Phorge's other databases (absent here), cached:
    # read it once now, for long enough, so that it is in no page's budget whatever ran just before.
    monkeypatch.setattr(phorge_status._php_guard(settings.GORGE_WEBHOOK.namespace), "_ttl", 3600.0)
    monkeypatch.setattr(phorge_status._phorge_settings(settings.GORGE_WEBHOOK).database, "_ttl", 3600.0)
    monkeypatch.setattr(phorge_status._php_guard(settings.GORGE_WEBHOOK.namespace).partitions, "_ttl", 3600.0)
    monkeypatch.setattr(phorge_status._phorge_settings(settings.GORGE_WEBHOOK).database.partitions, "_ttl", 3600.0)
    phorge_status.php_delivery_state()
    phorge_status.phorge_base_uri()
    phorge_status.partition_warning()
    refreshes = refresh_statements(monkeypatch)
    # hooks, the latest success and failure of each hook, its failures in the breaker window, the newest
    # failed attempts, those rows by id. The counts come from the tally (Django's database); the chart
    # draws this service's attempts from the attempt log.
    budgets = {"/": 5, "/api/webhook/stats": 1, "/api/webhook/hooks": 1, "/api/webhook/health": 3, "/metrics": 3}
    seen: dict[str, list[str]] = {}
    for path, budget in budgets.items():
        phorge.request(bulk.failing)  # something new for each refresh to read
        with CaptureQueriesContext(connections["phorge"]) as captured:
            response = staff.get(path, headers={"X-Service-Token": "t0ken"})
        assert response.status_code == 200, path
        statements = [query["sql"] for query in captured.captured_queries]
        seen[path] = [sql for sql in statements if sql.startswith("SELECT")]
        others = {sql for sql in statements if not sql.startswith("SELECT")}
        assert others <= {"SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", "BEGIN", "COMMIT"}, (path, others)
        assert len(seen[path]) == budget, (path, seen[path])
    page = staff.get("/").content.decode()
    assert re.search(r'<tr class="gw-row-failing" data-phid="' + bulk.failing, page)
    assert page.count("<tr>", page.index('id="failures"')) >= 20
    seen["refreshes"] = [sql for sql in refreshes() if sql.startswith("SELECT")]
    assert len(seen["refreshes"]) > 20
    for path, queries in seen.items():
        for sql in queries:
            assert not full_scans(sql), (path, sql)
            assert "webhookURI" not in sql and "hmacKey" not in sql.replace("hmacKey = ''", ""), sql


def test_a_healthy_queue_skips_the_failure_queries(staff: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/fine")
    phorge.request(hook, status="sent", lastRequestResult="okay", lastRequestEpoch=phorge.now())
    with CaptureQueriesContext(connections["phorge"]) as captured:
        assert staff.get("/").status_code == 200
    # hooks, and each hook's latest facts (the chart reads Django's attempt log, not Phorge)
    assert sum(1 for query in captured.captured_queries if query["sql"].startswith("SELECT")) == 3


def test_recent_failures_mix_failed_attempts_and_hook_errors_newest_first(phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/mixed")
    now = phorge.now()
    old_attempt = phorge.request(
        hook,
        status="failed",
        lastRequestResult="fail",
        lastRequestEpoch=now - 90000,
        dateModified=now - 90000,
        properties=properties(errorType="http", errorCode=500),
    )
    attempt = phorge.request(
        hook,
        status="queued",
        lastRequestResult="fail",
        lastRequestEpoch=now - 100,
        dateModified=now - 100,
        properties=properties(errorType="timeout", errorCode=28),
    )
    hook_error = phorge.request(
        hook, status="failed", dateModified=now - 50, properties=properties(errorType="hook", errorCode="uri")
    )
    phorge.request(hook)  # queued, never attempted: not a failure
    health = queue.queue_health(settings.GORGE_WEBHOOK)
    failures = selectors.recent_failures(health)
    assert [(f.phid, f.error_type, f.error_code) for f in failures] == [
        (hook_error, "hook", "uri"),
        (attempt, "timeout", "28"),
    ]
    assert old_attempt not in {f.phid for f in failures}  # older than a day: counted, not listed
    assert health.hooks[0].errors[0].count == 1 and len(health.hooks[0].errors) == 3


@pytest.mark.slow
def test_no_page_scans_the_request_table(admin_client: Any, phorge: Phorge, settings: Any) -> None:
    """Every page of the URLconf, as a superuser with the API token: each SELECT it sends to Phorge's
    database reaches herald_webhookrequest through an index (a week of history is a million rows)."""
    seed_bulk(phorge)
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token="t0ken")
    scans = []
    for path in every_page():
        with CaptureQueriesContext(connections["phorge"]) as captured:
            admin_client.get(path, headers={"X-Service-Token": "t0ken"})
        for query in captured.captured_queries:
            if query["sql"].startswith("SELECT") and full_scans(query["sql"]):
                scans.append((path, query["sql"][:200]))
    assert scans == []


def test_every_page_but_the_probes_wants_a_staff_login_or_the_token(client: Any, phorge: Phorge) -> None:
    phorge.request(phorge.hook("http://127.0.0.1:9/x"))
    open_pages = []
    for path in every_page():
        response = client.get(path)
        if is_public(path):
            continue
        login = response.status_code == 302 and "/admin/login/" in response["Location"]
        if not (login or response.status_code in (401, 403, 404, 405)):
            open_pages.append((path, response.status_code))
    assert open_pages == []


@pytest.fixture
def staff(transactional_db: None) -> Client:
    user = User.objects.create_user("viewer", password="pw-viewer-123456", is_staff=True)
    from django.contrib.auth.models import Permission

    user.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    client = Client()
    client.force_login(user)
    return client


def test_an_unreadable_request_is_shown_as_such_on_the_dashboard(
    phorge: Phorge, delivery_config: Any, staff: Client
) -> None:
    text = '{"retry":"forever","x":1e400}'
    phid = phorge.request(phorge.hook("http://127.0.0.1:9/unreadable", name="unreadable hook"), properties=text)
    build_worker(delivery_config, once=True).run()
    assert phorge.row(phid)["properties"] == text
    page = staff.get("/").content.decode()
    failures = page[page.index('id="failures"') :]
    assert phid in failures and "Unreadable request (left as stored)" in failures
