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
        ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "-5", "GORGE_WEBHOOK_RETRY_BACKOFF_SEC: expected a whole number from 1"),
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
    assert "expected a whole number from 1 to 1024, got '0'" in result.stderr


WIDE_PORT = "\uff16\uff15\uff15\uff13\uff15"  # 65535 in full-width digits: int() reads it, nobody means it
# Issue 39, finding 4: values that parsed as numbers and meant nothing (a timeout of 1e-300 s failed every
# request for good; an alert interval of 1e-300 s spun the watcher), and digits of other scripts.
ABSURD = [
    ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "1e-300", "expected a number of seconds from 1 to 3600"),
    ("GORGE_WEBHOOK_DELIVERY_TIMEOUT", "0.01", "expected a number of seconds from 1 to 3600"),
    ("GORGE_ALERT_INTERVAL_SEC", "1e-300", "expected a number from 1 to 3600"),
    ("GORGE_ALERT_CHANNEL_TIMEOUT_SEC", "0.001", "expected a number from 1 to 300"),
    ("GORGE_ALERT_WORKER_DEAD_SEC", "\u0661\u0665", "expected a number from 1 to 86400"),
    ("GORGE_ALERT_FAILING_MINUTES", "1_0", "expected a number from 1 to 10080"),
    ("GORGE_WEBHOOK_MYSQL_PORT", "\uff16\uff15\uff15\uff13\uff15", "expected a whole number from 1 to 65535"),
    ("GORGE_WEBHOOK_POLL_INTERVAL_MS", "1", "expected a whole number from 10 to 3600000"),
    ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "\u0661\u0665", "expected a whole number from 1 to 86400"),
    ("GORGE_WEBHOOK_ERROR_THRESHOLD", "1_0", "expected a whole number from 1 to 1000000"),
    ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "0", "expected a whole number from 1 to 2592000"),
]


@pytest.mark.parametrize(("variable", "value", "expected"), ABSURD, ids=[f"{v}={x}" for v, x, _e in ABSURD])
@pytest.mark.slow
def test_absurd_values_stop_check_with_the_variable_and_its_range_named(
    variable: str, value: str, expected: str
) -> None:
    parts = {"GORGE_WEBHOOK_DATABASE_URL": ""} if variable == "GORGE_WEBHOOK_MYSQL_PORT" else {}  # read without a URL
    check = _manage("check", **{variable: value}, **parts)
    assert check.returncode != 0, check.stderr
    assert f"{variable}: {expected}, got {value!r}" in check.stderr
    assert "Traceback" not in check.stderr


def test_the_commands_take_ascii_numbers_in_their_ranges_only() -> None:
    for args, expected in [
        (("--max-concurrent", "1_0"), "expected a whole number from 1 to 1024, got '1_0'"),
        (("--poll-interval-ms", "\u0661\u0665"), "expected a whole number from 10 to 3600000, got '\u0661\u0665'"),
        (
            ("--metrics-port", "\uff16\uff15\uff15\uff13\uff15"),
            "expected a TCP port from 1 to 65535, got '\uff16\uff15\uff15\uff13\uff15'",
        ),
    ]:
        result = _manage("deliver_webhooks", "--once", *args)
        assert result.returncode != 0 and expected in result.stderr, result.stderr
    watcher = _manage("watch_webhooks", "--once", "--metrics-port", "1_0")
    assert watcher.returncode != 0 and "expected a TCP port from 1 to 65535, got '1_0'" in watcher.stderr


def test_short_lease_is_clamped_with_a_warning() -> None:
    loaded = load_config({"GORGE_WEBHOOK_CLAIM_LEASE_SEC": "5", "GORGE_WEBHOOK_DELIVERY_TIMEOUT": "15"})
    assert loaded.delivery.claim_lease_sec == 15 + LEASE_MARGIN_SEC
    assert loaded.delivery.lease_was_clamped
    check = _manage("check", GORGE_WEBHOOK_CLAIM_LEASE_SEC="5", GORGE_WEBHOOK_DELIVERY_TIMEOUT="15")
    assert check.returncode == 0
    assert "GORGE_WEBHOOK_CLAIM_LEASE_SEC: 5 s is shorter than the delivery timeout" in check.stderr
