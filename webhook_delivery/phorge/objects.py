"""PHP's object check and transaction query for the Dispatcher, read-only in Phorge's application databases:
does the request's object still exist, and which of its stored transactions still exist, newest first (the
worker's steps 6 and 7). Reached through databases.py, each read on its application's master; without a
grant, or when the application is on a master of a partitioned Phorge this service cannot reach (its tables
on herald's are empty copies), the stored order is kept. A master that does not answer raises
databases.MasterUnavailable.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from .columns import in_filter
from .databases import (
    UNREADABLE_RECHECK_SEC,
    ConnectionSource,
    Masters,
    NoAccessError,
    OnceLog,
    Route,
    herald_connection,
    qualified,
    select,
)
from .herald import text
from .payload import phid_get_type, stored_values, transactions_newest_first

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectTables:
    """Where Phorge keeps one PHID type: the object's table and its transaction table (app, table)."""

    label: str
    object_app: str
    object_table: str
    xaction_app: str
    xaction_table: str


def _tables(label: str, app: str, object_table: str, xaction_table: str | None = None) -> ObjectTables:
    return ObjectTables(label, app, object_table, app, xaction_table or f"{object_table}_transaction")


# PHID type constant -> tables of the object class and of its getApplicationTransactionTemplate()
# (Phorge 07c1a51310). Only types whose two tables both appear in webhook_delivery/sql/app-schema.sql (or, for
# HWBH, the herald schema) are listed; any other type keeps the stored-order rule.
OBJECT_TABLES: dict[str, ObjectTables] = {
    "TASK": _tables("Maniphest tasks", "maniphest", "maniphest_task", "maniphest_transaction"),
    "DREV": _tables("Differential revisions", "differential", "differential_revision", "differential_transaction"),
    # Commits live in the repository database, their transactions are audit transactions.
    "CMIT": ObjectTables("Diffusion commits", "repository", "repository_commit", "audit", "audit_transaction"),
    "REPO": _tables("Diffusion repositories", "repository", "repository"),
    "PROJ": _tables("projects", "project", "project"),
    "USER": _tables("users", "user", "user"),
    "WIKI": _tables("Phriction documents", "phriction", "phriction_document", "phriction_transaction"),
    "PSTE": _tables("pastes", "paste", "paste"),
    "MOCK": _tables("Pholio mocks", "pholio", "pholio_mock", "pholio_transaction"),
    "FILE": _tables("files", "file", "file"),
    "HWBH": _tables("webhooks", "herald", "herald_webhook", "herald_webhooktransaction"),
    "BDGE": _tables("badges", "badges", "badges_badge", "badges_transaction"),
    "CONP": _tables("Conpherence rooms", "conpherence", "conpherence_thread", "conpherence_transaction"),
    "CDWN": _tables("countdowns", "countdown", "countdown"),
    "DSHB": _tables("dashboards", "dashboard", "dashboard"),
    "LEGD": _tables("Legalpad documents", "legalpad", "legalpad_document", "legalpad_transaction"),
    "POLL": _tables("Slowvote polls", "slowvote", "slowvote_poll", "slowvote_transaction"),
}


class PhorgeObjects:
    """The ObjectLookup of the Dispatcher: PHP's object check and transaction query, read-only."""

    def __init__(
        self, namespace: str, *, connection: ConnectionSource | None = None, masters: Masters | None = None
    ) -> None:
        self.namespace = namespace
        self.masters = masters or Masters.single(namespace, connection or herald_connection)
        self.partitions = self.masters.partitions
        self._logged = OnceLog()
        self._unreadable: dict[str, float] = {}

    def _route(self, app: str, tables: ObjectTables) -> Route:
        """Where `app`'s tables are read; a master this service cannot reach is said once per application."""
        route = self.masters.route(app)
        if route.source is None and self._logged.first(f"elsewhere {app}"):
            logger.warning(
                f"Phorge's {app} application is on another master ({route.master}) than herald's, which this "
                f"service cannot reach: its tables are not read, and for {tables.label} the stored transactions "
                "are sent, newest first, unchecked",
                extra={"event": "objects.app_elsewhere", "application": app, "master": route.master},
            )
        return route

    def _known_unreadable(self, table: str) -> bool:
        return self._unreadable.get(table, 0.0) > time.monotonic()

    def transactions(self, object_phid: str, stored: Any) -> list[Any] | None:
        phid_type = phid_get_type(object_phid)
        tables = OBJECT_TABLES.get(phid_type)
        if tables is None:
            if self._logged.first(f"type {phid_type}"):
                logger.info(
                    "no object lookup for this PHID type: its stored transactions are sent, newest first, unchecked",
                    extra={"event": "objects.type_unchecked", "phid_type": phid_type},
                )
            return transactions_newest_first(stored)
        objects = qualified(self.namespace, tables.object_app, tables.object_table)
        route = self._route(tables.object_app, tables)
        if self._known_unreadable(objects) or route.source is None:
            return transactions_newest_first(stored)
        try:
            found = select(
                route.source, f"SELECT 1 AS found FROM {objects} WHERE phid = %(phid)s LIMIT 1", {"phid": object_phid}
            )
        except NoAccessError as exc:
            return self._fall_back(objects, tables, phid_type, exc, stored, objects_checked=False)
        if not found:
            return None
        wanted = list(dict.fromkeys(value for value in stored_values(stored) if isinstance(value, str)))
        if not wanted:
            return []
        xactions = qualified(self.namespace, tables.xaction_app, tables.xaction_table)
        route = self._route(tables.xaction_app, tables)
        if self._known_unreadable(xactions) or route.source is None:
            return transactions_newest_first(stored)
        listed, params = in_filter("phid", wanted, "xaction")
        try:
            rows = select(
                route.source,
                f"SELECT phid FROM {xactions} WHERE objectPHID = %(object)s AND {listed} ORDER BY id DESC",
                {"object": object_phid, **params},
            )
        except NoAccessError as exc:
            return self._fall_back(xactions, tables, phid_type, exc, stored, objects_checked=True)
        return [text(row["phid"]) for row in rows]

    def _fall_back(
        self,
        table: str,
        tables: ObjectTables,
        phid_type: str,
        exc: NoAccessError,
        stored: Any,
        *,
        objects_checked: bool,
    ) -> list[Any]:
        # Don't pay a failing round trip per delivery: look again only after a while (grants change).
        self._unreadable[table] = time.monotonic() + UNREADABLE_RECHECK_SEC
        if exc.code is None:
            if self._logged.first("no mysql"):
                logger.info(
                    "Phorge's application databases are not on this database server: "
                    "the stored transactions are sent, newest first, unchecked, and objects are not checked",
                    extra={"event": "objects.databases_elsewhere"},
                )
        elif self._logged.first(f"table {table}"):
            lost = "" if objects_checked else ", and deleted objects are not detected"
            logger.warning(
                f"cannot read {table} (no SELECT grant, or no such table): for {tables.label}, the stored "
                f"transactions are sent, newest first, unchecked{lost}",
                extra={"event": "objects.table_unreadable", "phid_type": phid_type, "mysql_error": exc.code},
            )
        return transactions_newest_first(stored)
