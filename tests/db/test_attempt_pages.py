"""The hook and request pages, and the per-hook latency of the JSON health, over the attempt log."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.helpers import PHORGE_DB, Phorge
from webhook_delivery.records.models import BreakerEvent, DeliveryAttempt
from webhook_delivery.web.history import Latency, latency

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
    assert by_phid[hook] == {"window_sec": 3600, "attempts": 100, "p50": 50, "p95": 95, "p99": 99}
    assert by_phid[quiet] == {"window_sec": 3600, "attempts": 0, "p50": None, "p95": None, "p99": None}


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
