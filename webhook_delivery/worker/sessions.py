"""A worker process's sessions on Phorge's database, decoupled from the deliveries in flight.

Deliveries run on many threads, but they do not each hold a connection:

* `SessionPool`: a few connections shared by every delivery thread, borrowed for one statement at a time:
  half of them lent to Django's cursors (the breaker query, Phorge lookups), the others kept for the
  pool's own statements (claims, result writes), the only connections of the process that take two
  statements in one round trip;
* `LockSession`: one connection that holds Phorge's per-hook named locks for the whole process. One
  MariaDB/MySQL session may hold many named locks (MariaDB 10.0.2+, MySQL 5.7+). If that session dies, all
  its locks are gone at once: the session says so once, and every claim carries a check that the hook's
  lock is still held by it (`IS_USED_LOCK(name) = <its connection id>`), so nothing new is started for a
  hook whose lock was lost.

With the main thread's own connection (polls), a process holds `pool size + 2` connections. On a
partitioned Phorge it also holds, on each other master it reads from (`MasterPools`), at most
MASTER_POOL_SIZE, and the lock session lives on the repository application's master, as Phorge's locks do.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from django.db import DatabaseError, connections

from ..config import master_alias
from ..phorge.columns import positional, positional_sql
from ..phorge.databases import MASTER_DOWN_SEC, ConnectionSource

MULTI_STATEMENTS_ON = 0  # the C client's MYSQL_OPTION_MULTI_STATEMENTS_ON, for set_server_option()
MASTER_POOL_SIZE = 2  # connections per other master: lookups are short, and each master has max_connections

logger = logging.getLogger(__name__)


def close_quietly(connection: Any) -> None:
    """Drop a connection that may already be broken (closing one can itself raise)."""
    try:
        connection.close()
    except DatabaseError:
        connection.connection = None


class Statement(NamedTuple):
    """A statement with `%(name)s` parameters, and their values: bound one way for each kind of connection."""

    sql: str
    params: Mapping[str, Any]

    def run(self, cursor: Any) -> None:
        """Through a Django cursor: the driver binds the parameters."""
        cursor.execute(*positional(self.sql, self.params))

    def bound(self, driver: Any) -> bytes:
        """For the driver's own calls (SessionPool): the statement's bytes, each parameter escaped by the
        driver as a cursor would send it."""
        text, names = _template(self.sql)
        return text % tuple([_literal(driver, self.params[name]) for name in names])


@functools.lru_cache(maxsize=64)
def _template(sql: str) -> tuple[bytes, tuple[str, ...]]:
    """A statement with `%(name)s` parameters as the driver's bytes with `%s`, and the names in order."""
    text, names = positional_sql(sql)
    return text.encode("utf-8"), names


def _literal(driver: Any, value: Any) -> bytes:
    # What driver.literal() gives for these types, without its dispatch in Python: integers as digits,
    # text escaped by the C client for the connection's character set (tests/db/test_sessions.py holds this
    # and Statement.bound() to the driver's literal() and a cursor's statement, over hostile values).
    if type(value) is int:
        return b"%d" % value
    if type(value) is str:
        return bytes(driver.string_literal(value.encode(driver.encoding)))
    if value is None:
        return b"NULL"
    return bytes(driver.literal(value))


def _new_wrapper(alias: str) -> Any:
    wrapper = connections.create_connection(alias)
    wrapper.inc_thread_sharing()  # created here, used from any thread, one at a time
    return wrapper


