"""Helpers of the suite: Phorge's herald tables seeded (through webhook_delivery.phorge.seeding) and read the way
Phorge writes them, an admin connection to the test server (tests/support/testdb.py), and the environment of the
worker processes. Fixtures live in conftest.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import MySQLdb
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from tests.support import testdb
from tests.support.arcanist import arcanist_tree
from tests.support.waiting import wait_for
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

    def next_second(self) -> int:
        """Waits until Phorge's database clock (whole seconds) has moved past the second it reads now, and
        returns the new second: what a newer observation than the last one needs."""
        start = self.now()
        return wait_for(lambda: (now := self.now()) > start and now, 5, "Phorge's clock to move on", every=0.05)

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


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The documented production environment: DEBUG unset, a long random key, real host names, Phorge's
    install mounted as Phorge's docs lay it out (phorge/ with the local.json `bin/config set` leaves, and
    arcanist/ beside it, where the CA bundle PHP uses is)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GORGE_", "DJANGO_", "DEBUG"))}
    local = tmp_path / "phorge" / "conf" / "local" / "local.json"
    local.parent.mkdir(parents=True, exist_ok=True)
    arcanist_tree(tmp_path)
    local.write_text('{\n    "mysql.host": "db",\n    "phabricator.base-uri": "https://phorge.example.org/"\n}\n')
    env.update(
        GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG=str(local),
        DJANGO_SETTINGS_MODULE="gorge_site.settings",
        GORGE_ENV_FILE="/dev/null",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="webhooks.example.org",
        DATABASE_URL=f"sqlite:///{tmp_path / 'site.sqlite3'}",
    )
    env.update(extra)
    return env


@contextlib.contextmanager
def phorge_unreachable() -> Iterator[None]:
    """Point the phorge alias at a closed local port for the duration (override_settings cannot)."""
    connection = connections["phorge"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    saved = {key: connection.settings_dict[key] for key in ("HOST", "PORT")}
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def write_local(path: Path, values: dict[str, Any]) -> None:
    """As `bin/config set` leaves conf/local/local.json: PhutilJSON's formatted object (4-space indent)."""
    path.write_text(json.dumps(values, indent=4) + "\n" if values else "[]\n")


def holds(*args: str) -> str:
    out = io.StringIO()
    call_command("hold_webhooks", *args, stdout=out)
    return out.getvalue()


def raw_rows(phorge: Phorge, hook: str) -> list[tuple[Any, ...]]:
    """Every column of the hook's requests, as the driver returns them (bytes for Phorge's binary columns)."""
    return list(phorge.execute("SELECT * FROM herald_webhookrequest WHERE webhookPHID = %s ORDER BY id", (hook,)))


def requeue(*args: str) -> str:
    out = io.StringIO()
    call_command("requeue_webhooks", *args, stdout=out)
    return out.getvalue()


def failed(
    phorge: Phorge, hook: str, *, error: str = '"errorType":"http","errorCode":503', ago: int = 60, **kw: Any
) -> str:
    """A request Phorge marked failed `ago` seconds ago, after an attempt (or, with result none, without)."""
    at = phorge.now() - ago
    result = kw.pop("result", "fail")
    properties = kw.pop("properties", '{"retry":"never","transactionPHIDs":[],"triggerPHIDs":[],' + error + "}")
    return phorge.request(
        hook,
        status="failed",
        properties=properties,
        lastRequestResult=result,
        lastRequestEpoch=at if result == "fail" else 0,
        dateModified=at,
        **kw,
    )


XACTIONS = 165_000  # about 6.6 MB of properties per row, as in the review


def big_properties(seed: int) -> str:
    xactions = {str(i): f"PHID-XACT-TASK-{seed:05d}{i:010d}" for i in range(XACTIONS)}
    return json.dumps(
        {"retry": "never", "transactionPHIDs": xactions, "triggerPHIDs": [], "silent": False, "secure": False},
        separators=(",", ":"),
    )


def with_event(entries: Iterable[Any], *events: str) -> list[Any]:
    """The log entries that carry one of these event keys (`extra={"event": ...}`): caplog's records, or the
    JSON lines of a worker process (WorkerProcess.lines())."""
    return [
        entry
        for entry in entries
        if (entry.get("event") if isinstance(entry, dict) else getattr(entry, "event", None)) in events
    ]
