"""JSON nobody expected, and a local file that stops being one (the second security review, items 1 and 11):
one config_entry row, the hoststate map, local.json or a variable nested deeper than any decoder's stack
count as null, as PHP's json_decode gives, and never crash a worker, `check` or a page; a local.json swapped
for a FIFO or made unreadable under a running worker pauses delivery, says so, and never hangs it.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_json_hardening.py."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import PHORGE_DB, Phorge, worker_env
from tests.support.phorge_app_db import AppDatabases
from tests.support.processes import SiteDatabase, manage
from tests.support.receiver import Receiver
from tests.support.urlwalk import every_page
from tests.support.waiting import wait_for

DEEP = "[" * 100_000 + "]" * 100_000


DEEP_ENV = "[" * 20_000 + "]" * 20_000  # an environment value has at most 128 KiB


@PHORGE_DB
def test_a_deep_config_entry_row_crashes_neither_the_worker_nor_check_nor_a_page(
    phorge: Phorge, worker_db: AppDatabases, admin_client: Any, settings: Any
) -> None:
    worker_db.create(["config"])
    for key in ("phabricator.silent", "security.outbound-blacklist", "phabricator.base-uri", "phd.garbage-collection"):
        worker_db.config(key, DEEP)
    with Receiver() as receiver:
        phorge.request(phorge.hook(receiver.url("/deep/ok")))
        done = manage("deliver_webhooks", "--once", env=worker_env(GORGE_WEBHOOK_SILENT=""), ok=False)
        assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-2000:]
        assert len(receiver.requests) == 1, "null is not silent, as in PHP: delivered"
    checked = manage("check", env=worker_env(GORGE_WEBHOOK_SILENT=""), ok=False)
    assert checked.returncode == 0 and "Traceback" not in checked.stderr
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, silent=None, service_token="t0ken")
    assert_every_page_stands(admin_client)


@PHORGE_DB
def test_a_deep_partition_map_in_hoststate_is_a_problem_said_not_a_crash(
    phorge: Phorge, worker_db: AppDatabases, admin_client: Any, settings: Any
) -> None:
    worker_db.create(["meta_data"])
    worker_db.execute(
        f"INSERT INTO {worker_db.table('meta_data', 'hoststate')} (stateKey, stateValue) VALUES (%s, %s)",
        ("cluster.databases", DEEP),
    )
    with Receiver() as receiver:
        phorge.request(phorge.hook(receiver.url("/deep/ok")))
        done = manage("deliver_webhooks", "--once", env=worker_env(), ok=False)
        assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-2000:]
        assert "cannot parse Phorge's partition map" in done.stderr
        assert len(receiver.requests) == 1
    settings.GORGE_WEBHOOK = dataclasses.replace(settings.GORGE_WEBHOOK, service_token="t0ken")
    assert_every_page_stands(admin_client)


def assert_every_page_stands(client: Any) -> None:
    broken = []
    for path in every_page():
        response = client.get(path, headers={"X-Service-Token": "t0ken"})
        if response.status_code >= 500 and not (path == "/readyz" and response.status_code == 503):
            broken.append((path, response.status_code))
    assert broken == []
    ready = client.get("/readyz")
    assert ready.status_code in (200, 503) and json.loads(ready.content)["status"] in ("ok", "unavailable")


@pytest.mark.parametrize(
    ("variable", "says"),
    [("GORGE_WEBHOOK_CLUSTER_DATABASES", "not valid JSON"), ("GORGE_WEBHOOK_OUTBOUND_BLACKLIST", "JSON list")],
)
def test_a_deep_variable_is_one_clear_error_at_start(variable: str, says: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GORGE_WEBHOOK_")}
    env.update(DJANGO_SETTINGS_MODULE="gorge_site.settings", GORGE_WEBHOOK_SILENT="false", **{variable: DEEP_ENV})
    done = manage("check", env=env, ok=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert variable in done.stderr and says in done.stderr


def test_check_refuses_a_fifo_at_start_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "local.json"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GORGE_WEBHOOK_")}
    env.update(DJANGO_SETTINGS_MODULE="gorge_site.settings", GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(fifo))
    done = manage("check", env=env, ok=False, timeout=60)
    assert done.returncode != 0 and "gorge.E002" in done.stderr and "not a regular file" in done.stderr


@pytest.mark.slow
@PHORGE_DB
@pytest.mark.parametrize("swap", ["deep", "fifo", "directory"])
def test_a_local_file_that_breaks_under_a_running_worker_pauses_it_and_it_comes_back(
    phorge: Phorge, workers: Any, tmp_path: Path, swap: str
) -> None:
    path = tmp_path / "local.json"
    path.write_text(json.dumps({"phabricator.silent": False}))
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/local/ok"))
        worker = workers("w", GORGE_WEBHOOK_SILENT="", GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(path)).start()
        first = phorge.request(hook)
        wait_for(lambda: phorge.row(first)["status"] == "sent", 30, "a delivery before")
        path.unlink()
        if swap == "deep":
            path.write_text(DEEP)
        elif swap == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
        wait_for(
            lambda: any(line.get("event") == "worker.paused" for line in worker.lines()), 15, "the worker to pause"
        )
        second = phorge.request(hook)
        time.sleep(2)
        assert worker.proc is not None and worker.proc.poll() is None, "still running"
        assert phorge.row(second)["status"] == "queued" and len(receiver.requests) == 1, "nothing delivered meanwhile"
        (path.rmdir if swap == "directory" else path.unlink)()
        path.write_text(json.dumps({"phabricator.silent": False}))
        wait_for(lambda: phorge.row(second)["status"] == "sent", 30, "delivered again once it reads")
    assert "Traceback" not in worker.log.read_text()


CRAWL = """
import json, time
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
user = get_user_model().objects.create_superuser("crawler", password="x")
client = Client()
client.force_login(user)
plain = {**settings.STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
times = []
with override_settings(STORAGES=plain):
    for _ in range(40):
        started = time.monotonic()
        status = client.get("/", HTTP_HOST="localhost").status_code
        times.append((status, time.monotonic() - started))
print(json.dumps(times))
"""


def accept_and_hang(sock: Any) -> None:
    time.sleep(60)  # a replica that takes the connection and never says a word


@pytest.mark.slow
@PHORGE_DB
def test_a_replica_that_accepts_and_never_answers_costs_the_pages_little(phorge: Phorge, site: SiteDatabase) -> None:
    """Item 12 of the second security review: a hung replica made one page in every 5 s wait 5 s."""
    from tests.support.rawserver import RawServer

    phorge.request(phorge.hook("http://127.0.0.1:9/x"))
    with RawServer(accept_and_hang) as replica:
        env = worker_env(
            GORGE_WEBHOOK_REPLICA_DATABASE_URL=f"mysql://root@127.0.0.1:{replica.port}/{phorge_database()}",
            DATABASE_URL=site.url,
            ALLOWED_HOSTS="localhost",
        )
        started = time.monotonic()
        times = json.loads(manage("shell", "-c", CRAWL, env=env).stdout.strip().splitlines()[-1])
    assert all(status == 200 for status, _took in times), "every page read the master instead"
    slow = [took for _status, took in times if took > 1]
    assert len(slow) <= 1, f"only the first page waits for the replica: {slow}"
    assert max(took for _status, took in times) < 4
    assert time.monotonic() - started < 60


def phorge_database() -> str:
    from django.conf import settings

    return str(settings.DATABASES["phorge"]["NAME"])
