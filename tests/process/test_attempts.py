"""The attempt log (worker/attempts.py) in a process of its own, on a latin1 MariaDB database and on PostgreSQL:
every good record stored, the bad ones cost only themselves."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.conf import settings

from tests.support import ROOT
from tests.support.helpers import mysql_admin, worker_env
from tests.support.processes import manage

PID = os.getpid()


GOOD = [f"good{i}" for i in range(6)] + [f"later{i}" for i in range(3)]


def _drive_attempt_log(database_url: str, prefix: str) -> dict[str, Any]:
    import json

    env = worker_env(DATABASE_URL=database_url, GORGE_WEBHOOK_ATTEMPT_LOG_BODY_BYTES="64", LOG_FORMAT="text")
    migrated = manage("migrate", "delivery_status", "--noinput", "-v", "0", env=env, ok=False, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.attempt_log_driver", prefix],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


def _check_stored(rows: dict[str, tuple[str, str, str]], result: dict[str, Any], prefix: str) -> None:
    """rows: request_phid -> (object_phid, hook_phid, response_prefix), as the database holds them."""
    assert result["alive_after_first_batch"] is True
    for name in GOOD:
        assert f"PHID-HWBR-{prefix}{name}" in rows, name  # no bad record cost a good one
    assert rows[f"PHID-HWBR-{prefix}nul"] == ("PHID-TASK-\\x00x", "PHID-HWBH-driver", "a\\x00b")
    assert f"PHID-HWBR-{prefix}toobig" not in rows  # counted lost, costing nobody else
    assert result["lost"] == 1.0
    assert len(rows) == len(GOOD) + 4
    said = [line for line in result["stderr"].splitlines() if "attempt log:" in line]
    assert len(said) == 1 and "a record cannot be stored" in said[0], result["stderr"][-3000:]


@pytest.mark.database_server
@pytest.mark.slow
def test_attempt_log_on_a_latin1_mariadb_database_stores_every_good_record() -> None:
    db = settings.DATABASES["phorge"]
    name = f"gwtest{PID}_site"
    admin = mysql_admin()
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET latin1 COLLATE latin1_swedish_ci")
    try:
        auth = str(db["USER"]) + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
        result = _drive_attempt_log(f"mysql://{auth}@{db['HOST']}:{db['PORT']}/{name}", "my")
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = 'delivery_status_deliveryattempt' AND COLUMN_NAME = 'response_prefix'",
                [name],
            )
            assert cursor.fetchone() == ("latin1",)  # the case under test: not utf8mb4
            cursor.execute(
                f"SELECT request_phid, object_phid, hook_phid, response_prefix "
                f"FROM `{name}`.delivery_status_deliveryattempt"
            )
            rows = {phid: (obj, hook, body) for phid, obj, hook, body in cursor.fetchall()}
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()
    _check_stored(rows, result, "my")
    assert rows["PHID-HWBR-myemoji"] == ("PHID-TASK-driver", "PHID-HWBH-?", "ok ? done")  # latin1 has no emoji
    assert rows["PHID-HWBR-myaccents"][2] == "café ñ"  # what latin1 holds is kept
    assert rows["PHID-HWBR-mysurrogate"][2] == "half ? pair"


@pytest.mark.database_server
@pytest.mark.slow
def test_attempt_log_on_postgresql_stores_nul_escaped_and_every_good_record() -> None:
    psycopg = pytest.importorskip("psycopg")
    server = "postgresql://postgres@127.0.0.1:5432"
    try:
        admin = psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at 127.0.0.1:5432: {exc}")
    name = f"gwtest{PID}_site"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    try:
        result = _drive_attempt_log(f"{server}/{name}", "pg")
        with psycopg.connect(f"{server}/{name}") as site:
            found = site.execute(
                "SELECT request_phid, object_phid, hook_phid, response_prefix FROM delivery_status_deliveryattempt"
            ).fetchall()
        rows = {phid: (obj, hook, body) for phid, obj, hook, body in found}
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
    _check_stored(rows, result, "pg")
    assert rows["PHID-HWBR-pgemoji"] == ("PHID-TASK-driver", "PHID-HWBH-\U0001f600", "ok \U0001f600 done")
    assert rows["PHID-HWBR-pgsurrogate"][2] == "half \ufffd pair"