class SessionPool:
    """`size` connections, each used by one thread at a time; a broken one is closed and reopened on next use.

    On MariaDB/MySQL the pool keeps `size // 2` of them for its own statements, sent through the driver's
    own calls (`change`, `change_twice`: the claims and result writes of every delivery), and lends the
    others (`connection`: a Django connection, for a cursor). Only those it keeps take several statements
    in one round trip (`change_twice`), and they are never lent: no statement of Django's, however it was
    built, reaches a connection that would run a second statement after a `;`. Its own statements take a
    kept connection first and a lent one when every kept one is busy (one statement at a time there):
    the claims and writes of a backlog's many jobs have every connection, as before any was kept. With one connection
    (GORGE_WEBHOOK_DB_POOL_SIZE=1), or on SQLite, nothing is kept back: `change_twice` then sends its two
    statements one after the other, with multi-statements off.

    Each connection has a lock of its own: the first free one of its kind is taken without waiting, and when
    none is free the thread waits on one of them in turn. Many delivery threads share few connections, and
    a queue's condition variable made every hand-over cost more CPU than the statement it waited for. The
    first free one, not the next in turn: an idle worker's few reads keep using one connection, and only the
    connections in use are opened and, each CONN_MAX_AGE, opened again (a SimpleQueue, as fast, took them in
    turn: a fifth more statements per idle second).
    """

    def __init__(self, alias: str, size: int) -> None:
        self.alias = alias
        self.size = size
        self._all = [_new_wrapper(alias) for _ in range(size)]
        self._locks = [threading.Lock() for _ in range(size)]
        self._turn = itertools.count()
        kept = size // 2 if self.vendor == "mysql" else 0
        self.lent = range(size - kept)  # the slots `connection` lends
        self.kept = range(size - kept, size) if kept else self.lent  # the slots of `change` and `change_twice`
        self.batches = kept > 0  # whether `change_twice` sends its statements in one round trip on a kept slot
        # `change` and `change_twice` take a kept slot first, else any free one: the statements are the
        # pool's own, one at a time on a lent slot, so all `size` connections carry the claims and writes.
        self.any = (*self.kept, *(index for index in self.lent if index not in self.kept))
        self._multi: list[Any] = [None] * size  # per kept slot, the driver connection multi-statements are on for

    @property
    def vendor(self) -> str:
        return str(self._all[0].vendor)

    def _borrow(self, slots: Sequence[int]) -> int:
        for index in slots:
            if self._locks[index].acquire(blocking=False):
                return index
        index = slots[next(self._turn) % len(slots)]
        self._locks[index].acquire()
        return index

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A Django connection of the pool's lent ones, this thread's until the block ends."""
        index = self._borrow(self.lent)
        wrapper = self._all[index]
        try:
            wrapper.close_if_unusable_or_obsolete()
            yield wrapper
        except DatabaseError:
            self._failed(wrapper)
            raise
        finally:
            self._locks[index].release()

    def change(self, sql: str, params: Mapping[str, Any]) -> tuple[int, int]:
        """One statement that returns no rows (MariaDB/MySQL), sent through the driver's own calls on a
        connection the pool keeps: (rows it matched, LAST_INSERT_ID()). For the statements of every
        delivery (the claim and the result write): Django's cursor around them cost as much CPU as the
        driver. Errors are Django's, as through a cursor."""
        index = self._borrow(self.any)
        try:
            return self._sent(index, self._opened(index), (sql, params))
        finally:
            self._locks[index].release()

    def change_twice(
        self, first: tuple[str, Mapping[str, Any]], second: tuple[str, Mapping[str, Any]]
    ) -> tuple[tuple[int, int], tuple[int, int] | None]:
        """Two statements as `change` sends one, each committed on its own: in one round trip on a kept
        connection (`batches`), else one after the other (a lent one, multi-statements off, when every kept
        one is busy). The first's (rows matched, LAST_INSERT_ID()), and the second's, or None when it failed
        after the first was done: whether it took is then not known (its connection is closed)."""
        index = self._borrow(self.any)
        try:
            if self.batches and index in self.kept:
                driver = self._opened(index, batches=True)
                return self._sent(index, driver, first, second), self._then(index, driver)
            driver = self._opened(index)
            return self._sent(index, driver, first), self._then(index, driver, second)
        finally:
            self._locks[index].release()

    def _opened(self, index: int, *, batches: bool = False) -> Any:
        """The driver's connection of slot `index`, (re)opened if need be, taking several statements at once
        when `batches`; a failure closes it."""
        wrapper = self._all[index]
        try:
            with wrapper.wrap_database_errors:
                driver = self._driver(wrapper)
                if batches and self._multi[index] is not driver:
                    driver.set_server_option(MULTI_STATEMENTS_ON)  # on this kept connection only
                    self._multi[index] = driver
                return driver
        except DatabaseError:
            self._failed(wrapper)
            raise

    def _sent(self, index: int, driver: Any, *statements: tuple[str, Mapping[str, Any]]) -> tuple[int, int]:
        """`statements` sent in one round trip, or with none the next result of the last round trip: the
        (rows matched, LAST_INSERT_ID()) of the first result. A failure closes the connection."""
        wrapper = self._all[index]
        try:
            with wrapper.wrap_database_errors:
                if statements:
                    driver.query(b";".join([Statement(*statement).bound(driver) for statement in statements]))
                else:
                    driver.next_result()
                return int(driver.affected_rows()), int(driver.insert_id())
        except DatabaseError:
            self._failed(wrapper)
            raise

    def _then(self, index: int, driver: Any, *statement: tuple[str, Mapping[str, Any]]) -> tuple[int, int] | None:
        """The second of two statements (none: the second result of a batch), on the first one's connection;
        None when it failed, having closed that connection."""
        try:
            return self._sent(index, driver, *statement)
        except DatabaseError:
            return None

    @staticmethod
    def _driver(wrapper: Any) -> Any:
        wrapper.close_if_unusable_or_obsolete()
        wrapper.ensure_connection()
        return wrapper.connection

    def _failed(self, wrapper: Any) -> None:
        close_quietly(wrapper)
        # The idle ones were opened to the same server: after a restart each would fail once more,
        # each failure another "database unavailable" after the worker saw it answer again.
        for index, lock in enumerate(self._locks):
            if lock.acquire(blocking=False):
                try:
                    close_quietly(self._all[index])
                finally:
                    lock.release()

    def close(self) -> None:
        for wrapper in self._all:
            close_quietly(wrapper)


