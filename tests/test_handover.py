"""The handover guard seen where operators look: dashboard, /api/webhook/health, /readyz, metrics, log."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from tests.conftest import PHORGE_DB, Phorge
from tests.phorge_app_db import AppDatabases
from webhook_delivery import selectors
from webhook_delivery.worker import Worker

pytestmark = PHORGE_DB
TOKEN = "handover-t0ken"


@pytest.fixture
def worker_db(app_databases: AppDatabases) -> Iterator[AppDatabases]:
    yield app_databases
    selectors._php_guard.cache_clear()


def _seen(client: Any) -> dict[str, Any]:
    selectors._php_guard.cache_clear()  # a fresh guard: its 5 s cache would hide each step
    health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN=TOKEN).content)["data"]
    ready = client.get("/readyz")
    page = client.get("/").content.decode()
    metrics = client.get("/metrics").content.decode()
    return {"health": health["php_worker"]["state"], "ready": ready, "page": page, "metrics": metrics}


def test_guard_flips_with_php_tasks_and_reads_unknown_without_the_tables(
    client: Any, phorge: Phorge, worker_db: AppDatabases, django_user_model: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", dataclasses.replace(settings.GORGE_WEBHOOK, service_token=TOKEN))
    client.force_login(django_user_model.objects.create_user("ops", password="pw-ops-12345", is_staff=True))

    unknown = _seen(client)
    assert unknown["health"] == "unknown"
    assert unknown["ready"].status_code == 200
    assert 'data-state="unknown"' in unknown["page"]

    worker_db.create(["worker"])
    idle = _seen(client)
    assert idle["health"] == "idle" and 'data-state="idle"' in idle["page"]

    worker_db.worker_task()
    active = _seen(client)
    assert active["health"] == "active"
    assert 'data-state="active"' in active["page"]
    assert active["ready"].status_code == 200  # a warning, not a readiness failure
    assert "also delivering" in json.loads(active["ready"].content)["warning"]
    assert 'state="active"' in active["metrics"]

    worker_db.truncate("worker", "worker_activetask")
    assert _seen(client)["health"] == "idle"


def test_worker_logs_the_guard_once_per_change(
    phorge: Phorge, worker_db: AppDatabases, delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    worker_db.create(["worker"])
    worker_db.worker_task()
    caplog.set_level(logging.INFO)
    worker = Worker(delivery_config, once=True)
    worker.run()
    worker.run()
    warnings = [r for r in caplog.records if "PHP worker is also delivering" in r.getMessage()]
    assert len(warnings) == 1
    assert worker.snapshot()["php_worker"]["state"] == "active"
