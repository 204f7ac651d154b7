"""checks.py through real `manage.py` processes: a bad, absurd or too deep setting stops `check` and the worker
with the variable named; a short lease is clamped with a warning; an IPv4-only blacklist is warned about."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, worker_env
from tests.support.processes import manage
from webhook_delivery.config import LEASE_MARGIN_SEC
from webhook_delivery.phorge.formats import load_config
from webhook_delivery.version import VERSION

DEEP_ENV = "[" * 20_000 + "]" * 20_000  # an environment value has at most 128 KiB


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


pytestmark = PHORGE_DB


def test_an_ipv4_only_blacklist_is_warned_about_at_start_up() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DJANGO_SETTINGS_MODULE="gorge_site.settings", GORGE_WEBHOOK_OUTBOUND_BLACKLIST="10.0.0.0/8,127.0.0.0/8")
    done = manage("check", env=env, ok=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "gorge.W002" in output and "fc00::/7" in output and "fe80::/10" in output and "::1/128" in output
    assert "this host 0.0.0.0/8" in output and "unspecified ::/128" in output


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return manage(*args, env=worker_env(**env), ok=False)


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
        (
            "GORGE_WEBHOOK_CA_BUNDLE",
            "/nonexistent/ca.pem",
            "GORGE_WEBHOOK_CA_BUNDLE: the CA bundle /nonexistent/ca.pem",
        ),
        ("GORGE_WEBHOOK_PROXY", "socks4://proxy:1080", "GORGE_WEBHOOK_PROXY: expected a proxy URL starting with"),
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


def test_short_lease_is_clamped_with_a_warning() -> None:
    loaded = load_config({"GORGE_WEBHOOK_CLAIM_LEASE_SEC": "5", "GORGE_WEBHOOK_DELIVERY_TIMEOUT": "15"})
    assert loaded.delivery.claim_lease_sec == 15 + LEASE_MARGIN_SEC
    assert loaded.delivery.lease_was_clamped
    check = _manage("check", GORGE_WEBHOOK_CLAIM_LEASE_SEC="5", GORGE_WEBHOOK_DELIVERY_TIMEOUT="15")
    assert check.returncode == 0
    assert "GORGE_WEBHOOK_CLAIM_LEASE_SEC: 5 s is shorter than the delivery timeout" in check.stderr


def test_a_tree_without_its_version_stops_at_start_with_the_file_named(tmp_path: Path) -> None:
    """An image or install that left pyproject.toml out: every command stops (gorge.E004), and --version says
    unknown rather than a version it cannot know."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "manage.py", tree)
    for package in ("gorge_site", "webhook_delivery"):
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    env = worker_env()
    done = manage("check", env=env, ok=False, cwd=tree)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "gorge.E004" in done.stderr and f"{tree / 'pyproject.toml'} cannot be read" in done.stderr
    assert manage("deliver_webhooks", "--version", env=env, cwd=tree).stdout == "unknown\n"
    (tree / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    assert manage("deliver_webhooks", "--version", env=env, cwd=tree).stdout == f"{VERSION}\n"
