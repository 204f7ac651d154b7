"""Phorge's own switches read where Phorge keeps them (conf/local/local.json, then its config database, then
its defaults; the service's variables win), silent mode never guessed, and PHP never kept waiting for a
hook lock that only defers its rows."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.helpers import PHORGE_DB, Phorge, viewer
from tests.phorge_app_db import AppDatabases
from tests.processes import ROOT, wait_for
from tests.receiver import Receiver
from webhook_delivery.config import default_blacklist
from webhook_delivery.phorge.config import REQUEST_RETENTION_SEC, LocalConfigFile, LocalRead, resolve
from webhook_delivery.phorge.locks import webhook_lock_name
from webhook_delivery.reads import phorge_status
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB
TABLE = "`ns_config`.`config_entry`"


def write_local(path: Path, values: dict[str, Any]) -> None:
    """As `bin/config set` leaves conf/local/local.json: PhutilJSON's formatted object (4-space indent)."""
    path.write_text(json.dumps(values, indent=4) + "\n" if values else "[]\n")


@pytest.fixture
def settings_cache() -> Iterator[None]:
    phorge_status._phorge_settings.cache_clear()
    yield
    phorge_status._phorge_settings.cache_clear()


@pytest.fixture
def unset(delivery_config: Any) -> Any:
    """Nothing declared: no GORGE_WEBHOOK_SILENT, no blacklist variable, no local file."""
    return dataclasses.replace(
        delivery_config, silent=None, outbound_blacklist=default_blacklist(), outbound_blacklist_from_env=False
    )


# -- precedence, as a pure rule ----------------------------------------------------------------------


def test_each_setting_comes_from_the_variable_then_the_file_then_the_database_then_phorges_default(
    unset: Any,
) -> None:
    local = LocalRead(
        "/srv/phorge/conf/local/local.json",
        {"phabricator.silent": True, "security.outbound-blacklist": ["10.0.0.0/8"]},
    )
    database = {
        "phabricator.silent": False,
        "security.outbound-blacklist": [],
        "phabricator.base-uri": "https://phorge.example.com/",
    }
    resolved = resolve(unset, local, database, TABLE)
    assert (resolved.silent.value, resolved.silent.source) == (True, "local file")
    assert resolved.blacklist.source == "local file" and [str(n) for n in resolved.blacklist.value] == ["10.0.0.0/8"]
    assert (resolved.base_uri.value, resolved.base_uri.source) == ("https://phorge.example.com", "database")
    assert (resolved.retention.value, resolved.retention.source) == (REQUEST_RETENTION_SEC, "Phorge's default")

    declared = dataclasses.replace(
        unset, silent=False, outbound_blacklist=(), outbound_blacklist_from_env=True, phorge_base_uri="https://p.x"
    )
    won = resolve(declared, local, database, TABLE)
    assert [won.silent.source, won.blacklist.source, won.base_uri.source] == ["variable"] * 3
    assert (won.silent.value, won.blacklist.value, won.base_uri.value) == (False, (), "https://p.x")

    collected = resolve(unset, LocalRead("l.json", {"phd.garbage-collection": {"herald.webhooks": 86400}}), None, TABLE)
    assert (collected.retention.value, collected.retention.source) == (86400, "local file")
    forever = resolve(unset, None, {"phd.garbage-collection": {"herald.webhooks": None}}, TABLE)
    assert (forever.retention.value, forever.retention.source) == (None, "database")


