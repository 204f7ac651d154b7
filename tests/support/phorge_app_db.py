"""Phorge's application databases (maniphest, worker, config, ...) for tests, from webhook_delivery/sql/app-schema.sql.

Each CREATE TABLE in the fixture is preceded by `-- database: phabricator_<app>`; `AppDatabases` creates
`<namespace>_<app>` databases with those tables beside the test herald database and drops exactly what
it created. The herald database itself belongs to conftest: only missing tables are added to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook_delivery.phorge.seeding import random_phid
from webhook_delivery.sql import PHORGE_APP_SCHEMA

APP_SCHEMA = PHORGE_APP_SCHEMA
_BLOCK = re.compile(r"^-- database: phabricator_(\w+)\n(CREATE TABLE `(\w+)` .*?);$", re.MULTILINE | re.DOTALL)
# Phorge's standard modular-transaction table (behaviour reference §1.5); the fixture has no herald copy.
_XACTION_TEMPLATE = ("config", "config_transaction")
EXTRA_TABLES = {("herald", "herald_webhooktransaction"): _XACTION_TEMPLATE}
# resources/sql/autopatches/20161121.cluster.01.hoststate.sql (not a Lisk table; on every master).
HOSTSTATE_DDL = (
    "CREATE TABLE `hoststate` (\n"
    "  stateKey VARCHAR(128) NOT NULL COLLATE utf8mb4_bin,\n"
    "  stateValue LONGTEXT NOT NULL COLLATE utf8mb4_bin,\n"
    "  PRIMARY KEY (stateKey)\n"
    ") ENGINE=InnoDB, COLLATE utf8mb4_bin"
)


def app_schema(path: Path = APP_SCHEMA) -> dict[tuple[str, str], str]:
    """(app, table) -> CREATE TABLE statement, in file order."""
    tables = {(app, table): ddl for app, ddl, table in _BLOCK.findall(path.read_text())}
    for (app, table), (template_app, template) in EXTRA_TABLES.items():
        tables[(app, table)] = tables[(template_app, template)].replace(f"`{template}`", f"`{table}`", 1)
    tables[("meta_data", "hoststate")] = HOSTSTATE_DDL
    return tables


def php_json_encode(value: Any) -> str:
    """PHP's json_encode() with no flags, as phutil_json_encode: compact, `/` as `\\/`, non-ASCII as \\uXXXX."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).replace("/", "\\/")


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class AppDatabases:
    """Creates and drops `<namespace>_<app>` databases through an autocommit admin connection."""

    admin: Any
    namespace: str
    created_databases: list[str] = field(default_factory=list)
    created_tables: list[str] = field(default_factory=list)

    def execute(self, sql: str, params: Any = None) -> Any:
        with self.admin.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else cursor.rowcount

    def database(self, app: str) -> str:
        return f"{self.namespace}_{app}"

    def table(self, app: str, table: str) -> str:
        return f"{quote(self.database(app))}.{quote(table)}"

    def _exists(self, database: str) -> bool:
        return bool(self.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (database,)))

    def create(self, apps: Iterable[str] | None = None) -> None:
        wanted = None if apps is None else set(apps)
        for (app, table), ddl in app_schema().items():
            if wanted is not None and app not in wanted:
                continue
            database = self.database(app)
            if database not in self.created_databases and not self._exists(database):
                self.execute(f"CREATE DATABASE {quote(database)} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
                self.created_databases.append(database)
            if database in self.created_databases:
                self.execute(f"USE {quote(database)}")
                self.execute(ddl)
            elif not self.execute(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (database, table),
            ):
                self.execute(f"USE {quote(database)}")
                self.execute(ddl)
                self.created_tables.append(self.table(app, table))

    def drop(self) -> None:
        for table in reversed(self.created_tables):
            self.execute(f"DROP TABLE IF EXISTS {table}")
        for database in reversed(self.created_databases):
            self.execute(f"DROP DATABASE IF EXISTS {quote(database)}")
        self.created_tables.clear()
        self.created_databases.clear()

    def partition_map(self, databases: list[dict[str, Any]] | None) -> None:
        """Record `cluster.databases` in hoststate as `bin/storage partition` does (passwords left out);
        None removes the row."""
        table = self.table("meta_data", "hoststate")
        if databases is None:
            self.execute(f"DELETE FROM {table} WHERE stateKey = 'cluster.databases'")
            return
        state = php_json_encode([{k: v for k, v in entry.items() if k != "pass"} for entry in databases])
        self.execute(
            f"INSERT INTO {table} (stateKey, stateValue) VALUES (%s, %s) "
            "ON DUPLICATE KEY UPDATE stateValue = VALUES(stateValue)",
            ("cluster.databases", state),
        )

    def truncate(self, app: str, table: str) -> None:
        self.execute(f"DELETE FROM {self.table(app, table)}")

    # -- rows the way Phorge writes them ------------------------------------------------------------

    def insert(self, app: str, table: str, row: dict[str, Any]) -> int:
        columns = ", ".join(quote(c) for c in row)
        marks = ", ".join(["%s"] * len(row))
        with self.admin.cursor() as cursor:
            cursor.execute(f"INSERT INTO {self.table(app, table)} ({columns}) VALUES ({marks})", list(row.values()))
            return int(cursor.lastrowid or 0)

    def task(self, phid: str | None = None, title: str = "a task") -> str:
        """A minimal maniphest_task row (every NOT NULL column filled)."""
        phid = phid or random_phid("TASK")
        now = int(self.execute("SELECT UNIX_TIMESTAMP()")[0][0])
        self.insert(
            "maniphest",
            "maniphest_task",
            {
                "phid": phid,
                "authorPHID": random_phid("USER"),
                "ownerPHID": None,
                "status": "open",
                "priority": 90,
                "title": title,
                "description": "",
                "dateCreated": now,
                "dateModified": now,
                "mailKey": "a" * 20,
                "viewPolicy": "users",
                "editPolicy": "users",
                "spacePHID": None,
                "points": None,
                "subtype": "default",
                "closerPHID": None,
                "closedEpoch": None,
                "properties": "{}",
                "subpriority": 0,
                "bridgedObjectPHID": None,
            },
        )
        return phid

    def user(self, phid: str | None = None, name: str = "alice") -> str:
        """A minimal `user` row (every NOT NULL column filled)."""
        phid = phid or random_phid("USER")
        now = int(self.execute("SELECT UNIX_TIMESTAMP()")[0][0])
        self.insert(
            "user",
            "user",
            {
                "phid": phid,
                "userName": name,
                "realName": name.title(),
                "dateCreated": now,
                "dateModified": now,
                "conduitCertificate": "",
                "isDisabled": 0,
                "isAdmin": 0,
                "isEmailVerified": 1,
                "isApproved": 1,
                "accountSecret": b"s" * 64,
                "isMailingList": 0,
            },
        )
        return phid

    def transaction(
        self, app: str, table: str, object_phid: str, *, row_id: int | None = None, phid: str | None = None
    ) -> str:
        """A modular-transaction row for `object_phid`; `row_id` fixes its id (and so its order)."""
        phid = phid or random_phid("XACT", object_phid.split("-")[1])
        now = int(self.execute("SELECT UNIX_TIMESTAMP()")[0][0])
        row: dict[str, Any] = {} if row_id is None else {"id": row_id}
        row.update(
            {
                "phid": phid,
                "authorPHID": random_phid("USER"),
                "objectPHID": object_phid,
                "viewPolicy": "public",
                "editPolicy": "users",
                "commentPHID": None,
                "commentVersion": 0,
                "transactionType": "core:create",
                "oldValue": "null",
                "newValue": "true",
                "contentSource": "{}",
                "metadata": "{}",
                "dateCreated": now,
                "dateModified": now,
            }
        )
        self.insert(app, table, row)
        return phid

    def config(self, key: str, value: str, *, deleted: bool = False, namespace: str = "default") -> None:
        """Set (insert or replace) a config_entry row as Phorge's config editor stores it: JSON text."""
        now = int(self.execute("SELECT UNIX_TIMESTAMP()")[0][0])
        self.execute(
            f"DELETE FROM {self.table('config', 'config_entry')} WHERE namespace = %s AND configKey = %s",
            (namespace, key),
        )
        self.insert(
            "config",
            "config_entry",
            {
                "phid": random_phid("CONF"),
                "namespace": namespace,
                "configKey": key,
                "value": value,
                "isDeleted": int(deleted),
                "dateCreated": now,
                "dateModified": now,
            },
        )

    def worker_task(
        self,
        *,
        archived: bool = False,
        task_class: str = "HeraldWebhookWorker",
        lease_owner: str | None = None,
        lease_expires: int | None = None,
        result: int = 0,
        age: int = 0,
        object_phid: str | None = None,
        at: int | None = None,
    ) -> int:
        """A worker_activetask (or worker_archivetask) row, `age` seconds old (or written `at` that time), ids
        shared like Phorge's."""
        now = (int(self.execute("SELECT UNIX_TIMESTAMP()")[0][0]) if at is None else at) - age
        task_id = int(
            self.execute(
                f"SELECT COALESCE(MAX(id), 0) + 1 FROM (SELECT id FROM {self.table('worker', 'worker_activetask')} "
                f"UNION ALL SELECT id FROM {self.table('worker', 'worker_archivetask')}) AS ids"
            )[0][0]
        )
        row: dict[str, Any] = {
            "id": task_id,
            "taskClass": task_class,
            "leaseOwner": lease_owner,
            "leaseExpires": lease_expires,
            "failureCount": 0,
            "dataID": task_id,
            "priority": 2000,
            "objectPHID": object_phid or random_phid("HWBR"),
            "dateCreated": now,
            "dateModified": now,
            "containerPHID": None,
        }
        if archived:
            row.update({"result": result, "duration": 1000, "archivedEpoch": now})
            self.insert("worker", "worker_archivetask", row)
        else:
            row["failureTime"] = None
            self.insert("worker", "worker_activetask", row)
        return task_id
