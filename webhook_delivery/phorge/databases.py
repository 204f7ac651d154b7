"""How the read-only lookups reach Phorge's other application databases, beside the herald one.

Everything is a SELECT on `<namespace>_<app>`.`<table>` through the herald connection (default alias
PHORGE_ALIAS), so the same MariaDB user needs an extra grant for each; `grants_sql()` prints them. Without a
grant (or on SQLite, where none of these databases exist) a read raises NoAccessError and each feature
degrades to what the project did without it, saying so once in the log. Any other database error propagates
as django.db.DatabaseError so the worker's outage handling keeps the request queued.

Used by objects.py (objects and transactions), php_guard.py (Phorge's PHP worker) and
config.py (Phorge's own settings). On a partitioned Phorge (`PartitionMap`, from `<ns>_meta_data.hoststate`)
the tables of applications on another master are empty copies on herald's: `Masters` sends each read to
its application's master when GORGE_WEBHOOK_CLUSTER_DATABASES (or cluster.databases in Phorge's local file)
says how to reach it, and otherwise the reader skips it. A master that does not answer raises
MasterUnavailable: only what lives there waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections

from ..config import (
    CLUSTER_KEY,
    CLUSTER_VARIABLE,
    LOCAL_CONFIG_VARIABLE,
    NAMESPACE_RE,
    PHORGE_ALIAS,
    ClusterMap,
    master_alias,
)
from .cluster import HERALD, ClusterDatabases, ClusterError, loads_cluster_databases
from .columns import Record, positional
from .formats import configured_map

logger = logging.getLogger(__name__)

# MariaDB/MySQL errors that mean "this user cannot read that table" rather than "the database is down":
# table/column access denied, database access denied, unknown database, no such table.
NO_ACCESS_ERRORS = frozenset({1044, 1049, 1142, 1143, 1146})

CACHE_SEC = 5.0
UNREADABLE_RECHECK_SEC = 60.0
PARTITION_CACHE_SEC = 30.0  # the map changes only with `bin/storage partition`
MASTER_DOWN_SEC = 10.0  # after a master failed to answer, its reads wait this long before it is tried again
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


def herald_connection() -> AbstractContextManager[Any]:
    return nullcontext(connections[PHORGE_ALIAS])


class OnceLog:
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


class NoAccessError(Exception):
    """The table cannot be read: no SELECT grant, no such database or table (`code`: the server's error
    number; None where there are no such databases, on SQLite)."""

    def __init__(self, code: int | None) -> None:
        super().__init__(code)
        self.code = code


def select(source: ConnectionSource, sql: str, params: Mapping[str, Any]) -> list[Record]:
    """Run one SELECT written with `%(name)s` parameters; its rows by column name. Raises NoAccessError
    when the table cannot be read (no grant, no such database), DatabaseError for anything else."""
    # A refused SELECT is answered inside the borrowed connection's block: the connection is fine, and a pool
    # that saw the error would close it and pay a reconnect on the next read.
    with source() as connection:
        if connection.vendor != "mysql":
            raise NoAccessError(None)
        try:
            with connection.cursor() as cursor:
                cursor.execute(*positional(sql, params))
                names = [column[0] for column in cursor.description or ()]
                return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        except DatabaseError as exc:
            code = _error_code(exc)
            if code in NO_ACCESS_ERRORS:
                raise NoAccessError(code) from exc
            raise


@dataclass(frozen=True)
class Placement:
    """Where Phorge's applications live, as herald's master records it. `cluster` is None when that is not
    known (no hoststate row, no grant, and no map configured): every read is made on herald's master, as on
    a single server. `problem` is set when a row is there but cannot be understood or disagrees with the
    configured map: then no other application is assumed to be on herald's master. `reachable`: the other
    masters this service was told how to reach (the configured map); `origin`: where `cluster` was read."""

    cluster: ClusterDatabases | None = None
    problem: str = ""
    reachable: frozenset[str] = frozenset()
    origin: str = ""

    @property
    def partitioned(self) -> bool:
        return bool(self.problem) or (self.cluster is not None and self.cluster.partitioned)

    def elsewhere(self, application: str) -> str | None:
        """The master of an application that is not herald's master (so its tables here are empty copies);
        None when its reads belong on herald's master."""
        if self.problem:
            return None if application == HERALD else "an unknown master (the partition map is unreadable)"
        return None if self.cluster is None else self.cluster.elsewhere(application)

    def unreached(self, application: str) -> str | None:
        """The master of an application whose reads this service cannot make: elsewhere and not reachable."""
        master = self.elsewhere(application)
        return None if master is None or master in self.reachable else master

    def warning(self) -> str | None:
        """What an operator must know when partitioned, for check, /readyz and the health JSON."""
        if self.problem:
            return (
                f"Phorge's partition map (hoststate {HOSTSTATE_KEY}) cannot be used: {self.problem}; lookups "
                "outside herald are not made (stored transactions are sent unchecked)"
            )
        if self.cluster is None or not self.cluster.partitioned:
            return None
        home = self.cluster.master_for(HERALD)
        others = self.cluster.others(skip=self.reachable)
        if not others:
            return None
        origin = f"map from {self.origin}; " if self.origin else ""
        text = (
            f"Phorge's databases are partitioned ({origin}herald on {home.ref_key if home else 'no master'}; "
            f"masters this service cannot reach: {'; '.join(others)}; give their entries in {CLUSTER_VARIABLE} or "
            f"in {CLUSTER_KEY} of the local file {LOCAL_CONFIG_VARIABLE} names): lookups of applications there "
            "are not made (stored transactions are sent unchecked, deleted objects are not detected)"
        )
        if (locks := self.unreached("repository")) is not None:
            text += f"; {lock_warning(locks)}"
        return text

    def in_force(self) -> tuple[str, str] | None:
        """(which master serves what, where the map came from) for the start-up line; None when no map is
        known, or it is unusable (the problem is logged where it is found)."""
        if self.cluster is None or self.problem:
            return None
        home = self.cluster.master_for(HERALD)
        others = self.cluster.others()
        shown = f"herald on {home.ref_key if home else 'no master'}"
        shown += f"; {'; '.join(others)}" if others else " (not partitioned)"
        return shown, self.origin or "unknown"


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
        configured: ClusterMap | None = None,
        ttl: float = PARTITION_CACHE_SEC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = qualified(namespace, "meta_data", "hoststate")
        self.configured = configured_map(configured)
        self._connection = connection or herald_connection
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
        configured = self.configured
        recorded = self._recorded()
        if isinstance(recorded, Placement):
            return recorded
        if configured is None:
            return Placement(recorded, origin=self.table if recorded is not None else "")
        reachable = frozenset(configured.reachable())
        origin = configured.origin or "the configured map"
        if recorded is None:
            return Placement(configured, reachable=reachable, origin=origin)
        if configured.layout() != recorded.layout():
            problem = f"{origin} places the applications otherwise than {self.table}"
            if _MAP_LOG.first(f"disagree {self.table}"):
                logger.error(
                    f"{problem}: no lookup outside herald is made until they agree (Phorge refuses too)",
                    extra={"event": "cluster.disagrees"},
                )
            return Placement(problem=problem)
        return Placement(recorded, reachable=reachable, origin=f"{origin}, as in {self.table}")

    def _recorded(self) -> ClusterDatabases | Placement | None:
        """The map in hoststate; None when there is none to read; a Placement with the problem when unusable."""
        sql = f"SELECT stateValue FROM {self.table} WHERE stateKey = %(key)s"
        try:
            rows = select(self._connection, sql, {"key": HOSTSTATE_KEY})
        except NoAccessError as exc:
            if exc.code is not None and _MAP_LOG.first(f"unreadable {self.table}"):
                known = (
                    f"the map from {self.configured.origin or 'the configuration'} is used"
                    if self.configured
                    else "every lookup is made on herald's master"
                )
                logger.info(
                    f"cannot read {self.table} (no SELECT grant, or no such table): Phorge's own partition map is "
                    f"not known, and {known}",
                    extra={"event": "cluster.map_unreadable", "mysql_error": exc.code},
                )
            return None
        if not rows:
            return None
        value = rows[0]["stateValue"]
        try:
            return loads_cluster_databases(value.decode() if isinstance(value, bytes) else str(value))
        except (ClusterError, UnicodeDecodeError) as exc:
            if _MAP_LOG.first(f"invalid {self.table}"):
                logger.warning(
                    f"cannot parse Phorge's partition map in {self.table}: {exc}",
                    extra={"event": "cluster.map_invalid"},
                )
            return Placement(problem=str(exc))


