"""How the read-only lookups reach Phorge's other application databases, beside the herald one.

Everything is a SELECT on `<namespace>_<app>`.`<table>` through the herald connection (default alias
PHORGE_ALIAS), so the same MariaDB user needs an extra grant for each; `grants_sql()` prints them. Without a
grant (or on SQLite, where none of these databases exist) a read raises _NoAccessError and each feature
degrades to what the project did without it, saying so once in the log. Any other database error propagates
as django.db.DatabaseError so the worker's outage handling keeps the request queued.

Used by objects.py (objects and transactions), php_guard.py (Phorge's PHP worker) and
config.py (Phorge's own settings).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from django.db import DatabaseError, connections

from ..config import NAMESPACE_RE, PHORGE_ALIAS

# MariaDB/MySQL errors that mean "this user cannot read that table" rather than "the database is down":
# table/column access denied, database access denied, unknown database, no such table.
NO_ACCESS_ERRORS = frozenset({1044, 1049, 1142, 1143, 1146})

CACHE_SEC = 5.0
UNREADABLE_RECHECK_SEC = 60.0

# A connection lent for one statement: the worker's session pool, or the calling thread's own connection.
ConnectionSource = Callable[[], AbstractContextManager[Any]]


def qualified(namespace: str, app: str, table: str) -> str:
    """`<namespace>_<app>`.`<table>`, quoted; the namespace is checked first."""
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