def test_silent_mode_is_unknown_unless_something_declares_it(unset: Any) -> None:
    # No file, database unreadable: unknown.
    nothing = resolve(unset, None, None, TABLE)
    assert nothing.silent.value is None and nothing.paused_reason() is not None
    assert "GORGE_WEBHOOK_SILENT" in (nothing.paused_reason() or "")
    assert "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG" in (nothing.paused_reason() or "")
    # No file, database readable but without a value: bin/config set would have written local.json: unknown.
    assert resolve(unset, None, {}, TABLE).silent.value is None
    # A value in the database decides.
    assert resolve(unset, None, {"phabricator.silent": True}, TABLE).silent.value is True
    # The file read and silent not in it: Phorge's default, off, even with the database unreadable.
    read = resolve(unset, LocalRead("l.json", {}), None, TABLE)
    assert (read.silent.value, read.silent.source) == (False, "Phorge's default") and read.paused_reason() is None
    # The file configured but unreadable: whatever the database says, unknown.
    broken = resolve(unset, LocalRead("l.json", None, "not valid JSON"), {"phabricator.silent": False}, TABLE)
    assert broken.silent.value is None and "cannot read l.json: not valid JSON" in broken.silent.where
    # An invalid stored blacklist keeps Phorge's default list and says where it was.
    bad = resolve(unset, LocalRead("l.json", {"security.outbound-blacklist": "nope"}), None, TABLE)
    assert bad.blacklist.value == default_blacklist() and "l.json is not a list of CIDR blocks" in bad.blacklist.where


def test_the_local_file_is_reread_when_it_changes_and_problems_are_named(tmp_path: Path) -> None:
    path = tmp_path / "local.json"
    now = [100.0]
    local = LocalConfigFile(str(path), clock=lambda: now[0])
    assert local.read().values is None and local.read().problem == "No such file or directory"
    write_local(path, {"phabricator.silent": False})
    now[0] += 1.1
    assert local.read().values == {"phabricator.silent": False}
    write_local(path, {"phabricator.silent": True, "phabricator.base-uri": "https://phorge.example.com/"})
    assert local.read().values == {"phabricator.silent": False}  # checked at most once a second
    now[0] += 1.1
    assert local.read().values == {"phabricator.silent": True, "phabricator.base-uri": "https://phorge.example.com/"}
    write_local(path, {})  # bin/config delete of the last key leaves "[]"
    now[0] += 1.1
    assert local.read().values == {}
    path.write_text('{"phabricator.silent": tru')
    now[0] += 1.1
    assert local.read().problem == "not valid JSON (or nested deeper than PHP reads)"
    path.write_text('["phabricator.silent"]')
    now[0] += 1.1
    assert local.read().problem == "not a JSON object of option to value"


# -- the worker, with the file as bin/config set writes it ----------------------------------------------


def test_silent_in_local_json_fails_requests_as_phorge_does_without_a_call(
    phorge: Phorge, unset: Any, tmp_path: Path
) -> None:
    path = tmp_path / "local.json"
    write_local(path, {"mysql.host": "db", "phabricator.silent": True})
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/silent/ok")), retry="forever")
        build_worker(dataclasses.replace(unset, phorge_local_config=str(path)), once=True).run()
        assert receiver.requests == []
    row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
    assert row["properties"].endswith(',"errorType":"hook","errorCode":"silent"}')


def test_an_empty_blacklist_in_local_json_lets_a_receiver_on_loopback_be_called(
    phorge: Phorge, unset: Any, tmp_path: Path
) -> None:
    path = tmp_path / "local.json"
    write_local(path, {"phabricator.silent": False, "security.outbound-blacklist": []})
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/internal/ok")), retry="forever")
        build_worker(dataclasses.replace(unset, phorge_local_config=str(path)), once=True).run()
        assert len(receiver.requests) == 1
    assert phorge.row(phid)["status"] == "sent"


def test_start_up_lines_name_each_settings_value_and_source(
    phorge: Phorge, app_databases: AppDatabases, unset: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app_databases.create(["config"])
    app_databases.config("phabricator.base-uri", json.dumps("https://phorge.example.com/"))
    path = tmp_path / "local.json"
    write_local(path, {"security.outbound-blacklist": []})
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    build_worker(dataclasses.replace(unset, silent=False, phorge_local_config=str(path)), once=True).run()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Phorge setting in force")]
    table = f"`{settings.GORGE_WEBHOOK.namespace}_config`.`config_entry`"
    assert said[0] == "Phorge setting in force: phabricator.silent = off, from variable (GORGE_WEBHOOK_SILENT)"
    assert said[1] == (
        "Phorge setting in force: security.outbound-blacklist = empty (every address allowed), "
        f"from local file ({path})"
    )
    assert (
        said[2]
        == f"Phorge setting in force: phabricator.base-uri = https://phorge.example.com, from database ({table})"
    )
    assert said[3] == "Phorge setting in force: phd.garbage-collection herald.webhooks = 7 days, from Phorge's default"
    assert len(said) == 4
    looked = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "settings.looked"]
    assert looked == [f"Phorge settings at Phorge's default: not set in {path}; not set in {table}"], "said once"


