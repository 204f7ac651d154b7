"""Read-only views into Phorge's other application databases, beside the herald one.

What Phorge's PHP worker knows and an out-of-process deliverer has to look up:

* `PhorgeObjects`: does the request's object still exist, and which of its stored transactions still
  exist, newest first (the worker's steps 6 and 7);
* Phorge's own settings (`phabricator.silent`, ...), from its config database: phorge_config.py;
* `PhpWorkerGuard`: is Phorge's own PHP daemon still running `HeraldWebhookWorker` tasks.

Everything is a SELECT on `<namespace>_<app>`.`<table>` through the herald connection (default alias
PHORGE_ALIAS), so the same MariaDB user needs an extra grant for each; `grants_sql()` prints them. Without a
grant (or on SQLite, where none of these databases exist) each feature degrades to what the project did
without it and says so once in the log. Any other database error propagates as django.db.DatabaseError
so the worker's outage handling keeps the request queued.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections

from . import metrics
from .config import NAMESPACE_RE, PHORGE_ALIAS
from .herald import text
from .payload import phid_get_type, stored_values, transactions_newest_first
from .state import PhpDeliveryState, PhpState

logger = logging.getLogger(__name__)

# MariaDB/MySQL errors that mean "this user cannot read that table" rather than "the database is down":
# table/column access denied, database access denied, unknown database, no such table.
NO_ACCESS_ERRORS = frozenset({1044, 1049, 1142, 1143, 1146})

WEBHOOK_TASK_CLASS = "HeraldWebhookWorker"
ARCHIVE_RESULT_CANCELLED = 2  # PhabricatorWorkerArchiveTask::RESULT_CANCELLED (bin/worker cancel)
RECENT_ARCHIVE_SEC = 15 * 60
ACTIVE_ARCHIVE_SEC = 60
CACHE_SEC = 5.0

_GAUGE_VALUE = {"active": 1, "recent": 0, "idle": 0, "unknown": -1}

# A connection lent for one statement: the worker's session pool, or the calling thread's own connection.
ConnectionSource = Callable[[], AbstractContextManager[Any]]


UNREADABLE_RECHECK_SEC = 60.0


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


def qualified(namespace: str, app: str, table: str) -> str:
    if not NAMESPACE_RE.match(namespace):
        raise ValueError(f"invalid Phorge namespace {namespace!r}")
    return f"`{namespace}_{app}`.`{table}`"


def _error_code(exc: DatabaseError) -> int | None:
    code = exc.args[0] if exc.args else None
    return code if isinstance(code, int) else None


def _default_connection() -> AbstractContextManager[Any]:
    return nullcontext(connections[PHORGE_ALIAS])


class _OnceLog:
    """Logs each key once per process, from any thread."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def first(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._seen)


class _NoAccessError(Exception):
    def __init__(self, code: int | None) -> None:
        super().__init__(code)
        self.code = code


