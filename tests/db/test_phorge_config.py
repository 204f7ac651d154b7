"""Phorge's own switches read where Phorge keeps them (conf/local/local.json, then its config database, then
its defaults; the service's variables win), silent mode never guessed, and PHP never kept waiting for a
hook lock that only defers its rows.

Here: what runs on Django's test databases; the rest is in tests/process/test_phorge_config.py."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.support.clock import FixedClock
from tests.support.helpers import PHORGE_DB, Phorge, viewer, with_event, write_local
from tests.support.phorge_app_db import AppDatabases
from tests.support.receiver import Receiver
from webhook_delivery.config import default_blacklist
from webhook_delivery.phorge.config import REQUEST_RETENTION_SEC, resolve
from webhook_delivery.phorge.watched import LocalConfigFile, LocalRead
from webhook_delivery.reads import phorge_status
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB


TABLE = "`ns_config`.`config_entry`"


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
    clock = FixedClock(100.0)
    local = LocalConfigFile(str(path), clock=clock)
    assert local.read().values is None and local.read().problem == "No such file or directory"
    write_local(path, {"phabricator.silent": False})
    clock.advance(1.1)
    assert local.read().values == {"phabricator.silent": False}
    write_local(path, {"phabricator.silent": True, "phabricator.base-uri": "https://phorge.example.com/"})
    assert local.read().values == {"phabricator.silent": False}  # checked at most once a second
    clock.advance(1.1)
    assert local.read().values == {"phabricator.silent": True, "phabricator.base-uri": "https://phorge.example.com/"}
    write_local(path, {})  # bin/config delete of the last key leaves "[]"
    clock.advance(1.1)
    assert local.read().values == {}
    path.write_text('{"phabricator.silent": tru')
    clock.advance(1.1)
    assert local.read().problem == "not valid JSON (or nested deeper than PHP reads)"
    path.write_text('["phabricator.silent"]')
    clock.advance(1.1)
    assert local.read().problem == "not a JSON object of option to value"


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
    said = [r.getMessage() for r in with_event(caplog.records, "settings.in_force")]
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
    assert said[4] == (
        "Phorge setting in force: CA bundle = the system store, from unknown (arcanist not found "
        "(neither GORGE_WEBHOOK_ARCANIST_ROOT nor GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG is set), so neither its "
        "custom.pem nor its default.pem, which PHP uses; set GORGE_WEBHOOK_ARCANIST_ROOT or GORGE_WEBHOOK_CA_BUNDLE)"
    )
    assert said[5] == "Phorge setting in force: outbound proxy = none, from variable (GORGE_WEBHOOK_PROXY is not set)"
    assert said[6] == "Phorge setting in force: gorge.webhook.uri = not set, from Phorge's default"
    assert len(said) == 7
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
        warnings = [r for r in with_event(caplog.records, "worker.paused") if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "GORGE_WEBHOOK_SILENT" in warnings[0].getMessage()
        assert (worker.blocked() or "").startswith("nothing delivered: phabricator.silent is unknown")
        assert worker.snapshot().delivery_paused is not None

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


def test_phorges_own_blacklist_is_read_and_the_variable_wins_over_it(
    phorge: Phorge, worker_db: AppDatabases, delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    worker_db.create(["config"])
    # An installation with receivers on internal hosts lifts 127.0.0.0/8 from Phorge's default list.
    lifted = [str(n) for n in default_blacklist() if str(n) != "127.0.0.0/8"]
    worker_db.config("security.outbound-blacklist", json.dumps(lifted))
    unset = dataclasses.replace(
        delivery_config, outbound_blacklist=default_blacklist(), outbound_blacklist_from_env=False
    )
    with Receiver() as receiver:
        allowed = phorge.request(phorge.hook(receiver.url("/internal/ok")), retry="forever")
        build_worker(unset, once=True).run()
        assert phorge.row(allowed)["status"] == "sent"
        namespace = settings.GORGE_WEBHOOK.namespace
        in_force = (
            f"security.outbound-blacklist = {len(lifted)} ranges, leaving open loopback 127.0.0.0/8, "
            f"from database (`{namespace}_config`.`config_entry`)"
        )
        said = [r.getMessage() for r in with_event(caplog.records, "settings.in_force")]
        assert f"Phorge setting in force: {in_force}" in said

        refused = phorge.request(phorge.hook(receiver.url("/internal2/ok")), retry="forever")
        from_env = dataclasses.replace(unset, outbound_blacklist_from_env=True)  # the variable, set to the default
        build_worker(from_env, once=True).run()
        assert [r.path for r in receiver.requests] == ["/internal/ok"]
    assert phorge.row(refused)["properties"].endswith(',"errorType":"hook","errorCode":"uri"}')


def test_without_phorges_config_the_default_list_is_in_force_and_the_log_says_why(
    phorge: Phorge, delivery_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery")
    unset = dataclasses.replace(
        delivery_config, outbound_blacklist=default_blacklist(), outbound_blacklist_from_env=False
    )
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/internal/ok")))
        build_worker(unset, once=True).run()
        assert receiver.requests == []
    assert phorge.row(phid)["properties"].endswith(',"errorType":"hook","errorCode":"uri"}')
    said = [
        r.getMessage()
        for r in with_event(caplog.records, "settings.in_force")
        if r.option == "security.outbound-blacklist"
    ]
    namespace = settings.GORGE_WEBHOOK.namespace
    assert len(said) == 1
    ranges = len(default_blacklist())
    assert said[0].startswith(
        f"Phorge setting in force: security.outbound-blacklist = {ranges} ranges, from Phorge's default"
    )
    [looked] = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "settings.looked"]
    assert f"cannot read `{namespace}_config`.`config_entry`" in looked
    assert "not changed" not in looked and "no local file given" in looked


def test_the_dashboard_says_what_the_running_workers_read_of_silent_mode_not_its_own_reading(
    phorge: Phorge, unset: Any, client: Any, django_user_model: Any, settings_cache: None, monkeypatch: Any
) -> None:
    """The web process without Phorge's local file reads phabricator.silent as unknown; a worker given it
    delivers. The workers' reading (their heartbeat) is the truth, this process's is said as its own."""
    from datetime import UTC, datetime

    from webhook_delivery.records.models import WorkerHeartbeat

    monkeypatch.setattr(settings, "GORGE_WEBHOOK", unset)
    client.force_login(viewer(django_user_model))
    now = datetime.now(UTC)

    def beat(worker_id: str, paused: str | None) -> None:
        state = {"version": 1, "delivery_paused": paused}
        WorkerHeartbeat.objects.update_or_create(
            worker_id=worker_id,
            defaults={"hostname": "h", "pid": 1, "started_at": now, "last_seen": now, "state": state},
        )

    beat("w:1:aaaaaa", None)
    page = client.get("/").content.decode()
    assert 'data-paused="no"' in page and "Nothing is delivered:" not in page
    assert "The running workers read Phorge's settings and deliver (their heartbeats say so)" in page
    beat("w:2:bbbbbb", "phabricator.silent is unknown (no local file)")
    page = client.get("/").content.decode()
    assert "Nothing is delivered:</strong> 1 of 2 workers deliver nothing: phabricator.silent is unknown" in page
    beat("w:1:aaaaaa", "phabricator.silent is unknown (no local file)")
    page = client.get("/").content.decode()
    assert "Nothing is delivered:</strong> phabricator.silent is unknown (no local file) (the worker w:" in page
