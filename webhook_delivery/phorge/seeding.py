"""Phorge's herald tables and rows as Phorge writes them: the one place that knows their columns and PHIDs.

For the demo, the tests, the bench and the image test, never for the worker or the web side (they only
read and update what Phorge wrote). Pure builders of row dicts, and one insert through any DB-API cursor
with `%s` placeholders: MySQLdb, or Django's cursor on MariaDB or on the demo's SQLite. No ORM model:
Phorge's tables are read-only for this service's models by design.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..sql import PHORGE_SCHEMA
from .phpjson import encode_compact

PHID_ALPHABET = string.ascii_lowercase + "234567"
HOOK_TABLE = "herald_webhook"
REQUEST_TABLE = "herald_webhookrequest"
_INSERT_CHUNK = 1000  # rows per executemany: one statement stays far below max_allowed_packet


def random_phid(kind: str, subtype: str | None = None) -> str:
    """A PHID as Phorge makes one: `PHID-<TYPE>-<20 chars>`, or `PHID-<TYPE>-<SUBTYPE>-<15 chars>` (XACT)."""
    if subtype:
        return f"PHID-{kind}-{subtype}-" + _random_text(15)
    return f"PHID-{kind}-" + _random_text(20)


def random_hmac_key() -> str:
    """A hook's hmacKey as Phorge generates it: 32 characters of its PHID alphabet."""
    return _random_text(32)


def _random_text(length: int) -> str:
    return "".join(secrets.choice(PHID_ALPHABET) for _ in range(length))


def properties(
    *,
    retry: str = "never",
    transactions: Mapping[str, str] | Sequence[str] = (),
    triggers: Sequence[str] = (),
    flags: bool = True,
    **outcome: Any,
) -> str:
    """`properties` as Phorge's editor writes it (phutil_json_encode: compact, `/` escaped, PHP arrays):
    retry, transactionPHIDs, triggerPHIDs, then silent and secure (left out when `flags` is false, as in
    hand-written rows), then `outcome` (errorType, errorCode ...: what an attempt added)."""
    value: dict[str, Any] = {
        "retry": retry,
        "transactionPHIDs": dict(transactions) if isinstance(transactions, Mapping) else list(transactions),
        "triggerPHIDs": list(triggers),
    }
    if flags:
        value.update(silent=False, secure=False)
    return encode_compact({**value, **outcome})


def web_test_properties(viewer_phid: str, transactions: Mapping[str, str]) -> str:
    """`properties` as Phorge's "New Test Request" writes it: the viewer as trigger, transactions keyed by ID."""
    return encode_compact(
        {"retry": "never", "triggerPHIDs": [viewer_phid], "test": True, "transactionPHIDs": dict(transactions)}
    )


def hook_row(
    uri: str,
    *,
    now: int,
    name: str = "hook",
    status: str = "enabled",
    hmac_key: str | None = None,
    phid: str | None = None,
    edit_policy: str = "users",
) -> dict[str, Any]:
    """A herald_webhook row with every column Phorge's INSERT writes (a random PHID and key unless given)."""
    return {
        "phid": phid or random_phid("HWBH"),
        "name": name,
        "webhookURI": uri,
        "viewPolicy": "users",
        "editPolicy": edit_policy,
        "status": status,
        "hmacKey": random_hmac_key() if hmac_key is None else hmac_key,
        "dateCreated": now,
        "dateModified": now,
    }


def request_row(
    webhook_phid: str,
    properties: str,
    *,
    now: int,
    phid: str | None = None,
    object_phid: str | None = None,
    status: str = "queued",
    result: str = "none",
    epoch: int = 0,
    modified: int | None = None,
) -> dict[str, Any]:
    """A herald_webhookrequest row with every column Phorge's INSERT writes; queued and never tried unless
    `status`, `result` and `epoch` say what an attempt left (then `modified` too)."""
    return {
        "phid": phid or random_phid("HWBR"),
        "webhookPHID": webhook_phid,
        "objectPHID": object_phid or random_phid("TASK"),
        "status": status,
        "properties": properties,
        "lastRequestResult": result,
        "lastRequestEpoch": epoch,
        "dateCreated": now,
        "dateModified": now if modified is None else modified,
    }


def insert(cursor: Any, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """INSERT `rows` (each with the first row's columns, in its order) through a DB-API cursor; one row is
    one `execute`, so `cursor.lastrowid` is its id."""
    batch = list(rows)
    if not batch:
        return
    columns = list(batch[0])
    sql = (
        f"INSERT INTO {table} ({', '.join(f'`{column}`' for column in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    if len(batch) == 1:
        cursor.execute(sql, [batch[0][column] for column in columns])
        return
    for start in range(0, len(batch), _INSERT_CHUNK):
        cursor.executemany(sql, [[row[column] for column in columns] for row in batch[start : start + _INSERT_CHUNK]])


def herald_ddl(path: Path = PHORGE_SCHEMA) -> list[str]:
    """The CREATE TABLE statements of a mysqldump file (comments and client directives dropped; only the live
    part, not a commented copy after `-- Dump completed`)."""
    text = path.read_text().split("-- Dump completed", 1)[0]
    statements = []
    for chunk in text.split(";\n"):
        lines = [line for line in chunk.splitlines() if line.strip() and not line.startswith("--")]
        statement = "\n".join(lines).strip()
        if statement.upper().startswith("CREATE TABLE"):
            statements.append(statement)
    return statements


def create_herald_tables(cursor: Any) -> None:
    """Phorge's herald tables from its own DDL, in the cursor's current MariaDB database."""
    for statement in herald_ddl():
        cursor.execute(statement)
