"""PHP delivery delegated / not delegated / unknown where operators look (dashboard, /readyz, the health JSON,
manage.py check), read from Phorge's local file or its config table; and a request that still gets a PHP task
while Phorge's settings say delegated, said once with what to do.

The reading itself is in tests/unit/test_delegation.py."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils.html import escape

from tests.support.helpers import PHORGE_DB, Phorge, viewer, with_event, write_local
from tests.support.phorge_app_db import AppDatabases
from tests.support.receiver import Receiver
from webhook_delivery import checks
from webhook_delivery.reads import phorge_status
from webhook_delivery.worker import php_watch
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB
TOKEN = "delegation-t0ken"
URI = "http://gorge-webhook.internal:8160/"


def _configure(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> Any:
    config = dataclasses.replace(settings.GORGE_WEBHOOK, service_token=TOKEN, **changes)
    monkeypatch.setattr(settings, "GORGE_WEBHOOK", config)
    return config


def _fresh() -> None:
    """New readers for the pages: their few seconds of cache would hide each step."""
    phorge_status._php_guard.cache_clear()
    phorge_status._phorge_settings.cache_clear()
    phorge_status._masters.cache_clear()


def _seen(client: Any) -> dict[str, Any]:
    ready = client.get("/readyz")
    health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN=TOKEN).content)["data"]
    checked = [(m.id, m.msg) for m in checks.php_delivery() if m.id in ("gorge.I001", "gorge.W006")]
    return {
        "ready": json.loads(ready.content),
        "health": health["phorge_settings"]["php_delivery"],
        "page": client.get("/").content.decode(),
        "check": checked,
    }


def test_the_uri_in_the_local_file_is_shown_as_delegated_everywhere(
    client: Any, phorge: Phorge, worker_db: AppDatabases, django_user_model: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    client.force_login(viewer(django_user_model))
    path = tmp_path / "local.json"
    write_local(path, {"phabricator.silent": False})
    _configure(monkeypatch, silent=None, phorge_local_config=str(path))

    before = _seen(client)
    said = "gorge.webhook.uri is not set (Phorge's default)"
    assert before["ready"] == {"status": "ok", "php_delivery": "not delegated"}
    assert before["health"]["state"] == "not delegated" and before["health"]["why"].startswith(said)
    assert (
        'data-delegation="not delegated"' in before["page"]
        and f"PHP delivery: <strong>not delegated</strong> ({escape(said)}" in before["page"]
    )
    [(check_id, message)] = before["check"]
    assert check_id == "gorge.I001" and message.startswith(f"PHP delivery: not delegated ({said}")

    write_local(path, {"phabricator.silent": False, "gorge.webhook.uri": URI})  # bin/config set gorge.webhook.uri
    _fresh()
    after = _seen(client)
    said = f"gorge.webhook.uri is set (local file {path}) and phabricator.silent is off"
    assert after["ready"] == {"status": "ok", "php_delivery": "delegated"}
    assert after["health"]["state"] == "delegated" and after["health"]["why"].startswith(said)
    assert (
        'data-delegation="delegated"' in after["page"]
        and f"PHP delivery: <strong>delegated</strong> ({escape(said)}" in after["page"]
    )
    assert '<tr data-option="gorge.webhook.uri"><td><code>gorge.webhook.uri</code></td><td>set</td>' in after["page"]
    assert URI not in after["page"] and URI not in json.dumps(after["health"])
    assert after["check"] == [("gorge.I001", f"PHP delivery: delegated ({after['health']['why']})")]


def test_the_uri_in_the_config_table_is_read_and_tasks_left_while_delegated_are_a_warning(
    client: Any, phorge: Phorge, worker_db: AppDatabases, django_user_model: Any, monkeypatch: Any
) -> None:
    client.force_login(viewer(django_user_model))
    _configure(monkeypatch)  # GORGE_WEBHOOK_SILENT=false, no local file
    worker_db.create(["config", "worker"])
    assert _seen(client)["ready"]["php_delivery"] == "unknown"  # bin/config set would have written local.json

    worker_db.config("gorge.webhook.uri", json.dumps(URI))
    _fresh()
    seen = _seen(client)
    table = f"`{settings.GORGE_WEBHOOK.namespace}_config`.`config_entry`"
    assert seen["ready"] == {"status": "ok", "php_delivery": "delegated"}
    assert seen["health"]["why"].startswith(f"gorge.webhook.uri is set (database {table})")
    assert [check_id for check_id, _ in seen["check"]] == ["gorge.I001"]

    worker_db.worker_task()  # a task from before the handover, not cancelled
    _fresh()
    left = _seen(client)
    assert left["ready"]["warning"] == "Phorge still has PHP webhook tasks although delivery is delegated"
    assert "Phorge still has 1 HeraldWebhookWorker task although delivery is delegated" in left["page"]
    [warning] = [message for check_id, message in left["check"] if check_id == "gorge.W006"]
    assert warning.startswith(
        "1 HeraldWebhookWorker task(s) are still in Phorge's queue although delivery is delegated"
    )


def test_a_new_request_with_a_php_task_while_delegated_is_said_once_and_shown_with_what_to_do(
    client: Any,
    phorge: Phorge,
    worker_db: AppDatabases,
    delivery_config: Any,
    django_user_model: Any,
    monkeypatch: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    monkeypatch.setattr(php_watch, "DELEGATION_SETTLE_SEC", 0)  # no PHP request is in flight here
    worker_db.create(["worker"])
    path = tmp_path / "local.json"
    write_local(path, {"gorge.webhook.uri": URI})
    config = dataclasses.replace(delivery_config, phorge_local_config=str(path))
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/handover/ok"))
        old = phorge.request(hook, created=phorge.now() - 60)
        worker_db.worker_task(object_phid=old)  # scheduled before the handover: a leftover, not a missing patch
        worker = build_worker(config, once=True)
        worker.run()
        assert with_event(caplog.records, "php.task_while_delegated") == []
        time.sleep(1.1)  # the request below is created after delegation was first seen (database seconds)
        new = phorge.request(hook)
        worker_db.worker_task(object_phid=new)  # what an unpatched Phorge does with the option set
        worker.run()
        worker.run()
        assert receiver.requests == []  # both left to PHP: no request is sent twice
    [warning] = with_event(caplog.records, "php.task_while_delegated")
    assert warning.levelno == logging.WARNING and warning.request == new
    assert warning.getMessage().startswith(
        f"request {new} got a HeraldWebhookWorker task although Phorge's settings say webhook delivery is "
        "delegated to this service: Phorge's side of the handover is missing or not in force"
    )
    assert "Apply contrib/phorge/gorge-webhook.patch to Phorge, then restart PHP and phd" in warning.getMessage()
    seen = worker.snapshot().php_task_while_delegated
    assert seen is not None and (seen.request, seen.created) == (new, phorge.row(new)["dateCreated"])
    assert phorge.row(new)["status"] == "queued"

    _configure(monkeypatch, phorge_local_config=str(path))
    _fresh()
    client.force_login(viewer(django_user_model))
    page = client.get("/").content.decode()
    assert f'id="php-patch-missing" data-request="{new}"' in page
    assert "Phorge's side of the handover is missing or not in force." in page
    assert "Apply <code>contrib/phorge/gorge-webhook.patch</code> to Phorge, then restart PHP and phd" in page
    health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN=TOKEN).content)["data"]
    assert [w["php_task_while_delegated"]["request"] for w in health["workers"]] == [new]

    write_local(path, {})  # handed back to PHP: the warning no longer applies
    _fresh()
    assert 'id="php-patch-missing"' not in client.get("/").content.decode()


def test_a_task_phd_ran_while_delivery_is_delegated_is_no_php_delivery(
    client: Any, phorge: Phorge, worker_db: AppDatabases, django_user_model: Any, monkeypatch: Any
) -> None:
    """With Phorge's side of the handover in force, a HeraldWebhookWorker task that runs only leaves its
    request queued for this service: the pages, the metric and the alert count it as no PHP delivery."""
    client.force_login(viewer(django_user_model))
    _configure(monkeypatch)
    worker_db.create(["config", "worker"])
    worker_db.worker_task(archived=True, age=30)  # phd ran a task half a minute ago
    _fresh()
    assert phorge_status.php_delivery_state().state == "active", "not delegated: PHP delivered it"
    page = client.get("/").content.decode()
    assert "<strong>Phorge's PHP worker is also delivering webhooks</strong>" in page

    worker_db.config("gorge.webhook.uri", json.dumps(URI))
    _fresh()
    handed = phorge_status.php_delivery_state()
    assert (handed.state, handed.recently_archived, handed.last_delivery) == ("idle", 1, None)
    assert handed.detail.endswith("1 run by phd lately only left their requests to this service (delegated)")
    page = client.get("/").content.decode()
    assert "also delivering webhooks" not in page and "delivered a webhook" not in page
    assert 'gorge_webhook_php_delivery{state="idle"} 1.0' in client.get("/metrics").content.decode()

    worker_db.worker_task()  # one still queued: its request is left to PHP until it runs
    _fresh()
    assert phorge_status.php_delivery_state().state == "active"
