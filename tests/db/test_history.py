"""web/history.py: the hook and request pages, the chart and the per-hook latency of the JSON health, over the
attempt log, and the whole truth of them: this service's attempts named as such, Phorge's PHP worker's
results attributed to it, nothing a retry overwrote in Phorge's row gone from the chart."""

from __future__ import annotations

import dataclasses
import re
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.phorge_app_db import AppDatabases
from tests.support.receiver import Receiver
from tests.support.ui_helpers import explain, full_scans, logged_attempt, properties
from webhook_delivery.reads import phorge_status
from webhook_delivery.records.heartbeat import Heartbeat
from webhook_delivery.records.models import BreakerEvent, DeliveryAttempt, WorkerHeartbeat
from webhook_delivery.state import WorkerState
from webhook_delivery.templatetags.webhook_dashboard import error_label
from webhook_delivery.web import history
from webhook_delivery.web.history import Latency, latency
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB
TOKEN = "pages-test-t0ken"


def test_percentiles_are_nearest_rank_over_the_histogram() -> None:
    assert latency({}) == Latency(0)
    assert latency(dict.fromkeys(range(1, 101), 1)) == Latency(100, 50, 95, 99)
    assert latency({7: 1}) == Latency(1, 7, 7, 7)
    assert latency({10: 98, 2000: 2}) == Latency(100, 10, 10, 2000)


def seed_attempts(hook: str, request: str) -> None:
    """The last hour: 1..100 ms, 90 answered 200 and 10 answered 503; two hours ago: 1001..1100 ms, all
    200; and three requests refused without a call."""
    now = datetime.now(UTC)

    def attempt(ms: float, age: timedelta, result: str = "okay", code: str = "200", **extra: Any) -> DeliveryAttempt:
        fields: dict[str, Any] = {
            "request_phid": request,
            "hook_phid": hook,
            "object_phid": "PHID-TASK-aaaaaaaaaaaaaaaaaaaa",
            "started_at": now - age,
            "duration_ms": ms,
            "status": "sent" if result == "okay" else "failed",
            "result": result,
            "error_type": "http",
            "error_code": code,
            "http_status": int(code) if code.isdigit() else None,
            "response_bytes": 2,
            "worker_id": "host:1:abc",
        }
        fields.update(extra)
        return DeliveryAttempt(**fields)

    rows = [attempt(ms, timedelta(minutes=30)) for ms in range(1, 91)]
    rows += [attempt(ms, timedelta(minutes=20), "fail", "503") for ms in range(91, 101)]
    rows += [attempt(ms + 0.4, timedelta(hours=2)) for ms in range(1001, 1101)]
    rows += [
        attempt(0.5, timedelta(minutes=5), "none", "uri", error_type="hook", http_status=None, response_bytes=None)
        for _ in range(3)
    ]
    DeliveryAttempt.objects.bulk_create(rows)
    BreakerEvent.objects.create(
        hook_phid=hook, entered_at=now - timedelta(minutes=20), until=now - timedelta(minutes=15), worker_id="w"
    )


def test_hook_page_shows_success_latency_outcomes_and_the_breaker(admin_client: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Figures hook")
    request = phorge.request(hook)
    seed_attempts(hook, request)

    html = admin_client.get(f"/hooks/{hook}/").content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "Figures hook" in text
    # The last hour: 90 of 100 attempts; 1..100 ms. The day adds 100 at 1001..1100 ms.
    assert "90.0 % 90 of 100 attempts · 3 settled without a call" in text
    assert "p50 50 ms · p95 95 ms · p99 99 ms" in text
    assert "95.0 % 190 of 200 attempts" in text
    assert "p50 100 ms · p95 1090 ms · p99 1098 ms" in text
    assert (
        "HTTP 200 (success) okay 190" in text
        and "HTTP 503 fail 10" in text
        and "Hook error: Invalid URI none 3" in text
    )
    assert html.count('data-result="') == 50  # the 50 most recent attempts
    assert "203 attempts on record" in text
    assert len(re.findall(r'<table id="breaker">.*?</table>', html, re.S)[0].split("<tr>")) == 3  # head + 1 row


def test_json_health_gives_each_hook_its_latency_over_the_last_hour(client: Any, phorge: Phorge, settings: Any) -> None:
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token=TOKEN)
    hook = phorge.hook("http://127.0.0.1:9/x")
    quiet = phorge.hook("http://127.0.0.1:9/y")
    seed_attempts(hook, phorge.request(hook))
    body = client.get("/api/webhook/health", headers={"X-Service-Token": TOKEN}).json()
    by_phid = {entry["phid"]: entry["latency_ms"] for entry in body["data"]["hooks"]}
    as_of = body["data"]["queue"]["counted_at"]
    assert by_phid[hook] == {"window_sec": 3600, "as_of": as_of, "attempts": 100, "p50": 50, "p95": 95, "p99": 99}
    assert by_phid[quiet] == {"window_sec": 3600, "as_of": as_of, "attempts": 0, "p50": None, "p95": None, "p99": None}