_MAP_LOG = OnceLog()


def alias_source(ref_key: str) -> ConnectionSource | None:
    """The calling thread's connection to another master, None when the configured map does not name it
    (settings.py makes an alias of each master it names)."""
    alias = master_alias(ref_key)
    if alias not in connections.settings:
        return None
    return lambda: nullcontext(connections[alias])


class MasterUnavailable(Exception):
    """A master other than herald's does not answer. Not a DatabaseError: herald is fine, and only what
    lives on that master waits (its requests stay queued, claimed until their lease runs out)."""

    def __init__(self, master: str) -> None:
        super().__init__(f"Phorge's database master {master} does not answer")
        self.master = master


@dataclass(frozen=True)
class Route:
    """Where one application's reads go: `source` None when they are not made (a master this service cannot
    reach); `master` names the other master, None for herald's own."""

    source: ConnectionSource | None
    master: str | None


class Masters:
    """Each application's reads on its own master: herald's connection for what lives beside herald, the
    connection `others(ref_key)` lends for another master (None: not configured), through a guard that turns
    that master's outage into MasterUnavailable and waits MASTER_DOWN_SEC before trying it again."""

    def __init__(
        self,
        partitions: PartitionMap,
        herald: ConnectionSource,
        *,
        others: Callable[[str], ConnectionSource | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.partitions = partitions
        self.herald = herald
        self._others = others or (lambda _ref_key: None)
        self._clock = clock
        self._lock = threading.Lock()
        self._down_until: dict[str, float] = {}

    @classmethod
    def single(cls, namespace: str, herald: ConnectionSource, *, configured: ClusterMap | None = None) -> Masters:
        """One reader of the map on `herald`; the other masters (if configured) through this thread's
        connections of their Django aliases (the web side; the worker lends pooled ones)."""
        return cls(PartitionMap(namespace, connection=herald, configured=configured), herald, others=alias_source)

    def route(self, application: str) -> Route:
        master = self.partitions.current().elsewhere(application)
        if master is None:
            return Route(self.herald, None)
        source = self._others(master)
        if source is None:
            return Route(None, master)
        return Route(lambda: self._guarded(master, source), master)

    @contextmanager
    def _guarded(self, master: str, source: ConnectionSource) -> Iterator[Any]:
        with self._lock:
            if self._down_until.get(master, 0.0) > self._clock():
                raise MasterUnavailable(master)
        try:
            with source() as connection:
                yield connection
        except DatabaseError as exc:
            with self._lock:
                first = master not in self._down_until
                self._down_until[master] = self._clock() + MASTER_DOWN_SEC
            if first:
                logger.error(
                    f"Phorge's database master {master} does not answer: what lives there waits (its lookups "
                    f"are tried again every {MASTER_DOWN_SEC:.0f} s; requests that need them stay queued)",
                    extra={"event": "master.down", "master": master, "mysql_error": _error_code(exc)},
                )
            raise MasterUnavailable(master) from exc
        with self._lock:
            recovered = self._down_until.pop(master, None) is not None
        if recovered:
            logger.info(
                f"Phorge's database master {master} answers again", extra={"event": "master.back", "master": master}
            )
