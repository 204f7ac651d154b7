"""The heartbeat's version (records/heartbeat.py): written by each worker, shown beside it on the dashboard and
in the health JSON, workers of two versions said as such; a row of a release that did not write it reads as
unknown. The same with real processes of two releases: tests/process/test_upgrade.py."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections

from tests.support.helpers import PHORGE_DB, Phorge
from webhook_delivery.records import heartbeat
from webhook_delivery.records.heartbeat import Heartbeat, versions_running, workers
from webhook_delivery.records.models import WorkerHeartbeat
from webhook_delivery.state import WorkerState
from webhook_delivery.version import VERSION

pytestmark = PHORGE_DB
TOKEN = "heartbeat-t0ken"


def beat(worker_id: str, version: str | None, *, ago: int = 0) -> None:
    """A heartbeat row; `version` None: inserted as a worker of a release without the column inserts it."""
    seen = datetime.now(UTC) - timedelta(seconds=ago)
    if version is not None:
        WorkerHeartbeat.objects.create(
            worker_id=worker_id, hostname=worker_id, pid=1, started_at=seen, last_seen=seen, version=version
        )
        return
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "INSERT INTO delivery_status_workerheartbeat (worker_id, hostname, pid, started_at, last_seen, state) "
            "VALUES (%s, %s, 1, %s, %s, '{}')",
            [worker_id, worker_id, seen, seen],
        )


def health(client: Any) -> dict[str, Any]:
    response = client.get("/api/webhook/health", headers={"X-Service-Token": TOKEN})
    assert response.status_code == 200
    return dict(json.loads(response.content)["data"])


@pytest.fixture
def token(settings: Any) -> None:
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token=TOKEN)


def test_a_worker_publishes_its_version(phorge: Phorge) -> None:
    Heartbeat().publish(WorkerState(max_concurrent=4))
    assert WorkerHeartbeat.objects.get().version == VERSION
    (status,) = workers()
    assert status.version == VERSION and versions_running([status]) == {VERSION: 1}


def test_a_row_without_the_version_reads_as_unknown(phorge: Phorge) -> None:
    beat("old:1:a", None)
    assert WorkerHeartbeat.objects.get().version == ""  # the database's default, not Django's
    (status,) = workers()
    assert status.version is None and versions_running([status]) == {"unknown": 1}


def test_only_alive_workers_count_and_the_most_common_version_comes_first(phorge: Phorge) -> None:
    beat("a:1:a", "0.3.0")
    beat("b:1:a", "0.3.0")
    beat("c:1:a", "0.2.0")
    beat("d:1:a", "0.1.0", ago=heartbeat.WORKER_ALIVE_SEC + 5)
    assert list(versions_running(workers()).items()) == [("0.3.0", 2), ("0.2.0", 1)]


def test_one_version_running_is_said_as_such(staff: Any, phorge: Phorge, token: None) -> None:
    beat("a:1:a", "0.3.0")
    beat("b:1:a", "0.3.0")
    beat("old:1:a", "0.2.0", ago=heartbeat.WORKER_ALIVE_SEC + 5)  # stopped long ago: not running
    data = health(staff)
    assert data["versions"] == {"web": VERSION, "workers_alive": {"0.3.0": 2}, "mixed": False}
    assert {worker["worker_id"]: worker["version"] for worker in data["workers"]} == {
        "a:1:a": "0.3.0",
        "b:1:a": "0.3.0",
        "old:1:a": "0.2.0",
    }
    page = staff.get("/").content.decode()
    assert 'id="mixed-versions"' not in page
    assert page.count('<td class="gw-version">0.3.0</td>') == 2
    assert f'<span id="web-version">this page served by version {VERSION}</span>' in page


def test_workers_of_two_versions_are_shown_and_said(staff: Any, phorge: Phorge, token: None) -> None:
    beat("new:1:a", "0.3.0")
    beat("old:1:a", "0.2.0")
    beat("older:1:a", None)
    data = health(staff)
    assert data["versions"] == {
        "web": VERSION,
        "workers_alive": {"0.2.0": 1, "0.3.0": 1, "unknown": 1},
        "mixed": True,
    }
    assert {worker["worker_id"]: worker["version"] for worker in data["workers"]} == {
        "new:1:a": "0.3.0",
        "old:1:a": "0.2.0",
        "older:1:a": None,
    }
    page = staff.get("/").content.decode()
    assert 'id="mixed-versions" data-versions="3"' in page
    assert "Workers of 3 versions are running:</strong> 0.2.0 (1), 0.3.0 (1), unknown (1)." in page
    assert '<td class="gw-version">0.2.0</td>' in page and '<td class="gw-version">0.3.0</td>' in page
    assert '<td class="gw-version"><span class="gw-muted">unknown</span></td>' in page
