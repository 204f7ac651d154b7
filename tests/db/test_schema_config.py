"""The models match Phorge's real tables; migrations never touch Phorge; bad configuration stops start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connections

from tests.helpers import PHORGE_DB, worker_env
from webhook_delivery.config import LEASE_MARGIN_SEC, default_blacklist, load_config, parse_blacklist
from webhook_delivery.models import HeraldWebhook, HeraldWebhookRequest

ROOT = Path(__file__).resolve().parent.parent


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=worker_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@PHORGE_DB
@pytest.mark.parametrize("model", [HeraldWebhook, HeraldWebhookRequest])
def test_models_match_phorge_tables_column_for_column(model: type) -> None:
    connection = connections["phorge"]
    table = model._meta.db_table  # type: ignore[attr-defined]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_MAXIMUM_LENGTH, COLUMN_KEY "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (table,),
        )
        actual = cursor.fetchall()
    fields = model._meta.concrete_fields  # type: ignore[attr-defined]
    assert [f.column for f in fields] == [row[0] for row in actual]
    expected_types = {
        "AutoField": "int(10) unsigned",
        "PositiveIntegerField": "int(10) unsigned",
        "BinaryTextField": "varbinary",
        "CharField": "varchar",
        "TextField": "longtext",
    }
    for field, (column, column_type, nullable, max_length, key) in zip(fields, actual, strict=True):
        kind = type(field).__name__
        assert column_type.startswith(expected_types[kind]), (column, column_type, kind)
        assert nullable == "NO" and not field.null, column
        if kind in ("BinaryTextField", "CharField"):
            assert field.max_length == max_length, column
        assert field.unique == (key in ("PRI", "UNI")), column


@PHORGE_DB
@pytest.mark.slow
def test_no_migration_is_pending_and_none_targets_phorge() -> None:
    result = _manage("makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (ROOT / "webhook_delivery" / "migrations").exists()
    refused = _manage("migrate", "--database", "phorge")
    assert refused.returncode != 0
    assert "Phorge owns the herald database" in refused.stderr
    with connections["phorge"].cursor() as cursor:
        cursor.execute("SHOW TABLES")
        assert sorted(t for (t,) in cursor.fetchall()) == ["herald_webhook", "herald_webhookrequest"]


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GORGE_WEBHOOK_MAX_CONCURRENT", "0", "GORGE_WEBHOOK_MAX_CONCURRENT: expected a whole number from 1"),
        ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "fast", "GORGE_WEBHOOK_POLL_INTERVAL_MS: expected a whole number"),
        ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "-1", "GORGE_WEBHOOK_DELIVERY_TIMEOUT: expected a number of seconds"),
        ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "-5", "GORGE_WEBHOOK_RETRY_BACKOFF_SEC: expected a whole number from 0"),
        ("GORGE_WEBHOOK_OUTBOUND_BLACKLIST", "10.0.0.0/8,nope", "GORGE_WEBHOOK_OUTBOUND_BLACKLIST: 'nope' is not"),
        ("GORGE_WEBHOOK_SILENT", "maybe", "GORGE_WEBHOOK_SILENT: expected true or false"),
        ("LOG_FORMAT", "xml", "LOG_FORMAT: expected text or json"),
    ],
)
@pytest.mark.slow
def test_bad_values_stop_check_and_the_worker_with_the_variable_named(variable: str, value: str, expected: str) -> None:
    check = _manage("check", **{variable: value})
    assert check.returncode != 0
    assert expected in check.stderr
    assert "Traceback" not in check.stderr
    worker = _manage("deliver_webhooks", "--once", **{variable: value})
    assert worker.returncode != 0
    assert expected in worker.stderr
    assert "Traceback" not in worker.stderr


def test_bad_command_option_is_a_clear_error() -> None:
    result = _manage("deliver_webhooks", "--once", "--max-concurrent", "0")
    assert result.returncode != 0
    assert "expected a whole number of at least 1, got '0'" in result.stderr


def test_short_lease_is_clamped_with_a_warning() -> None:
    loaded = load_config({"GORGE_WEBHOOK_CLAIM_LEASE_SEC": "5", "GORGE_WEBHOOK_DELIVERY_TIMEOUT": "15"})
    assert loaded.delivery.claim_lease_sec == 15 + LEASE_MARGIN_SEC
    assert loaded.delivery.lease_was_clamped
    check = _manage("check", GORGE_WEBHOOK_CLAIM_LEASE_SEC="5", GORGE_WEBHOOK_DELIVERY_TIMEOUT="15")
    assert check.returncode == 0
    assert "GORGE_WEBHOOK_CLAIM_LEASE_SEC: 5 s is shorter than the delivery timeout" in check.stderr


def test_defaults_follow_phorge_and_the_spec() -> None:
    config = load_config({}).delivery
    assert config.namespace == "phabricator"
    assert (config.poll_interval_ms, config.max_concurrent, config.delivery_timeout) == (250, 128, 15.0)
    assert config.db_pool_size == 4
    assert (config.claim_lease_sec, config.retry_backoff_sec) == (60, 300)
    assert (config.error_backoff_sec, config.error_threshold) == (300, 10)
    assert config.outbound_blacklist == default_blacklist()
    assert config.silent is None


def test_database_url_and_namespace() -> None:
    loaded = load_config({"GORGE_WEBHOOK_DATABASE_URL": "mysql://u:p@db:3306/acme_herald"})
    assert loaded.delivery.namespace == "acme"
    parts = load_config({"GORGE_WEBHOOK_MYSQL_USER": "we b", "GORGE_WEBHOOK_MYSQL_PASS": "p@ss:/"})
    assert parts.phorge_database_url == "mysql://we%20b:p%40ss%3A%2F@127.0.0.1:3306/phabricator_herald"
    bad = load_config({"GORGE_WEBHOOK_DATABASE_URL": "mysql://u:p@db:3306/herald"})
    assert [e.variable for e in bad.errors] == ["GORGE_WEBHOOK_DATABASE_URL"]


def test_blacklist_forms() -> None:
    assert parse_blacklist("") == ()
    assert [str(n) for n in parse_blacklist('["10.0.0.0/8", "fc00::/7"]')] == ["10.0.0.0/8", "fc00::/7"]
    assert [str(n) for n in parse_blacklist("10.0.0.0/8, 192.168.0.0/16")] == ["10.0.0.0/8", "192.168.0.0/16"]
    assert load_config({"GORGE_WEBHOOK_OUTBOUND_BLACKLIST": ""}).delivery.outbound_blacklist == ()


@pytest.mark.django_db(transaction=True, databases=["default", "phorge"])
def test_every_orm_write_to_phorges_tables_is_refused() -> None:
    """Phorge owns these tables: only webhook_delivery.worker.store writes, through its guarded SQL."""
    from gorge_site.routers import PhorgeRouter
    from webhook_delivery.models import PhorgeIsReadOnly

    assert PhorgeRouter().db_for_write(HeraldWebhook) == "phorge"
    assert not PhorgeRouter().allow_migrate("phorge", "webhook_delivery")
    writes = [
        lambda: HeraldWebhook.objects.create(name="x"),
        lambda: HeraldWebhook.objects.get_or_create(name="x"),
        lambda: HeraldWebhook.objects.update_or_create(name="x"),
        lambda: HeraldWebhook.objects.bulk_create([HeraldWebhook(name="x")]),
        lambda: HeraldWebhook.objects.filter(name="x").update(name="y"),
        lambda: HeraldWebhook.objects.all().delete(),
        lambda: HeraldWebhookRequest.objects.filter(id=1).update(status="sent"),
        lambda: HeraldWebhookRequest.objects.all().delete(),
        lambda: HeraldWebhookRequest(status="sent").save(),
        lambda: HeraldWebhook(name="x").delete(),
    ]
    for write in writes:
        with pytest.raises(PhorgeIsReadOnly):
            write()
