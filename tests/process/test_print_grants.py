"""`manage.py print_grants` piped into a real mariadb client: hostile user and host names refused, the grants
applied as documented."""

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
@pytest.mark.slow
def test_print_grants_web_piped_into_mariadb_gives_the_web_process_select_only(scratch: tuple[Any, str]) -> None:
    """install.md's recipe for the web process's own user: SELECT on the two herald tables, nothing else."""
    admin, _name = scratch
    account = f"'gwtest{PID}_web'@'%'"
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE USER {account} IDENTIFIED BY 'not-used-1234'")
    try:
        status, stderr, sql = _print_grants_into_mariadb("--user", f"gwtest{PID}_web", "--web", "--required-only")
        assert (status, sql.returncode) == (0, 0), stderr + sql.stderr
        with admin.cursor() as cursor:
            cursor.execute(f"SHOW GRANTS FOR {account}")
            grants = sorted(row[0].split(" TO ")[0] for row in cursor.fetchall())
        herald = settings.DATABASES["phorge"]["NAME"]
        assert grants == [
            "GRANT SELECT ON `" + herald + "`.`herald_webhook`",
            "GRANT SELECT ON `" + herald + "`.`herald_webhookrequest`",
            "GRANT USAGE ON *.*",
        ]
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS {account}")