def test_request_page_shows_the_row_and_each_attempt_in_order(admin_client: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x", name="Timeline hook")
    request = phorge.request(hook, status="failed", lastRequestResult="fail", lastRequestEpoch=phorge.now())
    seed_attempts(hook, request)
    html = admin_client.get(f"/requests/{request}/").content.decode()
    timeline = re.findall(r'<li class="gw-(\w+)" data-result', html)
    assert len(timeline) == 200  # a timeline shows at most 200 attempts, the oldest first
    assert timeline[0] == "okay"
    assert "Timeline hook" in html and f"/hooks/{hook}/" in html
    assert re.search(r"<dt>status</dt><dd>failed</dd>", html)


def test_pages_for_rows_phorge_no_longer_holds(admin_client: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/x")
    seed_attempts("PHID-HWBH-gonegonegonegonegone", "PHID-HWBR-gonegonegonegonegone")
    gone_request = admin_client.get("/requests/PHID-HWBR-gonegonegonegonegone/")
    assert gone_request.status_code == 200 and "Phorge no longer holds this request" in gone_request.content.decode()
    gone_hook = admin_client.get("/hooks/PHID-HWBH-gonegonegonegonegone/")
    assert gone_hook.status_code == 200 and "Hook no longer in Phorge" in gone_hook.content.decode()
    assert admin_client.get("/requests/PHID-HWBR-neverneverneverneverx/").status_code == 404
    assert admin_client.get(f"/hooks/{hook}/").status_code == 200  # a hook with no attempt yet
    for bad in ["/hooks/not-a-phid/", "/hooks/PHID-HWBH-a%27%3B--/", "/requests/PHID-/", "/hooks/PHID-HWBH-x/y/"]:
        assert admin_client.get(bad).status_code == 404, bad


@pytest.mark.parametrize(
    "path", ["/hooks/PHID-HWBH-aaaaaaaaaaaaaaaaaaaa/", "/requests/PHID-HWBR-aaaaaaaaaaaaaaaaaaaa/"]
)
def test_pages_refuse_anything_but_reading(admin_client: Any, phorge: Phorge, path: str) -> None:
    assert admin_client.post(path).status_code == 405


NOT_RECORDED = "attempts by Phorge's PHP worker are not recorded"


def plain(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def writer(html: str) -> str:
    found = re.search(r'id="last-writer" data-writer="(\w+)"', html)
    assert found, html
    return found.group(1)


def _due_queries(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "DISTINCT objectPHID FROM" in q["sql"]]


@pytest.mark.slow
def test_a_failed_attempt_stays_counted_after_the_retry_succeeds(
    staff: Any, phorge: Phorge, delivery_config: Any
) -> None:
    config = dataclasses.replace(delivery_config, retry_backoff_sec=1)
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/flaky/s500"), name="Flaky receiver")
        request = phorge.request(hook, retry="forever")
        build_worker(config, once=True).run()
        assert (phorge.row(request)["status"], phorge.row(request)["lastRequestResult"]) == ("queued", "fail")
        # The receiver is fixed; the retry waits out the backoff, then succeeds.
        phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", (receiver.url("/flaky/ok"), hook))
        time.sleep(2.1)
        build_worker(config, once=True).run()
        assert [r.path for r in receiver.requests] == ["/flaky/s500", "/flaky/ok"]
    row = phorge.row(request)
    assert (row["status"], row["lastRequestResult"]) == ("sent", "okay")  # Phorge's row forgot the failure

    series = history.delivery_series(phorge.now())
    assert (sum(series.sent), sum(series.failed)) == (1, 1)
    dashboard = staff.get("/").content.decode()
    assert 'data-sent-total="1"' in dashboard and 'data-failed-total="1"' in dashboard
    assert "This service's attempts, last 6 hours" in dashboard
    assert "Deliveries by Phorge's PHP worker are not recorded here" in dashboard

    hook_text = plain(staff.get(f"/hooks/{hook}/").content.decode())
    assert "50.0 % 1 of 2 attempts" in hook_text
    assert "HTTP 500 fail 1" in hook_text and "HTTP 200 (success) okay 1" in hook_text
    assert NOT_RECORDED in hook_text

    page = staff.get(f"/requests/{request}/").content.decode()
    assert re.findall(r'<li class="gw-(\w+)" data-result', page) == ["fail", "okay"]
    assert writer(page) == "ours"
    assert "this service (an attempt below)" in page


def test_a_failed_request_requeued_and_resent_stays_counted_on_the_chart_and_the_hook_page(
    staff: Any, phorge: Phorge, delivery_config: Any
) -> None:
    from django.core.management import call_command

    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/requeue/s503"), name="Requeued receiver")
        request = phorge.request(hook, retry="never")
        build_worker(delivery_config, once=True).run()
        assert phorge.row(request)["status"] == "failed"
        phorge.execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", (receiver.url("/requeue/ok"), hook))
        call_command("requeue_webhooks", "--hook", hook, "--yes")
        build_worker(delivery_config, once=True).run()
        assert [r.path for r in receiver.requests] == ["/requeue/s503", "/requeue/ok"]
    assert (phorge.row(request)["status"], phorge.row(request)["lastRequestResult"]) == ("sent", "okay")
    series = history.delivery_series(phorge.now())
    assert (sum(series.sent), sum(series.failed)) == (1, 1)
    hook_text = plain(staff.get(f"/hooks/{hook}/").content.decode())
    assert "50.0 % 1 of 2 attempts" in hook_text and "HTTP 503 fail 1" in hook_text


def test_phorges_php_deliveries_are_not_drawn_as_ours(staff: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/php", name="Delivered by PHP")
    now = phorge.now()
    for _ in range(3):
        phorge.request(hook, status="sent", lastRequestResult="okay", lastRequestEpoch=now - 30, dateModified=now - 30)
    phorge.request(
        hook,
        status="failed",
        lastRequestResult="fail",
        lastRequestEpoch=now - 20,
        dateModified=now - 20,
        properties=properties(errorType="http", errorCode=500),
    )
    dashboard = staff.get("/").content.decode()
    assert 'id="count-sent">3<' in dashboard  # Phorge's counts still count them...
    assert 'data-sent-total="0"' in dashboard and 'data-failed-total="0"' in dashboard  # ...our chart does not


def test_the_chart_reads_one_grouped_window_of_the_attempt_log(phorge: Phorge) -> None:
    hook, now = "PHID-HWBH-chartchartchartchart", phorge.now()
    # Mid-minute: an attempt ending exactly on a minute boundary started (50 ms earlier) in the minute before.
    last_minute, two_ago = now // 60 * 60 - 30, now // 60 * 60 - 90
    rows = [logged_attempt(f"PHID-HWBR-{i:020d}", hook, ended=last_minute, result="okay", code=200) for i in range(300)]
    rows += [logged_attempt("PHID-HWBR-failfailfailfailfail", hook, ended=two_ago, result="fail", code=502)]
    rows += [logged_attempt("PHID-HWBR-oldoldoldoldoldoldol", hook, ended=now - 7 * 3600, result="fail", code=502)]
    rows += [logged_attempt("PHID-HWBR-nocallnocallnocallno", hook, ended=last_minute, result="none", code="uri")]
    DeliveryAttempt.objects.bulk_create(rows)
    with CaptureQueriesContext(connections["default"]) as captured:
        series = history.delivery_series(now)
    assert len(captured.captured_queries) == 1
    assert (sum(series.sent), sum(series.failed), len(series.sent)) == (300, 1, 360)
    assert series.sent[-2] == 300 and series.failed[-3] == 1
    (sql,) = [query["sql"] for query in captured.captured_queries]
    django_db = connections["default"]
    with django_db.cursor() as cursor:
        if django_db.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            assert "USING COVERING INDEX delivery_st_started_d33086_idx (started_at>?)" in plan, plan
        else:
            cursor.execute(f"EXPLAIN {sql}")
            names = [column[0] for column in cursor.description]
            plans = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
            assert [p["key"] for p in plans] == ["delivery_st_started_d33086_idx"], plans
            assert "Using index" in str(plans[0]["Extra"]), plans  # covered: no attempt row is read


def test_a_result_no_attempt_of_ours_explains_is_shown_as_phorges_php_workers(staff: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/mixed", name="Mixed history")
    now = phorge.now()
    # Settled by PHP: no attempt of ours at all.
    by_php = phorge.request(hook, status="sent", lastRequestResult="okay", lastRequestEpoch=now - 30)
    # Failed by PHP ten minutes after an earlier attempt of ours failed the same way.
    later_php = phorge.request(
        hook,
        status="failed",
        lastRequestResult="fail",
        lastRequestEpoch=now - 600,
        properties=properties(errorType="http", errorCode=500),
    )
    # Ours, written by our attempt a second after it ended.
    ours = phorge.request(
        hook,
        status="failed",
        lastRequestResult="fail",
        lastRequestEpoch=now - 100,
        properties=properties(errorType="http", errorCode=502),
    )
    # A hook error of ours: no call, lastRequestEpoch 0, dated by dateModified (the claim bumped it).
    refused = phorge.request(
        hook, status="failed", dateModified=now - 48, properties=properties(errorType="hook", errorCode="uri")
    )
    untouched = phorge.request(hook)
    DeliveryAttempt.objects.bulk_create(
        [
            logged_attempt(later_php, hook, ended=now - 1200, result="fail", code=500),
            logged_attempt(ours, hook, ended=now - 101, result="fail", code=502),
            logged_attempt(refused, hook, ended=now - 50, result="none", code="uri", error_type="hook"),
        ]
    )
    pages = {phid: staff.get(f"/requests/{phid}/").content.decode() for phid in (by_php, later_php, ours, refused)}
    pages[untouched] = staff.get(f"/requests/{untouched}/").content.decode()
    assert {phid: writer(page) for phid, page in pages.items()} == {
        by_php: "php",
        later_php: "php",
        ours: "ours",
        refused: "ours",
        untouched: "none",
    }
    for phid in (by_php, later_php):
        text = plain(pages[phid])
        assert "written by Phorge's PHP worker (or this service before its attempt log began" in text
        assert "no attempt of this service with this result ended within 2 s of it" in text
    assert "Phorge's PHP worker (or" not in plain(pages[ours])
    assert "No attempt on record" in pages[by_php]
    for page in pages.values():
        assert "Attempts by this service" in page
        assert "Only this service's own attempts are recorded here; attempts by Phorge's PHP worker are not" in page
    hook_page = plain(staff.get(f"/hooks/{hook}/").content.decode())
    assert NOT_RECORDED in hook_page and "Recent attempts by this service" in hook_page


def test_without_the_attempt_log_the_page_does_not_guess(staff: Any, phorge: Phorge, settings: Any) -> None:
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, attempt_log=False)
    hook = phorge.hook("http://127.0.0.1:9/nolog")
    phid = phorge.request(hook, status="sent", lastRequestResult="okay", lastRequestEpoch=phorge.now())
    page = staff.get(f"/requests/{phid}/").content.decode()
    assert writer(page) == "unknown" and "cannot tell: the attempt log is off" in page
    assert "The attempt log is off" in staff.get("/").content.decode()


def test_due_now_says_how_many_are_left_to_phorges_php_worker(
    staff: Any, phorge: Phorge, worker_db: AppDatabases
) -> None:
    hook = phorge.hook("http://127.0.0.1:9/handover")
    due = [phorge.request(hook, created=phorge.now() - 10) for _ in range(3)]
    sent = phorge.request(hook, status="sent", lastRequestResult="okay", lastRequestEpoch=phorge.now())

    worker_db.create(["worker"])
    phorge_status._php_guard.cache_clear()
    with CaptureQueriesContext(connections["phorge"]) as captured:
        idle = staff.get("/").content.decode()
    assert 'data-state="idle"' in idle and "left to Phorge's PHP worker" not in idle
    assert "ready to be claimed" in idle
    assert _due_queries(captured) == []  # read only while PHP is active

    worker_db.worker_task(object_phid=due[0])
    worker_db.worker_task(object_phid=sent)  # a task of a request that is not due: not counted
    worker_db.worker_task(object_phid=due[1], task_class="PhabricatorSearchWorker")  # not a webhook task
    phorge_status._php_guard.cache_clear()
    with CaptureQueriesContext(connections["phorge"]) as captured:
        active = staff.get("/").content.decode()
    assert 'data-state="active"' in active
    assert 'id="count-due">3<' in active
    assert '<span id="due-php">1 of them left to Phorge\'s PHP worker</span>' in active
    assert "ready to be claimed" not in active
    (sql,) = _due_queries(captured)
    assert not full_scans(sql), [(r["table"], r["type"], r["key"], r.get("ref")) for r in explain(sql)]
    assert [row["key"] for row in explain(sql) if row["table"] == "herald_webhookrequest"] == ["key_phid"]
    assert "webhookURI" not in sql and "hmacKey" not in sql

    worker_db.truncate("worker", "worker_activetask")
    phorge_status._php_guard.cache_clear()
    assert "left to Phorge's PHP worker" not in staff.get("/").content.decode()


def test_worker_ids_are_readable_unique_and_fit_the_column(
    staff: Any, phorge: Phorge, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = Heartbeat(), Heartbeat()
    host = re.escape(socket.gethostname())
    assert re.fullmatch(rf"{host}:{first.pid}:[0-9a-f]{{6}}", first.worker_id), first.worker_id
    assert first.worker_id != second.worker_id  # same host and pid, two process starts
    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 255)
    long = Heartbeat()
    assert len(long.worker_id) == 200 and long.worker_id.startswith("h" * 100)

    first.publish(WorkerState(max_concurrent=4))
    assert WorkerHeartbeat.objects.get().worker_id == first.worker_id
    assert f"<code>{first.worker_id}</code>" in staff.get("/").content.decode()


def test_a_success_never_reads_as_an_error(admin_client: Any, phorge: Phorge) -> None:
    assert error_label("http", "200") == "HTTP 200 (success)"
    assert error_label("http", "204") == "HTTP 204 (success)"
    assert error_label("http", "500") == "HTTP 500" and error_label("http", "7") == "cURL 7: could not connect"
    hook = phorge.hook("http://127.0.0.1:9/ok")
    now = phorge.now()
    phid = phorge.request(
        hook,
        status="sent",
        lastRequestResult="okay",
        lastRequestEpoch=now,
        properties=properties(errorType="http", errorCode=200),
    )
    logged_attempt(phid, hook, ended=now, result="okay", code=200).save()
    request_page = admin_client.get(f"/requests/{phid}/").content.decode()
    assert "<dt>result</dt><dd>HTTP 200 (success)" in request_page and "<dt>error</dt>" not in request_page
    listing = admin_client.get("/admin/webhook_delivery/heraldwebhookrequest/").content.decode()
    assert "HTTP 200 (success)" in listing and "http / 200" not in listing
    attempts = admin_client.get("/admin/delivery_status/deliveryattempt/").content.decode()
    assert "HTTP 200 (success)" in attempts and "http / 200" not in attempts
    for page in (request_page, admin_client.get(f"/hooks/{hook}/").content.decode()):
        assert "HTTP 200 (success)" in page
        assert not re.search(r"HTTP 200(?! \(success\))", page)


def test_admin_labels_read_id_and_phid(admin_client: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/labels")
    phid = phorge.request(hook)
    DeliveryAttempt.objects.bulk_create([logged_attempt(phid, hook, ended=phorge.now(), result="okay", code=200)])
    request_id = phorge.row(phid)["id"]
    pages = [
        "/admin/webhook_delivery/heraldwebhook/",
        f"/admin/webhook_delivery/heraldwebhook/{phorge.execute('SELECT id FROM herald_webhook')[0][0]}/change/",
        f"/admin/webhook_delivery/heraldwebhookrequest/{request_id}/change/",
        "/admin/delivery_status/deliveryattempt/",
        f"/admin/delivery_status/deliveryattempt/{DeliveryAttempt.objects.get().id}/change/",
    ]
    html = {path: admin_client.get(path).content.decode() for path in pages}
    for path, page in html.items():
        assert not re.search(r">\s*(Id|Phid|[A-Z][a-z]+ phid|Worker id|Http status)\s*[:<]", page), path
    assert re.search(r">\s*PHID\s*<", html[pages[0]])
    assert "<label>ID:</label>" in html[pages[2]] and "<label>PHID:</label>" in html[pages[2]]
    assert re.search(r">\s*Hook PHID\s*<", html[pages[3]]) and re.search(r">\s*Worker ID\s*<", html[pages[3]])
    assert "<label>HTTP status:</label>" in html[pages[4]] and "<label>Object PHID:</label>" in html[pages[4]]


def test_every_page_brings_its_own_icon(staff: Any, admin_client: Any, client: Any, phorge: Phorge) -> None:
    hook = phorge.hook("http://127.0.0.1:9/icon")
    phid = phorge.request(hook)
    icon = '<link rel="icon" href="data:image/svg+xml,'
    for path in ("/", f"/hooks/{hook}/", f"/requests/{phid}/"):
        assert icon in staff.get(path).content.decode(), path
    assert icon in admin_client.get("/admin/webhook_delivery/heraldwebhookrequest/").content.decode()
    client.logout()
    assert icon in client.get("/admin/login/").content.decode()