def _select(source: ConnectionSource, sql: str, params: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Run one SELECT; raise _NoAccessError when the table cannot be read, DatabaseError for anything else."""
    # A refused SELECT is answered inside the borrowed connection's block: the connection is fine, and a pool
    # that saw the error would close it and pay a reconnect on the next read.
    with source() as connection:
        if connection.vendor != "mysql":
            raise _NoAccessError(None)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, list(params))
                return list(cursor.fetchall())
        except DatabaseError as exc:
            code = _error_code(exc)
            if code in NO_ACCESS_ERRORS:
                raise _NoAccessError(code) from exc
            raise


class PhorgeObjects:
    """The ObjectLookup of the Dispatcher: PHP's object check and transaction query, read-only."""

    def __init__(self, namespace: str, *, connection: ConnectionSource | None = None) -> None:
        self.namespace = namespace
        self._connection = connection or _default_connection
        self._logged = _OnceLog()
        self._unreadable: dict[str, float] = {}

    def _known_unreadable(self, table: str) -> bool:
        return self._unreadable.get(table, 0.0) > time.monotonic()

    def transactions(self, object_phid: str, stored: Any) -> list[Any] | None:
        phid_type = phid_get_type(object_phid)
        tables = OBJECT_TABLES.get(phid_type)
        if tables is None:
            if self._logged.first(f"type {phid_type}"):
                logger.info(
                    "no object lookup for this PHID type: its stored transactions are sent, newest first, unchecked",
                    extra={"phid_type": phid_type},
                )
            return transactions_newest_first(stored)
        connection = self._connection
        objects = qualified(self.namespace, tables.object_app, tables.object_table)
        if self._known_unreadable(objects):
            return transactions_newest_first(stored)
        try:
            found = _select(connection, f"SELECT 1 FROM {objects} WHERE phid = %s LIMIT 1", [object_phid])
        except _NoAccessError as exc:
            return self._fall_back(objects, tables, phid_type, exc, stored, objects_checked=False)
        if not found:
            return None
        wanted = list(dict.fromkeys(value for value in stored_values(stored) if isinstance(value, str)))
        if not wanted:
            return []
        xactions = qualified(self.namespace, tables.xaction_app, tables.xaction_table)
        if self._known_unreadable(xactions):
            return transactions_newest_first(stored)
        marks = ", ".join(["%s"] * len(wanted))
        try:
            rows = _select(
                connection,
                f"SELECT phid FROM {xactions} WHERE objectPHID = %s AND phid IN ({marks}) ORDER BY id DESC",
                [object_phid, *wanted],
            )
        except _NoAccessError as exc:
            return self._fall_back(xactions, tables, phid_type, exc, stored, objects_checked=True)
        return [text(phid) for (phid,) in rows]

    def _fall_back(
        self,
        table: str,
        tables: ObjectTables,
        phid_type: str,
        exc: _NoAccessError,
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
                    "the stored transactions are sent, newest first, unchecked, and objects are not checked"
                )
        elif self._logged.first(f"table {table}"):
            lost = "" if objects_checked else ", and deleted objects are not detected"
            logger.warning(
                f"cannot read {table} (no SELECT grant, or no such table): for {tables.label}, the stored "
                f"transactions are sent, newest first, unchecked{lost}",
                extra={"phid_type": phid_type, "mysql_error": exc.code},
            )
        return transactions_newest_first(stored)


class PhpWorkerGuard:
    """Whether Phorge's PHP daemon is (still) delivering webhooks: the handover check.

    "active": HeraldWebhookWorker tasks are queued or leased in Phorge (phd will run them), or phd
    finished one in the last minute. "recent": phd finished one in the last 15 minutes (`last_delivery`
    says when; tasks cancelled with `bin/worker cancel` do not count). "idle": neither. "unknown": the
    worker tables cannot be read (never reported as idle).

    `live_tasks()` names the requests that still have such a task: those are PHP's to deliver.
    """

    def __init__(
        self,
        namespace: str,
        *,
        connection: ConnectionSource | None = None,
        ttl: float = CACHE_SEC,
        recent_sec: int = RECENT_ARCHIVE_SEC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.active_table = qualified(namespace, "worker", "worker_activetask")
        self.archive_table = qualified(namespace, "worker", "worker_archivetask")
        self.recent_sec = recent_sec
        self._connection = connection or _default_connection
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, PhpDeliveryState] | None = None
        self._reported: str | None = None
        self._unreadable_until = 0.0

    def active_sql(self) -> str:
        # key `taskClass`; "leased" = claimed by a phd worker whose lease has not run out.
        return (
            "SELECT COUNT(*), COALESCE(SUM(leaseOwner IS NOT NULL AND leaseExpires > UNIX_TIMESTAMP()), 0), "
            f"UNIX_TIMESTAMP() FROM {self.active_table} WHERE taskClass = %s"
        )

    def archive_sql(self) -> str:
        # key `key_modified`: archiving inserts the row, so dateModified is the time phd finished it.
        return (
            f"SELECT COUNT(*), MAX(dateModified) FROM {self.archive_table} "
            "WHERE dateModified >= UNIX_TIMESTAMP() - %s AND taskClass = %s AND result <> %s"
        )

    def state(self) -> PhpDeliveryState:
        """{"state", "active_tasks", "leased_tasks", "recently_archived", "last_delivery", "detail"},
        cached a few seconds."""
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self._ttl:
                return PhpDeliveryState(**self._cached[1])
            state = self._read()
            self._cached = (now, state)
            return PhpDeliveryState(**state)

    def _read(self) -> PhpDeliveryState:
        connection = self._connection
        try:
            ((active, leased, db_now),) = _select(connection, self.active_sql(), [WEBHOOK_TASK_CLASS])
        except _NoAccessError:
            return {
                "state": "unknown",
                "active_tasks": None,
                "leased_tasks": None,
                "recently_archived": None,
                "last_delivery": None,
                "detail": f"cannot read {self.active_table} (no SELECT grant, or not Phorge's database)",
            }
        active, leased, db_now = int(active), int(leased), int(db_now)
        try:
            ((archived, latest),) = _select(
                connection, self.archive_sql(), [self.recent_sec, WEBHOOK_TASK_CLASS, ARCHIVE_RESULT_CANCELLED]
            )
            recent: int | None = int(archived)
            last: int | None = None if latest is None else int(latest)
        except _NoAccessError:
            recent = last = None
        minutes = self.recent_sec // 60
        parts = [f"{active} HeraldWebhookWorker task(s) queued in Phorge ({leased} leased by phd)"]
        if recent is None:
            parts.append(f"cannot read {self.archive_table}")
        else:
            parts.append(f"{recent} run by phd in the last {minutes} min")
        state: PhpState
        if active or (last is not None and last >= db_now - ACTIVE_ARCHIVE_SEC):
            state = "active"
        elif last is not None:
            state = "recent"
        elif recent is None:
            state = "unknown"
        else:
            state = "idle"
        return {
            "state": state,
            "active_tasks": active,
            "leased_tasks": leased,
            "recently_archived": recent,
            "last_delivery": last,
            "detail": "; ".join(parts),
        }

    def live_tasks(self, request_phids: Iterable[str]) -> set[str] | None:
        """The requests among these that have a queued or leased HeraldWebhookWorker task (key_object);
        None when the worker tables cannot be read."""
        phids = list(request_phids)
        if self._unreadable_until > self._clock():
            return None
        if not phids:
            return set()
        sql = (
            f"SELECT objectPHID FROM {self.active_table} "
            f"WHERE objectPHID IN ({', '.join(['%s'] * len(phids))}) AND taskClass = %s"
        )
        try:
            rows = _select(self._connection, sql, [*phids, WEBHOOK_TASK_CLASS])
        except _NoAccessError:
            self._unreadable_until = self._clock() + UNREADABLE_RECHECK_SEC
            return None
        return {text(phid) for (phid,) in rows}

    def watch(self) -> PhpDeliveryState:
        """For the worker's poll loop: refresh (cached), set the gauge, log when the state changes.

        A database error here reads as "unknown" instead of raising: the loop's own queries notice
        outages and handle them.
        """
        try:
            state = self.state()
        except DatabaseError:
            state = {
                "state": "unknown",
                "active_tasks": None,
                "leased_tasks": None,
                "recently_archived": None,
                "last_delivery": None,
                "detail": "database error while reading Phorge's worker tables",
            }
        metrics.PHP_WORKER_ACTIVE.set(_GAUGE_VALUE[state["state"]])
        if state["state"] != self._reported:
            self._reported = state["state"]
            extra = {
                "active_tasks": state["active_tasks"],
                "leased_tasks": state["leased_tasks"],
                "recently_archived": state["recently_archived"],
            }
            if state["state"] == "active":
                logger.warning(
                    "Phorge's PHP worker is also delivering webhooks: stop PHP delivery (see README handover)",
                    extra=extra,
                )
            elif state["state"] == "recent":
                logger.info(
                    "Phorge's PHP worker delivered webhooks in the last 15 minutes, none is queued for it now",
                    extra={**extra, "last_delivery": state["last_delivery"]},
                )
            elif state["state"] == "idle":
                logger.info("Phorge's PHP worker is not delivering webhooks", extra=extra)
            else:
                logger.info(
                    f"cannot tell whether Phorge's PHP worker delivers webhooks: {state['detail']}", extra=extra
                )
        return state