class MasterPools:
    """Session pools on the other masters of a partitioned Phorge (Django aliases from
    GORGE_WEBHOOK_CLUSTER_DATABASES), each opened on first use."""

    def __init__(self, size: int = MASTER_POOL_SIZE) -> None:
        self.size = size
        self._pools: dict[str, SessionPool] = {}
        self._lock = threading.Lock()

    def source(self, ref_key: str) -> ConnectionSource | None:
        """The pool's `connection` for that master, None when the service was not told how to reach it."""
        alias = master_alias(ref_key)
        if alias not in connections.settings:
            return None
        with self._lock:
            pool = self._pools.get(ref_key)
            if pool is None:
                pool = self._pools[ref_key] = SessionPool(alias, self.size)
        return pool.connection

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()


def lock_alias(herald: str, repository_master: str | None) -> str:
    """Where the hook locks are taken: the repository application's master when it is another, configured
    one (PhabricatorGlobalLock takes every lock there), else herald's."""
    if repository_master is None or master_alias(repository_master) not in connections.settings:
        return herald
    return master_alias(repository_master)


class LockLost(DatabaseError):
    """The lock session is gone, and every hook lock it held with it."""


class LockSession:
    """Phorge's named per-hook locks (GET_LOCK, zero wait) for a whole process, on one connection.

    `acquire` returns a token (the session's generation) to hand back to `release`; a token from before a
    lost session is stale, and releasing with it does nothing. On SQLite (the demo) the locks are
    in-process only.
    """

    def __init__(self, alias: str, *, beside_claims: bool = True) -> None:
        self.alias = alias
        # On herald's server a claim checks the lock in its own UPDATE; elsewhere it is asked before each claim.
        self.beside_claims = beside_claims
        self._wrapper = _new_wrapper(alias)
        self.is_mysql = self._wrapper.vendor == "mysql"
        self._down_until = 0.0
        self._mutex = threading.Lock()
        self._local: dict[str, threading.Lock] = {}
        self.generation = 0
        self.holder_id: int | None = None
        self.held: set[str] = set()
        self.on_lost: Callable[[], None] | None = None  # told when a session holding locks is gone

    def _cursor_locked(self) -> Any:
        if self.holder_id is None:
            with self._wrapper.cursor() as cursor:
                cursor.execute("SELECT CONNECTION_ID()")
                self.holder_id = int(cursor.fetchone()[0])
        return self._wrapper.cursor()

    def _run(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One statement on the lock connection (mutex held by the caller); a failure loses the session."""
        if not self.beside_claims and self._down_until > time.monotonic():
            raise LockLost("the lock master does not answer")  # not a connect timeout per hook while it is down
        try:
            with self._cursor_locked() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone()[0]
        except DatabaseError as exc:
            self._lose()
            if not self.beside_claims:
                self._down_until = time.monotonic() + MASTER_DOWN_SEC
            raise LockLost("the lock session is gone") from exc

    def _lose(self) -> None:
        lost = len(self.held)
        self.generation += 1
        self.held.clear()
        self.holder_id = None
        close_quietly(self._wrapper)
        if lost:
            if self.on_lost is not None:
                self.on_lost()  # one fact, one event: the worker counts it (metric and heartbeat)
            logger.error(
                "lost the database session holding hook locks: no new delivery for those hooks until they "
                "are locked again; attempts in flight finish and write only with their claim",
                extra={"event": "lock_session.lost", "hooks": lost},
            )

    def acquire(self, name: str) -> int | None:
        """The token if this process now holds `name`, None if someone else does. Raises LockLost."""
        with self._mutex:
            if not self.is_mysql:
                lock = self._local.setdefault(name, threading.Lock())
                if not lock.acquire(blocking=False):
                    return None
            elif self._run("SELECT GET_LOCK(%s, 0)", (name,)) != 1:
                return None
            self.held.add(name)
            return self.generation

    def release(self, name: str, token: int) -> None:
        with self._mutex:
            if token != self.generation or name not in self.held:
                return  # the session that held it is gone, and the lock with it
            self.held.discard(name)
            if not self.is_mysql:
                self._local[name].release()
                return
            try:
                self._run("SELECT RELEASE_LOCK(%s)", (name,))
            except LockLost:
                pass  # logged once by _lose(); the server released everything anyway

    def holds(self, name: str, token: int) -> bool:
        """Whether the lock taken with `token` is still ours, asked of the server (after a failed claim)."""
        with self._mutex:
            if token != self.generation or name not in self.held:
                return False
            if not self.is_mysql:
                return True
            try:
                return bool(self._run("SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", (name,)))
            except LockLost:
                return False

    def for_claim(self, name: str, token: int) -> tuple[bool, tuple[str, int] | None]:
        """Before a claim: whether the lock taken with `token` is still ours, and the (name, server session
        id) the claim's own UPDATE checks with IS_USED_LOCK. When this session is on another server than the
        claims (the repository's master), the server is asked here instead, and the claim checks nothing."""
        if not self.is_mysql:
            return True, None  # in-process locks (the demo): nothing on a server to lose
        # No mutex (asked before every claim, while other jobs lock and unlock): a session lost and replaced
        # between these two reads gives a holder that does not hold the lock, and the claim's check fails.
        holder = self.holder_id
        if token != self.generation or holder is None:
            return False, None
        if self.beside_claims:
            return True, (name, holder)
        return self.holds(name, token), None

    def check(self) -> None:
        """Ping the session while it holds locks, so a killed or dropped connection is noticed promptly."""
        with self._mutex:
            if self.is_mysql and self.holder_id is not None:
                try:
                    self._run("SELECT 1", ())
                except LockLost:
                    pass

    def close(self) -> None:
        with self._mutex:
            self.held.clear()
            self.generation += 1
            close_quietly(self._wrapper)
