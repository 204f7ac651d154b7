"""`make demo` works in a fresh copy of the checkout, twice, and says what really happened.

The demo runs the real `deliver_webhooks --once` against SQLite; these tests read its summary, check it
against the demo database itself, and check the pieces it is made of (the DDL translation, the blacklist).

Here: what needs no database and no server process; the rest is in tests/process/test_demo.py."""

from __future__ import annotations

import ipaddress
import sqlite3

import pytest

from webhook_delivery.config import default_blacklist
from webhook_delivery.demo.runner import demo_blacklist
from webhook_delivery.demo.sqlite_schema import UnsupportedDDLError, translate
from webhook_delivery.sql import PHORGE_SCHEMA

SCHEMA = PHORGE_SCHEMA.read_text()


def mariadb_columns(table: str) -> list[tuple[str, bool]]:
    body = SCHEMA.split(f"CREATE TABLE `{table}` (", 1)[1].split("\n)", 1)[0]
    return [(line.split("`")[1], "NOT NULL" in line) for line in body.splitlines() if line.strip().startswith("`")]


def sqlite_with_phorge_tables() -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    for statement in translate(SCHEMA):
        connection.execute(statement)
    return connection


def test_translated_tables_have_phorges_columns_in_order() -> None:
    connection = sqlite_with_phorge_tables()
    for table in ("herald_webhook", "herald_webhookrequest"):
        info = connection.execute(f"PRAGMA table_info({table})").fetchall()
        assert [(row[1], bool(row[3]) or bool(row[5])) for row in info] == mariadb_columns(table)


def test_translated_tables_keep_phorges_keys_and_limits() -> None:
    connection = sqlite_with_phorge_tables()
    indexes = {row[1]: row[2] for row in connection.execute("PRAGMA index_list(herald_webhookrequest)")}
    assert indexes == {
        "herald_webhookrequest_key_phid": 1,
        "herald_webhookrequest_key_ratelimit": 0,
        "herald_webhookrequest_key_collect": 0,
    }
    row = ("PHID-HWBR-a", "PHID-HWBH-a", "PHID-TASK-a", "queued", "{}", "none", 0, 1, 1)
    insert = (
        "INSERT INTO herald_webhookrequest (phid, webhookPHID, objectPHID, status, properties, lastRequestResult, "
        "lastRequestEpoch, dateCreated, dateModified) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    connection.execute(insert, row)
    for broken in (
        row,  # duplicate phid (key_phid is unique)
        ("PHID-HWBR-b", *row[1:6], -1, 1, 1),  # int(10) unsigned
        ("PHID-HWBR-c", *row[1:3], "q" * 33, *row[4:]),  # varchar(32)
        ("PHID-HWBR-d", None, *row[2:]),  # NOT NULL
    ):
        with pytest.raises(sqlite3.IntegrityError):
            connection.execute(insert, broken)
    assert connection.execute("SELECT id FROM herald_webhookrequest").fetchall() == [(1,)]


def test_translation_refuses_what_it_does_not_know() -> None:
    with pytest.raises(UnsupportedDDLError):
        translate("CREATE TABLE `t` (\n  `doc` json NOT NULL\n) ENGINE=InnoDB;")
    with pytest.raises(UnsupportedDDLError):
        translate("nothing to see")


def test_demo_blacklist_is_phorges_default_without_loopback() -> None:
    networks = [ipaddress.ip_network(n) for n in demo_blacklist()]
    assert ipaddress.ip_network("127.0.0.0/8") not in networks
    assert ipaddress.ip_network("169.254.0.0/16") in networks
    assert set(default_blacklist()) - set(networks) == {ipaddress.ip_network("127.0.0.0/8")}
