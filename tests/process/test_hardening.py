"""Findings of the security review, each proven fixed with the real parts: the `mariadb` client fed the
output of print_grants, a real Worker and receiver, a real MariaDB database for Django's own tables.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/unit/test_hardening.py,
tests/db/test_hardening.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, mysql_admin, worker_env
from tests.support.processes import manage

PID = os.getpid()


def _mariadb_args(*extra: str) -> list[str]:
    db = settings.DATABASES["phorge"]
    args = ["mariadb", "-h", str(db["HOST"] or "127.0.0.1"), "-P", str(db["PORT"] or 3306), "-u", str(db["USER"])]
    if db["PASSWORD"]:
        args.append(f"-p{db['PASSWORD']}")
    return [*args, *extra]


def _print_grants_into_mariadb(*args: str, env: dict[str, str] | None = None, client: tuple[str, ...] = ()) -> Any:
    """`manage.py print_grants ARGS | mariadb -u root`, as docs/operate/install.md tells administrators to run it."""
    grants = subprocess.Popen(
        [sys.executable, "manage.py", "print_grants", *args],
        cwd=ROOT,
        env=env or worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert grants.stdout is not None
    sql = subprocess.run(_mariadb_args(*client), stdin=grants.stdout, capture_output=True, text=True, timeout=60)
    grants.stdout.close()
    stderr = grants.stderr.read().decode() if grants.stderr else ""
    grants.wait(60)
    return grants.returncode, stderr, sql


def _databases(admin: Any) -> set[str]:
    with admin.cursor() as cursor:
        cursor.execute("SHOW DATABASES")
        return {name for (name,) in cursor.fetchall()}


@pytest.fixture
def scratch() -> Iterator[tuple[Any, str]]:
    """A database the hostile input tries to drop: gwtest<pid>_scratch, made and dropped here."""
    name = f"gwtest{PID}_scratch"
    admin = mysql_admin()
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    yield admin, name
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()


@pytest.mark.database_server
@pytest.mark.parametrize(
    "user",
    [
        "gorge\nDROP DATABASE {scratch};\n-- ",
        "gorge\rDROP DATABASE {scratch};\r-- ",
        "gorge\u2028DROP DATABASE {scratch};",
    ],
)
def test_print_grants_refuses_a_hostile_user_argument(scratch: tuple[Any, str], user: str) -> None:
    admin, name = scratch
    status, stderr, sql = _print_grants_into_mariadb("--user", user.format(scratch=name), "--required-only")
    assert status == 1
    assert "refusing --user: the user name contains the control character" in stderr
    assert "Traceback" not in stderr
    assert sql.returncode == 0, sql.stderr  # nothing reached the client: nothing ran
    assert name in _databases(admin)


@pytest.mark.database_server
def test_print_grants_refuses_a_hostile_user_in_the_database_url(scratch: tuple[Any, str]) -> None:
    admin, name = scratch
    db = settings.DATABASES["phorge"]
    hostile = quote(f"gorge\nDROP DATABASE {name};\n-- ", safe="")
    env = worker_env(GORGE_WEBHOOK_DATABASE_URL=f"mysql://{hostile}@{db['HOST']}:{db['PORT']}/{db['NAME']}")
    status, stderr, sql = _print_grants_into_mariadb("--required-only", env=env)
    assert status == 1
    assert "refusing the user of GORGE_WEBHOOK_DATABASE_URL" in stderr
    assert "control character '\\n'" in stderr
    assert "Traceback" not in stderr
    assert sql.returncode == 0, sql.stderr
    assert name in _databases(admin)


@pytest.mark.database_server
@pytest.mark.parametrize("host", ["%\nDROP DATABASE {scratch};\n-- ", "%' ; DROP DATABASE {scratch}; -- ", ""])
def test_print_grants_refuses_a_hostile_host(scratch: tuple[Any, str], host: str) -> None:
    admin, name = scratch
    status, stderr, _sql = _print_grants_into_mariadb("--user", "gorge", "--host", host.format(scratch=name))
    assert status == 1
    assert "refusing --host: the host" in stderr
    assert "Traceback" not in stderr
    assert name in _databases(admin)


@PHORGE_DB
@pytest.mark.parametrize("suffix", ["_grantee", "_o'b\\x ; DROP DATABASE {scratch}; -- "])
@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
@pytest.mark.slow
def test_print_grants_piped_into_mariadb_applies_the_grants(
    scratch: tuple[Any, str], suffix: str, sql_mode: str
) -> None:
    admin, name = scratch
    user = f"gwtest{PID}" + suffix.format(scratch=name)
    account = "'" + user.replace("\\", "\\\\").replace("'", "\\'") + "'@'%'"
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE USER {account} IDENTIFIED BY 'not-used-1234'")
    try:
        client = (f"--init-command=SET SESSION sql_mode='{sql_mode}'",) if sql_mode else ()
        status, stderr, sql = _print_grants_into_mariadb("--user", user, "--required-only", client=client)
        assert status == 0, stderr
        assert sql.returncode == 0, sql.stderr
        with admin.cursor() as cursor:
            cursor.execute(f"SHOW GRANTS FOR {account}")
            grants = [row[0] for row in cursor.fetchall()]
        herald = settings.DATABASES["phorge"]["NAME"]
        assert any(f"GRANT SELECT ON `{herald}`.`herald_webhook` TO" in grant for grant in grants), grants
        assert any(f"GRANT SELECT, UPDATE ON `{herald}`.`herald_webhookrequest` TO" in grant for grant in grants)
        assert len(grants) == 3  # USAGE plus the two required grants, nothing else
        assert name in _databases(admin)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS {account}")


@PHORGE_DB
def test_requeue_exits_with_an_error_and_no_traceback_for_a_huge_age(phorge: Any) -> None:
    done = manage(
        "requeue_webhooks", "--since", "99999999999999999999d", "--dry-run", env=worker_env(), ok=False, timeout=60
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "--since '99999999999999999999d' is out of range" in done.stderr


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
