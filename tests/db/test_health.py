"""Probes, the runbook JSON (/api/webhook/health) and the web process's Prometheus metrics."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import PHORGE_DB, Phorge, phorge_unreachable, with_event
from tests.support.ui_helpers import properties, seed_contract
from webhook_delivery.reads import phorge_status
from webhook_delivery.records.models import WorkerHeartbeat
from webhook_delivery.state import PhpDelivery
from webhook_delivery.version import VERSION
from webhook_delivery.web.metrics import COLLECTOR

pytestmark = PHORGE_DB
TOKEN = "health-t0ken"


@pytest.fixture
def token(settings: Any) -> str:
    settings.GORGE_WEBHOOK = dataclasses.replace(
        settings.GORGE_WEBHOOK, service_token=TOKEN, error_threshold=3, error_backoff_sec=300
    )
    return TOKEN


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_healthz_needs_no_database(client: Any, phorge: Phorge) -> None:
    with phorge_unreachable():
        response = client.get("/healthz")
    assert (response.status_code, json.loads(response.content)) == (200, {"status": "ok"})
    assert response["Cache-Control"].startswith("max-age=0")


def test_readyz_follows_the_phorge_database(client: Any, phorge: Phorge, caplog: pytest.LogCaptureFixture) -> None:
    response = client.get("/readyz")
    assert (response.status_code, json.loads(response.content)) == (200, {"status": "ok", "php_delivery": "unknown"})
    with phorge_unreachable():
        response = client.get("/readyz")
    assert response.status_code == 503
    assert json.loads(response.content) == {"status": "unavailable", "reason": "phorge database unreachable"}
    assert with_event(caplog.records, "readiness.phorge_unavailable")
    assert client.get("/readyz").status_code == 200


def test_readyz_reports_a_delivering_php_worker_without_failing(
    client: Any, phorge: Phorge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        phorge_status, "php_delivery_state", lambda: PhpDelivery.from_json({"state": "active", "active_tasks": 2})
    )
    response = client.get("/readyz")
    assert response.status_code == 200
    assert json.loads(response.content)["warning"] == "Phorge's PHP worker is also delivering webhooks"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_probes_and_metrics_are_exempt_from_the_https_redirect(
    client: Any, phorge: Phorge, settings: Any, path: str
) -> None:
    settings.SECURE_SSL_REDIRECT = True
    assert client.get(path).status_code == 200
    assert client.get("/api/webhook/stats").status_code == 301  # everything else still moves to https


def test_probes_are_unauthenticated_but_the_api_is_not(client: Any, phorge: Phorge, token: str) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/api/webhook/health").status_code == 401


def test_health_json_per_hook_state_workers_and_php(client: Any, phorge: Phorge, token: str) -> None:
    contract = seed_contract(phorge)
    now = phorge.now()
    broken = phorge.hook("http://127.0.0.1:9/broken", name="broken")
    for age in (10, 20, 30):
        phorge.request(
            broken,
            status="failed",
            lastRequestResult="fail",
            lastRequestEpoch=now - age,
            dateModified=now - age,
            properties=properties(errorType="timeout", errorCode=28),
        )
    unsigned = phorge.hook("http://127.0.0.1:9/unsigned", name="unsigned", key="")
    phorge.request(unsigned, created=now - 50)
    beat = datetime.now(UTC)
    WorkerHeartbeat.objects.create(
        worker_id="web1:10:1",
        hostname="web1",
        pid=10,
        started_at=beat - timedelta(hours=1),
        last_seen=beat,
        state={
            "max_concurrent": 16,
            "in_flight": 2,
            "counts": {"degraded.database": 4, "claims_won": 9},
            "database_down_for_sec": None,
            "hooks_lock_busy": [],
        },
    )
    WorkerHeartbeat.objects.create(
        worker_id="web2:11:1",
        hostname="web2",
        pid=11,
        started_at=beat - timedelta(hours=2),
        last_seen=beat - timedelta(seconds=90),
        state={},
    )

    response = client.get("/api/webhook/health", headers={"X-Service-Token": token})
    assert response.status_code == 200
    data = json.loads(response.content)["data"]
    assert data["queue"] == {
        "queued": 4,
        "sent": 2,
        "failed": 4,
        "due_now": 4,
        "due_held": 1,
        "oldest_due_age_sec": data["queue"]["oldest_due_age_sec"],
        "lag": "healthy",
        "late_after_sec": 30,
        "stalled_after_sec": 300,
        "counted_at": data["queue"]["counted_at"],
        "counted_ago_sec": data["queue"]["counted_ago_sec"],
        "counts_complete": True,
    }
    assert 0 <= data["now"] - data["queue"]["counted_at"] == data["queue"]["counted_ago_sec"] <= 2
    assert 0 <= data["queue"]["oldest_due_age_sec"] < 30  # the unsigned hook's 50 s old request is held
    hooks = {hook["name"]: hook for hook in data["hooks"]}
    assert hooks["broken"]["breaker"] == {"state": "backoff", "recent_failures": 3, "threshold": 3, "window_sec": 300}
    assert hooks["broken"]["state"] == "backoff"
    assert hooks["broken"]["errors"] == [{"type": "timeout", "code": "28", "count": 3}]
    assert hooks["broken"]["last_failure_epoch"] == now - 10 and hooks["broken"]["last_success_epoch"] is None
    assert hooks["unsigned"]["misconfigured"] is True and hooks["unsigned"]["state"] == "misconfigured"
    assert hooks["contract enabled"]["counts"] == {"queued": 3, "sent": 2, "failed": 0}
    assert hooks["contract enabled"]["breaker"]["state"] == "closed"
    assert hooks["contract enabled"]["phid"] == contract.enabled
    assert hooks["contract disabled"]["errors"] == [{"type": "hook", "code": "disabled", "count": 1}]
    workers = {worker["hostname"]: worker for worker in data["workers"]}
    assert workers["web1"]["alive"] is True and workers["web1"]["degraded"] == {"database": 4}
    assert workers["web1"]["in_flight"] == 2 and workers["web1"]["state"] == "ok"
    assert workers["web2"]["alive"] is False and workers["web2"]["state"] == "stale"
    assert data["php_worker"]["state"] == "unknown"
    text = response.content.decode()
    assert "127.0.0.1:9" not in text and "hmac" not in text.lower()


def test_metrics_are_computed_at_scrape_time(client: Any, phorge: Phorge) -> None:
    seed_contract(phorge)
    unsigned = phorge.hook("http://127.0.0.1:9/unsigned", name="unsigned", key="")
    phorge.request(unsigned, created=phorge.now() - 100)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    values = samples(text)
    assert values[("gorge_webhook_queue_up", ())] == 1
    assert values[("gorge_webhook_queue_requests", (("status", "queued"),))] == 4
    assert values[("gorge_webhook_queue_requests", (("status", "sent"),))] == 2
    assert values[("gorge_webhook_queue_requests", (("status", "failed"),))] == 1
    assert values[("gorge_webhook_queue_due_requests", ())] == 4
    assert values[("gorge_webhook_queue_held_requests", ())] == 1
    assert 0 <= values[("gorge_webhook_queue_oldest_due_age_seconds", ())] < 30
    assert values[("gorge_webhook_queue_hooks_misconfigured", ())] == 1
    assert values[("gorge_webhook_queue_hooks_in_backoff", ())] == 0
    assert values[("gorge_webhook_workers_alive", ())] == 0
    assert values[("gorge_webhook_php_delivery", (("state", "unknown"),))] == 1
    assert values[("gorge_webhook_build_info", (("version", VERSION),))] == 1
    assert "PHID-" not in text and "127.0.0.1" not in text
    assert "gorge_webhook_deliveries" not in text  # the worker's counters stay on its own endpoint

    phorge.request(unsigned)
    COLLECTOR.forget()  # the figures are read at most once per CACHE_SEC
    assert (
        samples(client.get("/metrics").content.decode())[("gorge_webhook_queue_requests", (("status", "queued"),))] == 5
    )


def test_metrics_say_down_instead_of_failing_the_scrape(client: Any, phorge: Phorge) -> None:
    with phorge_unreachable():
        response = client.get("/metrics")
    assert response.status_code == 200
    values = samples(response.content.decode())
    assert values[("gorge_webhook_queue_up", ())] == 0
    assert ("gorge_webhook_queue_due_requests", ()) not in values
    assert values[("gorge_webhook_build_info", (("version", VERSION),))] == 1
