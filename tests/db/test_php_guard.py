"""phorge/php_guard.py: Phorge's PHP worker seen delivering, where operators look (dashboard, /api/webhook/health,
/readyz, metrics, the log), and its requests left to it until its task is gone."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

import pytest
from django.conf import settings

from tests.support.helpers import PHORGE_DB, Phorge, random_phid, viewer, with_event
from tests.support.phorge_app_db import AppDatabases
from tests.support.receiver import Receiver
from webhook_delivery.reads import phorge_status, queue
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB


TOKEN = "handover-t0ken"


def _seen(client: Any) -> dict[str, Any]:
    phorge_status._php_guard.cache_clear()  # a fresh guard: its 5 s cache would hide each step
    health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN=TOKEN).content)["data"]
    ready = client.get("/readyz")
    page = client.get("/").content.decode()
    metrics = client.get("/metrics").content.decode()
    return {"health": health["php_worker"]["state"], "ready": ready, "page": page, "metrics": metrics}


def test_guard_flips_with_php_tasks_and_reads_unknown_without_the_tables(
    client: Any, phorge: Phorge, worker_db: AppDatabases, django_user_model: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", dataclasses.replace(settings.GORGE_WEBHOOK, service_token=TOKEN))
    client.force_login(viewer(django_user_model, "ops", "pw-ops-12345"))

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
    worker = build_worker(delivery_config, once=True)
    worker.run()
    worker.run()
    warnings = with_event(caplog.records, "php.seen_delivering")
    assert len(warnings) == 1
    assert worker.snapshot().php_worker.state == "active"


def test_a_request_with_a_live_php_task_is_left_to_php_until_the_task_is_gone(
    phorge: Phorge, worker_db: AppDatabases, delivery_config: Any
) -> None:
    worker_db.create(["worker"])
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/php/ok"))
        old = phorge.now() - 60
        php_owned = phorge.request(hook, created=old)
        ours = phorge.request(hook, created=old)
        now = phorge.now()
        task = worker_db.worker_task(object_phid=php_owned, lease_owner="4242:1:host:1", lease_expires=now + 7200)
        before = phorge.row(php_owned)
        build_worker(delivery_config, once=True).run()
        assert [r.object_phid for r in receiver.requests] == [phorge.row(ours)["objectPHID"]]
        assert phorge.row(php_owned) == before  # not even claimed

        worker_db.execute(f"DELETE FROM {worker_db.table('worker', 'worker_activetask')} WHERE id = %s", (task,))
        worker_db.worker_task(archived=True, result=2, object_phid=php_owned)  # cancelled: now it is ours
        build_worker(delivery_config, once=True).run()
        build_worker(delivery_config, once=True).run()
        assert len(receiver.requests) == 2
    assert phorge.row(php_owned)["status"] == "sent"


@pytest.mark.slow
def test_while_php_delivers_a_brand_new_request_waits_until_its_task_would_show(
    phorge: Phorge, worker_db: AppDatabases, delivery_config: Any
) -> None:
    worker_db.create(["worker"])
    worker_db.worker_task()  # phd is at work on another request
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/young/ok")))
        build_worker(delivery_config, once=True).run()
        assert receiver.requests == []
        time.sleep(3.5)
        build_worker(delivery_config, once=True).run()
        assert len(receiver.requests) == 1
    assert phorge.row(phid)["status"] == "sent"


def test_a_deleted_object_leaves_its_hook_ok(phorge: Phorge, worker_db: AppDatabases, delivery_config: Any) -> None:
    worker_db.create(["maniphest"])
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/objects/ok"), name="objects")
        phorge.request(hook, object_phid=worker_db.task(), created=phorge.now() - 5)
        gone = phorge.request(hook, object_phid=random_phid("TASK"))  # its task was deleted meanwhile
        build_worker(delivery_config, once=True).run()
        assert len(receiver.requests) == 1
    assert phorge.row(gone)["properties"].endswith(',"errorType":"hook","errorCode":"object"}')
    health = {h.phid: h for h in queue.queue_health(settings.GORGE_WEBHOOK).hooks}[hook]
    assert health.state == "ok" and health.last_configuration_failure is not None
