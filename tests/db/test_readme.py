"""The README stays true: its two set-up commands are what CI runs, every setting is documented, every
command and file it names exists, and its grant recipe gives exactly the documented privileges.

Here: what runs on Django's test databases; the rest is in tests/unit/test_readme.py."""

from __future__ import annotations

import re
import secrets

import MySQLdb
import pytest
from django.conf import settings

from tests.support import ROOT
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin


@PHORGE_DB
def test_grants_script_gives_exactly_the_documented_privileges(phorge: Phorge) -> None:
    database = settings.DATABASES["phorge"]["NAME"]
    namespace = database.removesuffix("_herald")
    user, password = f"gw_grants_{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    script = (ROOT / "scripts/grants.sql").read_text()
    for placeholder, value in (("@NAMESPACE@", namespace), ("@USER@", user), ("@HOST@", "%"), ("@PASSWORD@", password)):
        script = script.replace(placeholder, value)
    assert "@" not in script.replace(f"'{user}'@'%'", ""), "a placeholder was left over"
    statements = [s.strip() for s in re.sub(r"^--.*$", "", script, flags=re.MULTILINE).split(";") if s.strip()]
    admin = mysql_admin()
    cursor = admin.cursor()
    try:
        for statement in statements:
            cursor.execute(statement)
        cursor.execute(f"SHOW GRANTS FOR '{user}'@'%'")
        grants = sorted(row[0] for row in cursor.fetchall())
        usage = [grant for grant in grants if grant.startswith(f"GRANT USAGE ON *.* TO `{user}`@`%`")]
        assert len(usage) == 1, grants
        assert [grant for grant in grants if grant not in usage] == [
            f"GRANT SELECT ON `{database}`.`herald_webhook` TO `{user}`@`%`",
            f"GRANT SELECT, UPDATE ON `{database}`.`herald_webhookrequest` TO `{user}`@`%`",
        ]
        hook = phorge.hook("https://example.invalid/hook")
        request = phorge.request(hook)
        db = settings.DATABASES["phorge"]
        restricted = MySQLdb.connect(
            host=db["HOST"], port=int(db["PORT"]), user=user, password=password, database=database, autocommit=True
        )
        try:
            as_user = restricted.cursor()
            as_user.execute("SELECT COUNT(*) FROM herald_webhook")
            assert as_user.fetchone() == (1,)
            as_user.execute(
                "UPDATE herald_webhookrequest SET dateModified = dateModified + 1 WHERE phid = %s", (request,)
            )
            assert as_user.rowcount == 1
            for forbidden in (
                "DELETE FROM herald_webhookrequest",
                "UPDATE herald_webhook SET name = 'x'",
                "CREATE TABLE gw_nope (id int)",
                f"INSERT INTO herald_webhookrequest SELECT * FROM herald_webhookrequest WHERE phid = '{request}'",
            ):
                with pytest.raises(MySQLdb.OperationalError) as denied:
                    as_user.execute(forbidden)
                assert denied.value.args[0] in {1142, 1044}, forbidden  # command denied / access denied
        finally:
            restricted.close()
    finally:
        cursor.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        admin.close()