def test_no_file_no_grant_no_variable_delivers_nothing_and_says_so_everywhere(
    phorge: Phorge,
    unset: Any,
    client: Any,
    django_user_model: Any,
    settings_cache: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    unset = dataclasses.replace(unset, outbound_blacklist=(), outbound_blacklist_from_env=True)
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/unknown/ok")), retry="forever")
        before = phorge.row(phid)
        worker = build_worker(unset, once=True)
        worker.run()
        assert receiver.requests == []
        assert phorge.row(phid) == before  # not even claimed
        warnings = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and "phabricator.silent is unknown" in r.getMessage()
        ]
        assert len(warnings) == 1
        assert "GORGE_WEBHOOK_SILENT" in warnings[0].getMessage()
        assert (worker.blocked() or "").startswith("nothing delivered: phabricator.silent is unknown")
        assert worker.snapshot()["delivery_paused"] is not None

        monkeypatch.setattr(settings, "GORGE_WEBHOOK", dataclasses.replace(unset, service_token="t0ken"))
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert "phabricator.silent is unknown" in json.loads(ready.content)["reason"]
        health = json.loads(client.get("/api/webhook/health", HTTP_X_SERVICE_TOKEN="t0ken").content)["data"]
        assert "phabricator.silent is unknown" in health["phorge_settings"]["delivery_paused"]
        silent_line = next(s for s in health["phorge_settings"]["settings"] if s["option"] == "phabricator.silent")
        assert (silent_line["value"], silent_line["source"]) == ("unknown", "unknown")
        client.force_login(viewer(django_user_model))
        page = client.get("/").content.decode()
        assert 'data-paused="yes"' in page and "Nothing is delivered:" in page

        build_worker(dataclasses.replace(unset, silent=False), once=True).run()  # declared: the same request goes out
        assert len(receiver.requests) == 1
    assert phorge.row(phid)["status"] == "sent"


def _check(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GORGE_WEBHOOK_") and k != "DJANGO_SETTINGS_MODULE"}
    base.update(DJANGO_SETTINGS_MODULE="gorge_site.settings", GORGE_WEBHOOK_OUTBOUND_BLACKLIST="", **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=base, capture_output=True, text=True, check=False
    )


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
            lambda: any("phabricator.silent = on" in line.get("message", "") for line in worker.lines()),
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


# -- PHP never waits for us ------------------------------------------------------------------------------

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


# -- what --once leaves, and what requeue offers --------------------------------------------------------


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
    from tests.helpers import worker_env
    from tests.processes import manage

    return manage("deliver_webhooks", "--once", env=worker_env(**env), ok=False)


def test_requeue_of_hook_errors_leaves_out_requests_whose_object_is_gone(
    phorge: Phorge, app_databases: AppDatabases, capsys: pytest.CaptureFixture[str]
) -> None:
    app_databases.create(["maniphest"])
    hook = phorge.hook("http://127.0.0.1:9/objects")
    now = phorge.now()
    failed = '{"retry":"never","transactionPHIDs":[],"triggerPHIDs":[],"errorType":"hook","errorCode":"object"}'
    columns = {"status": "failed", "properties": failed, "dateModified": now}
    alive = phorge.request(hook, object_phid=app_databases.task(), **columns)
    phorge.request(hook, **columns)  # its task was destroyed in Phorge
    call_command("requeue_webhooks", "--error", "hook", "--dry-run")
    out = capsys.readouterr().out
    assert alive in out and out.count("PHID-HWBR-") == 1
    assert "Left failed: 1 (object deleted in Phorge (it would fail again as hook/object))." in out
