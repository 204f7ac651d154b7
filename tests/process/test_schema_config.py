"""The models match Phorge's real tables; migrations never touch Phorge; bad configuration stops start-up.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_schema_config.py,
tests/db/test_schema_config.py."""

from __future__ import annotations

import subprocess

import pytest
from django.db import connections

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, worker_env
from tests.support.processes import manage
from webhook_delivery.config import LEASE_MARGIN_SEC, load_config


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return manage(*args, env=worker_env(**env), ok=False)


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
