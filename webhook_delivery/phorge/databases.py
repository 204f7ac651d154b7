"""How the read-only lookups reach Phorge's other application databases, beside the herald one.

Everything is a SELECT on `<namespace>_<app>`.`<table>` through the herald connection (default alias
PHORGE_ALIAS), so the same MariaDB user needs an extra grant for each; `grants_sql()` prints them. Without a
grant (or on SQLite, where none of these databases exist) a read raises _NoAccessError and each feature
degrades to what the project did without it, saying so once in the log. Any other database error propagates
as django.db.DatabaseError so the worker's outage handling keeps the request queued.

Used by objects.py (objects and transactions), php_guard.py (Phorge's PHP worker) and
config.py (Phorge's own settings). On a partitioned Phorge (`PartitionMap`, from `<ns>_meta_data.hoststate`)
the tables of applications on another master are empty copies on herald's: each reader skips those.
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

from ..config import NAMESPACE_RE, PHORGE_ALIAS
from .cluster import HERALD, ClusterDatabases, ClusterError, loads_cluster_databases

logger = logging.getLogger(__name__)

# MariaDB/MySQL errors that mean "this user cannot read that table" rather than "the database is down":
# table/column access denied, database access denied, unknown database, no such table.
NO_ACCESS_ERRORS = frozenset({1044, 1049, 1142, 1143, 1146})

CACHE_SEC = 5.0
UNREADABLE_RECHECK_SEC = 60.0
PARTITION_CACHE_SEC = 30.0  # the map changes only with `bin/storage partition`
HOSTSTATE_KEY = "cluster.databases"

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


@dataclass(frozen=True)
class Placement:
    """Where Phorge's applications live, as herald's master records it. `cluster` is None when that is not
    known (no hoststate row, no grant): every read is made on herald's master, as on a single server.
    `problem` is set when a row is there but cannot be understood: then no other application is assumed
    to be on herald's master."""

    cluster: ClusterDatabases | None = None
    problem: str = ""

    @property
    def partitioned(self) -> bool:
        return bool(self.problem) or (self.cluster is not None and self.cluster.partitioned)

    def elsewhere(self, application: str) -> str | None:
        """The master of an application that is not herald's master (so its tables here are empty copies);
        None when its reads belong on herald's master."""
        if self.problem:
            return None if application == HERALD else "an unknown master (the partition map is unreadable)"
        return None if self.cluster is None else self.cluster.elsewhere(application)

    def warning(self) -> str | None:
        """What an operator must know when partitioned, for check, /readyz and the health JSON."""
        if self.problem:
            return (
                f"Phorge's partition map (hoststate {HOSTSTATE_KEY}) cannot be parsed: {self.problem}; lookups "
                "outside herald are not made (stored transactions are sent unchecked)"
            )
        if self.cluster is None or not self.cluster.partitioned:
            return None
        home = self.cluster.master_for(HERALD)
        text = (
            f"Phorge's databases are partitioned (herald on {home.ref_key if home else 'no master'}; other "
            f"masters: {'; '.join(self.cluster.others())}) and this service reaches only herald's master: lookups "
            "of applications elsewhere are not made (stored transactions are sent unchecked, deleted objects are "
            "not detected)"
        )
        if (locks := self.elsewhere("repository")) is not None:
            text += f"; {lock_warning(locks)}"
        return text


def lock_warning(master: str) -> str:
    """Why the hook locks do not work when the repository application is on another master."""
    return (
        f"Phorge takes its hook locks on the repository application's master {master}; this service's lock "
        "on herald's master does not exclude PHP's workers"
    )


class PartitionMap:
    """Phorge's `cluster.databases` as `bin/storage partition` recorded it in `<ns>_meta_data.hoststate` (an
    optional grant), cached PARTITION_CACHE_SEC. Without the grant, the table or the row it is not known, and
    that is said once. An outage raises django.db.DatabaseError."""

    def __init__(
        self,
        namespace: str,
        *,
        connection: ConnectionSource | None = None,
        ttl: float = PARTITION_CACHE_SEC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = qualified(namespace, "meta_data", "hoststate")
        self._connection = connection or _default_connection
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, Placement] | None = None

    def current(self) -> Placement:
        with self._lock:
            cached = self._cached
            if cached is not None and self._clock() - cached[0] < self._ttl:
                return cached[1]
            placement = self._read()
            self._cached = (self._clock(), placement)
            return placement

    def _read(self) -> Placement:
        sql = f"SELECT stateValue FROM {self.table} WHERE stateKey = %s"
        try:
            rows = _select(self._connection, sql, [HOSTSTATE_KEY])
        except _NoAccessError as exc:
            if exc.code is not None and _MAP_LOG.first(f"unreadable {self.table}"):
                logger.info(
                    f"cannot read {self.table} (no SELECT grant, or no such table): whether Phorge's databases "
                    "are partitioned is not known, and every lookup is made on herald's master",
                    extra={"mysql_error": exc.code},
                )
            return Placement()
        if not rows:
            return Placement()
        (value,) = rows[0]
        try:
            cluster = loads_cluster_databases(value.decode() if isinstance(value, bytes) else str(value))
        except (ClusterError, UnicodeDecodeError) as exc:
            if _MAP_LOG.first(f"invalid {self.table}"):
                logger.warning(f"cannot parse Phorge's partition map in {self.table}: {exc}")
            return Placement(problem=str(exc))
        return Placement(cluster)


_MAP_LOG = _OnceLog()
