"""Read-only lookups in Phorge's other databases (issue 5), against real MariaDB databases and users."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connections
from prometheus_client import REGISTRY

from tests.support.clock import FixedClock
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin, random_phid, with_event
from tests.support.mariadb_servers import MariaDBUser
from tests.support.phorge_app_db import AppDatabases, app_schema
from webhook_delivery.grants import grants_sql
from webhook_delivery.phorge.columns import positional
from webhook_delivery.phorge.config import PhorgeSettings, php_truthy
from webhook_delivery.phorge.objects import OBJECT_TABLES, PhorgeObjects
from webhook_delivery.phorge.php_guard import PhpWorkerGuard
from webhook_delivery.worker.php_watch import PhpWatch

pytestmark = PHORGE_DB

NAMESPACE = settings.GORGE_WEBHOOK.namespace
LOGGER = "webhook_delivery.phorge.objects"
GUARD_LOGGER = "webhook_delivery.worker.php_watch"
XACTIONS = ("maniphest", "maniphest_transaction")


@pytest.fixture(scope="module")
def apps(django_db_setup: None) -> Iterator[AppDatabases]:
    assert settings.DATABASES["phorge"]["NAME"] == f"{NAMESPACE}_herald"
    admin = mysql_admin()
    databases = AppDatabases(admin, NAMESPACE)
    try:
        databases.create()
        yield databases
    finally:
        databases.drop()
        admin.close()


@pytest.fixture
def app_db(apps: AppDatabases, phorge: Phorge) -> AppDatabases:
    for app, table in [
        ("maniphest", "maniphest_task"),
        XACTIONS,
        ("config", "config_entry"),
        ("worker", "worker_activetask"),
        ("worker", "worker_archivetask"),
    ]:
        apps.truncate(app, table)
    return apps


@pytest.fixture(scope="module")
def herald_only_user(apps: AppDatabases) -> Iterator[MariaDBUser]:
    name = f"{NAMESPACE}_ro"
    user = MariaDBUser(apps.admin, name, grants_sql(NAMESPACE, name, "%", optional=False))
    yield user
    user.drop()


@pytest.fixture(scope="module")
def granted_user(apps: AppDatabases) -> Iterator[MariaDBUser]:
    name = f"{NAMESPACE}_all"
    user = MariaDBUser(apps.admin, name, grants_sql(NAMESPACE, name, "%"))
    yield user
    user.drop()


def fallback_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    unchecked = (
        "objects.app_elsewhere",
        "objects.type_unchecked",
        "objects.databases_elsewhere",
        "objects.table_unreadable",
    )
    return [r.getMessage() for r in with_event(caplog.records, *unchecked)]


# -- objects and transactions ------------------------------------------------------------------------


def test_every_mapped_table_is_phorge_schema() -> None:
    tables = set(app_schema())
    for phid_type, entry in OBJECT_TABLES.items():
        assert len(phid_type) == 4
        assert (entry.object_app, entry.object_table) in tables | {("herald", "herald_webhook")}
        assert (entry.xaction_app, entry.xaction_table) in tables


def test_deleted_object_means_none_and_existing_object_empty_list(app_db: AppDatabases) -> None:
    objects = PhorgeObjects(NAMESPACE)
    gone = random_phid("TASK")
    assert objects.transactions(gone, {"1": "PHID-XACT-TASK-aaaaaaaaaaaaaaa"}) is None
    assert objects.transactions(gone, []) is None
    task = app_db.task()
    assert objects.transactions(task, []) == []
    assert objects.transactions(task, {}) == []


def test_newest_first_by_id_and_deleted_transactions_dropped(app_db: AppDatabases) -> None:
    task = app_db.task()
    first = app_db.transaction(*XACTIONS, task, row_id=101)
    second = app_db.transaction(*XACTIONS, task, row_id=102)
    third = app_db.transaction(*XACTIONS, task, row_id=103)
    other_task = app_db.task()
    foreign = app_db.transaction(*XACTIONS, other_task, row_id=104)
    deleted = "PHID-XACT-TASK-deleteddeleted2"
    objects = PhorgeObjects(NAMESPACE)

    # The edit path's PHID-keyed map in application order: PHP sends it reversed (ids 103, 102, 101).
    edit_order = {phid: phid for phid in (first, second, deleted, third)}
    assert objects.transactions(task, edit_order) == [third, second, first]
    # Stored order is irrelevant: a list, or an ID-keyed map whose keys lie, comes out by id.
    assert objects.transactions(task, [second, third, first]) == [third, second, first]
    assert objects.transactions(task, {"1": third, "2": first, "3": second}) == [third, second, first]
    # Another object's transaction is not sent; all gone gives [].
    assert objects.transactions(task, [first, foreign]) == [first]
    assert objects.transactions(task, [deleted]) == []


def test_unknown_phid_type_falls_back_with_one_log_line(app_db: AppDatabases, caplog: pytest.LogCaptureFixture) -> None:
    objects = PhorgeObjects(NAMESPACE)
    caplog.set_level(logging.INFO, logger=LOGGER)
    stored = {"PHID-XACT-ZZZZ-aaaaaaaaaaaaaaa": "PHID-XACT-ZZZZ-aaaaaaaaaaaaaaa", "b": "PHID-XACT-ZZZZ-bbbbbbbbbbbbbbb"}
    for _ in range(3):
        assert objects.transactions("PHID-ZZZZ-aaaaaaaaaaaaaaaaaaaa", stored) == [
            "PHID-XACT-ZZZZ-bbbbbbbbbbbbbbb",
            "PHID-XACT-ZZZZ-aaaaaaaaaaaaaaa",
        ]
    assert objects.transactions("not-a-phid", {"7": "x", "9": "y"}) == ["y", "x"]
    assert len(fallback_lines(caplog)) == 2  # one for ZZZZ, one for ????
    assert sorted(getattr(r, "phid_type", "") for r in caplog.records if r.name == LOGGER) == ["????", "ZZZZ"]


def test_missing_database_falls_back_with_one_log_line(app_db: AppDatabases, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    objects = PhorgeObjects(f"{NAMESPACE}x")  # no <ns>x_maniphest on this server
    for _ in range(3):
        assert objects.transactions(random_phid("TASK"), {"1": "a", "2": "b"}) == ["b", "a"]
        assert objects.transactions(random_phid("TASK"), ["a", "b"]) == ["b", "a"]
    lines = fallback_lines(caplog)
    assert lines == [
        f"cannot read `{NAMESPACE}x_maniphest`.`maniphest_task` (no SELECT grant, or no such table): for Maniphest "
        "tasks, the stored transactions are sent, newest first, unchecked, and deleted objects are not detected"
    ]


def test_missing_grant_falls_back_with_one_log_line(
    app_db: AppDatabases, herald_only_user: MariaDBUser, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    task = app_db.task()
    stored = {"PHID-XACT-TASK-aaaaaaaaaaaaaaa": "PHID-XACT-TASK-aaaaaaaaaaaaaaa", "k": "PHID-XACT-TASK-bbbbbbbbbbbbbbb"}
    objects = PhorgeObjects(NAMESPACE, connection=lambda: nullcontext(herald_only_user.connection))
    for object_phid in (task, random_phid("TASK"), task):
        assert objects.transactions(object_phid, stored) == list(reversed(stored.values()))
    assert len(fallback_lines(caplog)) == 1
    assert [r.__dict__["mysql_error"] for r in caplog.records if r.name == LOGGER] == [1142]
    # The webhook's own table is granted; only its transaction table is not (and does not exist).
    hook = random_phid("HWBH")
    assert objects.transactions(hook, ["PHID-XACT-HWBH-aaaaaaaaaaaaaaa"]) is None


def test_only_the_transaction_table_missing_still_checks_the_object(
    app_db: AppDatabases, phorge: Phorge, herald_only_user: MariaDBUser, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    hook = phorge.hook("http://127.0.0.1:9/ok")
    objects = PhorgeObjects(NAMESPACE, connection=lambda: nullcontext(herald_only_user.connection))
    assert objects.transactions(hook, {"5": "PHID-XACT-HWBH-a", "6": "PHID-XACT-HWBH-b"}) == [
        "PHID-XACT-HWBH-b",
        "PHID-XACT-HWBH-a",
    ]
    assert objects.transactions(random_phid("HWBH"), {"5": "PHID-XACT-HWBH-a"}) is None
    assert len(fallback_lines(caplog)) == 1
    assert "herald_webhooktransaction" in fallback_lines(caplog)[0]
    assert "deleted objects" not in fallback_lines(caplog)[0]


def test_sqlite_behaves_as_no_grant(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    demo = connections["default"]
    assert demo.vendor == "sqlite"
    objects = PhorgeObjects("phabricator", connection=lambda: nullcontext(demo))
    assert objects.transactions(random_phid("TASK"), ["a", "b"]) == ["b", "a"]
    assert objects.transactions(random_phid("DREV"), ["a", "b"]) == ["b", "a"]
    assert len(fallback_lines(caplog)) == 1
    config = dataclasses.replace(settings.GORGE_WEBHOOK, namespace="phabricator", silent=None)
    assert PhorgeSettings(config, connection=lambda: nullcontext(demo)).silent() is None  # unknown, never off
    assert PhpWorkerGuard("phabricator", connection=lambda: nullcontext(demo)).current().state == "unknown"


def test_lost_connection_propagates_as_database_error(app_db: AppDatabases, caplog: pytest.LogCaptureFixture) -> None:
    base = connections["phorge"]
    doomed = type(base)(dict(base.settings_dict), alias="phorge_doomed")
    try:
        objects = PhorgeObjects(NAMESPACE, connection=lambda: nullcontext(doomed))
        task = app_db.task()
        assert objects.transactions(task, []) == []
        with doomed.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            (thread_id,) = cursor.fetchone()
        app_db.execute(f"KILL {int(thread_id)}")
        with pytest.raises(DatabaseError):
            objects.transactions(task, [])
        with pytest.raises(DatabaseError):
            PhorgeSettings(
                dataclasses.replace(settings.GORGE_WEBHOOK, silent=None), connection=lambda: nullcontext(doomed)
            ).current()
        with pytest.raises(DatabaseError):
            PhpWorkerGuard(NAMESPACE, connection=lambda: nullcontext(doomed)).current()
        assert fallback_lines(caplog) == []
    finally:
        doomed.close()


# -- silent mode -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "deleted", "expected"),
    [("true", False, True), ("false", False, False), ("true", True, None), ("1", False, True), ('"0"', False, False)],
)
def test_silent_from_phorge_config(app_db: AppDatabases, value: str, deleted: bool, expected: bool | None) -> None:
    """Without the local file, only a value stored in the database tells: no row is unknown, not off."""
    config = dataclasses.replace(settings.GORGE_WEBHOOK, silent=None)
    assert PhorgeSettings(config).silent() is None
    app_db.config("phabricator.silent", value, deleted=deleted)
    app_db.config("phabricator.silent", "true", namespace="other")
    resolved = PhorgeSettings(config).current()
    assert resolved.silent.value is expected
    assert resolved.silent.source == ("unknown" if expected is None else "database")


@pytest.mark.parametrize(("override", "stored"), [(True, "false"), (False, "true")])
def test_environment_override_wins_both_ways(app_db: AppDatabases, override: bool, stored: str) -> None:
    app_db.config("phabricator.silent", stored)
    silent = PhorgeSettings(dataclasses.replace(settings.GORGE_WEBHOOK, silent=override))
    assert silent.silent() is override
    assert silent.current().silent.source == "variable"


def test_silent_is_cached_for_a_few_seconds(app_db: AppDatabases) -> None:
    clock = FixedClock(1000.0)
    app_db.config("phabricator.silent", "false")
    silent = PhorgeSettings(dataclasses.replace(settings.GORGE_WEBHOOK, silent=None), ttl=5, clock=clock)
    assert silent.silent() is False
    app_db.config("phabricator.silent", "true")
    clock.advance(4.9)
    assert silent.silent() is False
    clock.advance(0.2)
    assert silent.silent() is True


def test_silent_without_grant_is_unknown_and_logged_once(
    app_db: AppDatabases, herald_only_user: MariaDBUser, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook_delivery.phorge.config")
    app_db.config("phabricator.silent", "true")
    silent = PhorgeSettings(
        dataclasses.replace(settings.GORGE_WEBHOOK, silent=None),
        connection=lambda: nullcontext(herald_only_user.connection),
        ttl=0,
        clock=iter(range(0, 1000, 2)).__next__,
    )
    assert [silent.silent(), silent.silent(), silent.silent()] == [None, None, None]
    assert len(with_event(caplog.records, "settings.config_elsewhere", "settings.table_unreadable")) == 1


def test_php_truthiness() -> None:
    truthy: list[Any] = [True, 1, "yes", [0], {"a": 1}]
    falsy: list[Any] = [False, 0, 0.0, "", "0", [], {}, None]
    assert [php_truthy(v) for v in truthy] == [True] * 5
    assert [php_truthy(v) for v in falsy] == [False] * 8


# -- handover guard ----------------------------------------------------------------------------------


def gauge() -> float | None:
    return REGISTRY.get_sample_value("gorge_webhook_php_worker_active")


def test_guard_follows_php_webhook_tasks(app_db: AppDatabases) -> None:
    guard = PhpWorkerGuard(NAMESPACE, ttl=0)
    assert guard.current().as_json() == {
        "state": "idle",
        "active_tasks": 0,
        "leased_tasks": 0,
        "recently_archived": 0,
        "last_delivery": None,
        "detail": "0 HeraldWebhookWorker task(s) queued in Phorge (0 leased by phd); 0 run by phd in the last 15 min",
    }
    app_db.worker_task(task_class="PhabricatorApplicationTransactionPublishWorker")
    app_db.worker_task(archived=True, task_class="PhabricatorSearchWorker")
    app_db.worker_task(archived=True, age=3600)  # delivered by PHP, but an hour ago
    app_db.worker_task(archived=True, result=2)  # cancelled with bin/worker cancel
    assert guard.current().state == "idle"

    queued = app_db.worker_task()
    now = int(app_db.execute("SELECT UNIX_TIMESTAMP()")[0][0])
    app_db.worker_task(lease_owner="12345:1700000000:host:1", lease_expires=now + 7200)
    state = guard.current().as_json()
    assert (state["state"], state["active_tasks"], state["leased_tasks"]) == ("active", 2, 1)

    app_db.execute(f"DELETE FROM {app_db.table('worker', 'worker_activetask')} WHERE taskClass = 'HeraldWebhookWorker'")
    assert guard.current().state == "idle"
    app_db.worker_task(archived=True, result=1, age=300)  # phd ran one five minutes ago: recent, not active
    state = guard.current().as_json()
    assert (state["state"], state["active_tasks"], state["recently_archived"]) == ("recent", 0, 1)
    assert abs(state["last_delivery"] - (now - 300)) <= 2
    app_db.worker_task(archived=True, result=1)  # and one just now (it failed): PHP is at work
    state = guard.current().as_json()
    assert (state["state"], state["recently_archived"]) == ("active", 2)
    assert queued


def test_guard_is_unknown_without_grant(app_db: AppDatabases, herald_only_user: MariaDBUser) -> None:
    app_db.worker_task()
    state = PhpWorkerGuard(NAMESPACE, connection=lambda: nullcontext(herald_only_user.connection)).current().as_json()
    assert state["state"] == "unknown"
    assert state["active_tasks"] is None and state["recently_archived"] is None
    assert "worker_activetask" in state["detail"]


def test_guard_is_never_idle_with_half_the_grant(apps: AppDatabases, app_db: AppDatabases) -> None:
    name = f"{NAMESPACE}_half"
    grants = grants_sql(NAMESPACE, name, "%", optional=False)
    grants += f"GRANT SELECT ON {app_db.table('worker', 'worker_activetask')} TO '{name}'@'%';\n"
    user = MariaDBUser(apps.admin, name, grants)
    try:
        guard = PhpWorkerGuard(NAMESPACE, connection=lambda: nullcontext(user.connection), ttl=0)
        state = guard.current().as_json()
        assert (state["state"], state["active_tasks"], state["recently_archived"]) == ("unknown", 0, None)
        app_db.worker_task()
        assert guard.current().state == "active"
    finally:
        user.drop()


def test_guard_watch_logs_once_per_change_and_sets_gauge(
    app_db: AppDatabases, herald_only_user: MariaDBUser, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=GUARD_LOGGER)
    guard = PhpWatch(PhpWorkerGuard(NAMESPACE, ttl=0))
    guard.watch()
    guard.watch()
    assert gauge() == 0
    task = app_db.worker_task()
    for _ in range(3):
        assert guard.watch().state == "active"
    assert gauge() == 1
    app_db.execute(f"DELETE FROM {app_db.table('worker', 'worker_activetask')} WHERE id = %s", (task,))
    guard.watch()
    assert gauge() == 0
    blind = PhpWatch(PhpWorkerGuard(NAMESPACE, connection=lambda: nullcontext(herald_only_user.connection), ttl=0))
    blind.watch()
    blind.watch()
    assert gauge() == -1
    said = [r.event for r in caplog.records if r.name == GUARD_LOGGER]
    assert said == ["php.idle", "php.seen_delivering", "php.idle", "php.unknown"]
    assert [r.levelname for r in caplog.records if r.name == GUARD_LOGGER][1] == "WARNING"


def test_guard_caches_between_polls(app_db: AppDatabases) -> None:
    clock = FixedClock(50.0)
    guard = PhpWorkerGuard(NAMESPACE, ttl=5, clock=clock)
    assert guard.current().state == "idle"
    app_db.worker_task()
    clock.advance(4)
    assert guard.current().state == "idle"
    clock.advance(2)
    assert guard.current().state == "active"


def test_guard_queries_use_phorge_indexes(app_db: AppDatabases) -> None:
    guard = PhpWorkerGuard(NAMESPACE)
    for _ in range(30):
        app_db.worker_task(task_class="PhabricatorSearchWorker")
        app_db.worker_task(archived=True, task_class="PhabricatorSearchWorker", age=86_400)
    app_db.execute(f"ANALYZE TABLE {app_db.table('worker', 'worker_activetask')}")
    app_db.execute(f"ANALYZE TABLE {app_db.table('worker', 'worker_archivetask')}")
    with connections["phorge"].cursor() as cursor:
        cursor.execute(*positional("EXPLAIN " + guard.active_sql(), {"task_class": "HeraldWebhookWorker"}))
        names = [d[0] for d in cursor.description]
        active = dict(zip(names, cursor.fetchone(), strict=True))
        params = {"recent": 900, "task_class": "HeraldWebhookWorker", "cancelled": 2}
        cursor.execute(*positional("EXPLAIN " + guard.archive_sql(), params))
        archive = dict(zip(names, cursor.fetchone(), strict=True))
    assert active["key"] == "taskClass"
    assert archive["key"] == "key_modified"


# -- grants ------------------------------------------------------------------------------------------


def test_grants_are_enough_for_every_lookup_and_nothing_more(
    app_db: AppDatabases, phorge: Phorge, granted_user: MariaDBUser, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    as_user = granted_user.connection
    task = app_db.task()
    xaction = app_db.transaction(*XACTIONS, task)
    objects = PhorgeObjects(NAMESPACE, connection=lambda: nullcontext(as_user))
    assert objects.transactions(task, [xaction, "PHID-XACT-TASK-gonegonegonegon"]) == [xaction]
    assert objects.transactions(random_phid("TASK"), [xaction]) is None
    for phid_type in OBJECT_TABLES:
        assert objects.transactions(random_phid(phid_type), ["x"]) is None
    app_db.config("phabricator.silent", "true")
    granted = PhorgeSettings(
        dataclasses.replace(settings.GORGE_WEBHOOK, silent=None), connection=lambda: nullcontext(as_user)
    )
    assert granted.silent() is True
    app_db.worker_task()
    assert PhpWorkerGuard(NAMESPACE, connection=lambda: nullcontext(as_user)).current().state == "active"
    assert fallback_lines(caplog) == []

    hook = phorge.hook("http://127.0.0.1:9/ok")
    request = phorge.request(hook)
    with as_user.cursor() as cursor:
        cursor.execute("SELECT phid, hmacKey FROM herald_webhook")
        assert cursor.fetchall()
        cursor.execute("UPDATE herald_webhookrequest SET dateModified = dateModified + 1 WHERE phid = %s", [request])
        assert cursor.rowcount == 1
    denied = [
        "UPDATE herald_webhook SET status = 'disabled'",
        "DELETE FROM herald_webhookrequest",
        "INSERT INTO herald_webhookrequest (phid) VALUES ('x')",
        f"UPDATE {app_db.table('maniphest', 'maniphest_task')} SET title = 'x'",
        f"SELECT * FROM {app_db.table('worker', 'worker_taskdata')}",
        f"SELECT * FROM {app_db.table('config', 'config_transaction')}",
        f"SELECT * FROM {app_db.table('herald', 'herald_rule')}",
        f"CREATE TABLE {app_db.table('maniphest', 'x')} (id int)",
    ]
    for sql in denied:
        with pytest.raises(DatabaseError) as caught, as_user.cursor() as cursor:
            cursor.execute(sql)
        assert caught.value.args[0] in {1142, 1143, 1044}, sql


def test_grants_text_is_commented_and_quoted() -> None:
    text = grants_sql("phabricator", "o'brien", "10.0.%")
    statements = [line for line in text.splitlines() if line.startswith("GRANT")]
    assert statements[:2] == [
        "GRANT SELECT ON `phabricator_herald`.`herald_webhook` TO 'o\\'brien'@'10.0.%';",
        "GRANT SELECT, UPDATE ON `phabricator_herald`.`herald_webhookrequest` TO 'o\\'brien'@'10.0.%';",
    ]
    assert all(" UPDATE" not in line for line in statements[2:])
    optional = text.split("GRANT SELECT, UPDATE", 1)[1].splitlines()[1:]
    for comment, following in itertools.pairwise(optional):
        if comment.startswith("-- Optional"):
            assert following.startswith("GRANT SELECT ON"), comment
    assert grants_sql("phabricator", "u", optional=False).count("GRANT") == 2
    with pytest.raises(ValueError):
        grants_sql("bad`name", "u")


def test_print_grants_command(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("print_grants", user="gorge", host="%", namespace="phorge")
    out = capsys.readouterr().out
    assert out == grants_sql("phorge", "gorge", "%")
    with pytest.raises(CommandError, match="invalid Phorge namespace"):
        call_command("print_grants", namespace="no-dashes")
