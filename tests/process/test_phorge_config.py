"""Phorge's own switches read where Phorge keeps them (conf/local/local.json, then its config database, then
its defaults; the service's variables win), silent mode never guessed, and PHP never kept waiting for a
hook lock that only defers its rows.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/db/test_phorge_config.py."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.support.helpers import PHORGE_DB, Phorge, with_event, worker_env, write_local
from tests.support.phorge_app_db import AppDatabases
from tests.support.processes import ROOT, manage
from tests.support.receiver import Receiver
from tests.support.urlwalk import DEEP, assert_every_page_stands
from tests.support.waiting import wait_for
from webhook_delivery.phorge.locks import webhook_lock_name
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB


def _check(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GORGE_WEBHOOK_") and k != "DJANGO_SETTINGS_MODULE"}
    base.update(DJANGO_SETTINGS_MODULE="gorge_site.settings", GORGE_WEBHOOK_OUTBOUND_BLACKLIST="", **env)
    return manage("check", env=base, ok=False)


@pytest.mark.slow
def test_check_warns_when_silent_mode_can_only_come_from_the_database_and_refuses_a_missing_file(
    tmp_path: Path,
) -> None:
    undeclared = _check()
    assert undeclared.returncode == 0, undeclared.stderr
    assert "gorge.W003" in undeclared.stderr + undeclared.stdout
    declared = _check(GORGE_WEBHOOK_SILENT="false")
    assert "gorge.W003" not in declared.stderr + declared.stdout
    missing = _check(GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(tmp_path / "nowhere.json"))
    assert missing.returncode != 0
    assert "gorge.E002" in missing.stderr and "No such file or directory" in missing.stderr
    assert "Traceback" not in missing.stderr
    path = tmp_path / "local.json"
    write_local(path, {"phabricator.silent": False})
    given = _check(GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(path))
    assert given.returncode == 0 and "gorge.W003" not in given.stderr + given.stdout


@pytest.mark.slow
def test_a_running_worker_follows_local_json_within_seconds_and_the_variable_still_wins(
    phorge: Phorge, workers: Any, tmp_path: Path
) -> None:
    path = tmp_path / "local.json"
    write_local(path, {"phabricator.silent": False})
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/maintenance/ok"))
        worker = workers("w1", GORGE_WEBHOOK_SILENT="", GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(path)).start()
        first = phorge.request(hook, retry="forever")
        wait_for(lambda: phorge.row(first)["status"] == "sent", 30, "the first request")

        write_local(path, {"phabricator.silent": True})  # maintenance window: bin/config set phabricator.silent true
        switched = time.monotonic()
        wait_for(
            lambda: any(
                "phabricator.silent = on" in line["message"]
                for line in with_event(worker.lines(), "settings.in_force")
                if line.get("option") == "phabricator.silent"
            ),
            10,
            "the worker to see the change",
        )
        assert time.monotonic() - switched < 5
        second = phorge.request(hook, retry="forever")
        wait_for(lambda: phorge.row(second)["status"] != "queued", 30, "the second request")
        assert phorge.row(second)["properties"].endswith(',"errorType":"hook","errorCode":"silent"}')
        assert len(receiver.requests) == 1
        worker.stop()

        overriding = workers("w2", GORGE_WEBHOOK_SILENT="false", GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(path)).start()
        third = phorge.request(hook, retry="forever")
        wait_for(lambda: phorge.row(third)["status"] == "sent", 30, "the third request")
        overriding.stop()
        assert [r.object_phid for r in receiver.requests] == [phorge.row(p)["objectPHID"] for p in (first, third)]


LOCKER = textwrap.dedent(
    """
    import json, sys, time
    import MySQLdb
    host, port, user, password, names, seconds = json.loads(sys.argv[1])
    connection = MySQLdb.connect(host=host, port=port, user=user, password=password)
    cursor = connection.cursor()
    print("ready", flush=True)
    tries = busy = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name in names:
            # PhabricatorGlobalLock: GET_LOCK with no wait; busy makes PHP's task yield for 15 s.
            cursor.execute("SELECT GET_LOCK(%s, 0.000000)", (name,))
            tries += 1
            if cursor.fetchone()[0] == 1:
                cursor.execute("SELECT RELEASE_LOCK(%s)", (name,))
            else:
                busy += 1
    print(json.dumps({"tries": tries, "busy": busy}), flush=True)
    """
)


@pytest.mark.slow
def test_a_php_style_lock_taker_never_finds_a_hook_busy_while_its_rows_are_only_deferred(
    phorge: Phorge, app_databases: AppDatabases, delivery_config: Any
) -> None:
    app_databases.create(["worker"])
    hooks = [phorge.hook("http://127.0.0.1:9/php-owned", name=f"php {i}") for i in range(40)]
    old = phorge.now() - 60
    for hook in hooks:
        for _ in range(2):
            request = phorge.request(hook, created=old)
            app_databases.worker_task(object_phid=request, lease_owner="4242:1:host:1", lease_expires=old + 7200)
    db = settings.DATABASES["phorge"]
    names = [webhook_lock_name(settings.GORGE_WEBHOOK.namespace, hook) for hook in hooks]
    args = [db["HOST"] or "127.0.0.1", int(db["PORT"] or 3306), db["USER"], db["PASSWORD"] or "", names, 6.0]
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, json.dumps(args)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert locker.stdout is not None and locker.stdout.readline().strip() == "ready"
    before = {row["phid"]: row for row in phorge.rows()}
    runs = 0
    deadline = time.monotonic() + 5.0
    left = 0
    while time.monotonic() < deadline:
        worker = build_worker(delivery_config, once=True)
        worker.run()
        left += worker.counters.snapshot().get("left_to_php.task", 0)
        runs += 1
    out, _ = locker.communicate(timeout=30)
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["tries"] > 1000
    assert seen["busy"] == 0, f"a PHP task would have yielded 15 s {seen['busy']} times"
    assert runs >= 3 and left == runs * 80  # every run deferred every row to PHP
    assert {row["phid"]: row for row in phorge.rows()} == before  # nothing claimed


def test_once_prints_what_it_left_and_why(phorge: Phorge, app_databases: AppDatabases) -> None:
    app_databases.create(["worker"])
    hook = phorge.hook("http://127.0.0.1:9/left")
    old = phorge.now() - 60
    for _ in range(2):
        app_databases.worker_task(object_phid=phorge.request(hook, created=old))
    # PHP is active and this one is too young to tell (a few seconds ahead: the command takes a moment to start)
    phorge.request(phorge.hook("http://127.0.0.1:9/young"), created=phorge.now() + 5)
    done = _once()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "left 2 request(s) to Phorge's PHP worker: each has a HeraldWebhookWorker task queued" in done.stdout
    assert "left 1 request(s) too young to tell whether Phorge's PHP worker takes them" in done.stdout


def test_once_that_can_deliver_nothing_exits_3_and_says_why_in_one_line(phorge: Phorge) -> None:
    phorge.request(phorge.hook("http://127.0.0.1:9/paused"))
    done = _once(GORGE_WEBHOOK_SILENT="")
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    [line] = [line for line in done.stderr.splitlines() if "nothing delivered" in line]
    assert "phabricator.silent is unknown" in line and "1 queued request(s) left as they are" in line
    assert "Traceback" not in done.stderr


def _once(**env: str) -> subprocess.CompletedProcess[str]:
    from tests.support.helpers import worker_env
    from tests.support.processes import manage

    return manage("deliver_webhooks", "--once", env=worker_env(**env), ok=False)


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
