"""Helpers of the suite: Phorge's herald tables seeded (through webhook_delivery.phorge.seeding) and read the way
Phorge writes them, an admin connection to the test server (tests/testdb.py), and the environment of the
worker processes. Fixtures live in conftest.py."""

from __future__ import annotations

import os
import re
from typing import Any

import MySQLdb
import pytest
from django.conf import settings
from django.db import connections

from tests import testdb
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.herald import RequestRow
from webhook_delivery.phorge.seeding import PHID_ALPHABET as PHID_ALPHABET  # the suite's PHIDs are Phorge's
from webhook_delivery.phorge.seeding import random_phid as random_phid


def mysql_admin(database: str | None = None) -> Any:
    server = testdb.server()
    try:
        connection = server.connect(database)
    except MySQLdb.OperationalError as exc:
        pytest.exit(
            f"No MariaDB/MySQL answers at {server.host}:{server.port} as {server.user!r} ({exc.args[0]}). "
            "Start one (make test starts a private server when mariadbd is installed) or set "
            "GORGE_TEST_DATABASE_URL to a server where this user may create databases.",
            returncode=3,
        )
    return connection


THROWAWAY = re.compile(r"gwtest[0-9]+_herald")


def throwaway_name(name: str) -> bool:
    """Only a name the suite generated (tests/settings.py) may ever be created or dropped by it."""
    return THROWAWAY.fullmatch(name) is not None


class Phorge:
    """Seeds and reads Phorge's herald tables the way Phorge itself writes them."""

    def __init__(self) -> None:
        self.connection = connections["phorge"]

    def execute(self, sql: str, params: Any = ()) -> Any:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else cursor.rowcount

    def now(self) -> int:
        return int(self.execute("SELECT UNIX_TIMESTAMP()")[0][0])

    def clear(self) -> None:
        self.execute("DELETE FROM herald_webhookrequest")
        self.execute("DELETE FROM herald_webhook")

    def insert_hook_row(self, row: dict[str, Any]) -> None:
        with self.connection.cursor() as cursor:
            seeding.insert(cursor, seeding.HOOK_TABLE, [row])

    def insert_request_row(self, row: dict[str, Any]) -> None:
        with self.connection.cursor() as cursor:
            seeding.insert(cursor, seeding.REQUEST_TABLE, [row])

    def hook(self, uri: str, *, status: str = "enabled", key: str | None = None, name: str = "hook") -> str:
        row = seeding.hook_row(uri, now=self.now(), name=name, status=status, hmac_key=key)
        self.insert_hook_row(row)
        return str(row["phid"])

    def request(
        self,
        hook_phid: str,
        *,
        retry: str = "never",
        object_phid: str | None = None,
        properties: str | None = None,
        created: int | None = None,
        status: str = "queued",
        **columns: Any,
    ) -> str:
        when = self.now() if created is None else created
        text = seeding.properties(retry=retry, triggers=[hook_phid]) if properties is None else properties
        row = seeding.request_row(hook_phid, text, now=when, object_phid=object_phid, status=status)
        row.update(columns)
        self.insert_request_row(row)
        return str(row["phid"])

    def row(self, phid: str) -> dict[str, Any]:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT * FROM herald_webhookrequest WHERE phid = %s", (phid,))
            names = [d[0] for d in cursor.description]
            values = cursor.fetchone()
        assert values is not None, f"no request {phid}"
        return {
            name: value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            for name, value in zip(names, values, strict=True)
        }

    def snapshot(self, phid: str) -> RequestRow:
        return as_request_row(self.row(phid))

    def rows(self) -> list[dict[str, Any]]:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT phid FROM herald_webhookrequest ORDER BY id")
            phids = [p.decode() if isinstance(p, bytes) else p for (p,) in cursor.fetchall()]
        return [self.row(p) for p in phids]


def as_request_row(row: dict[str, Any]) -> RequestRow:
    """A herald_webhookrequest row (as Phorge.row() returns it) as the worker reads it."""
    return RequestRow(
        id=row["id"],
        phid=row["phid"],
        webhook_phid=row["webhookPHID"],
        object_phid=row["objectPHID"],
        status=row["status"],
        last_result=row["lastRequestResult"],
        last_epoch=row["lastRequestEpoch"],
        date_created=row["dateCreated"],
        date_modified=row["dateModified"],
        properties=row["properties"],
    )


PHORGE_DB = pytest.mark.django_db(transaction=True, databases=["default", "phorge"])


def viewer(user_model: Any, username: str = "operator", password: str = "pw-operator-1") -> Any:  # noqa: S107
    """A staff account that may see the delivery pages: is_staff and the view permission on requests."""
    from django.contrib.auth.models import Permission

    user = user_model.objects.create_user(username, password=password, is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="webhook_delivery", codename="view_heraldwebhookrequest")
    )
    return user


def worker_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "gorge_site.settings"  # the production settings, as deployed
    env["GORGE_WEBHOOK_DATABASE_URL"] = _phorge_url()
    env.update(overrides)
    return env


def _phorge_url() -> str:
    return testdb.server().url(str(settings.DATABASES["phorge"]["NAME"]))


# Debian's chromium, started the way this machine's closed network wants it (no background connections).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
