"""How the store sends its guarded UPDATEs of Phorge's request table, one way per store, chosen where it is
built (`writes_for`).

store.Store holds the statements' text, one form per database; a `Writes` sends them on one kind of
connection, with one method per result shape:

* `versioned`: a one-row compare-and-set that also sets dateModified; the value it set, None when it
  matched no row. MariaDB/MySQL hand that value back through LAST_INSERT_ID(expr), SQLite through
  `RETURNING dateModified`: one round trip either way;
* `matched`: a one-row guarded UPDATE; whether it matched its row;
* `versioned_twice`: two `versioned` statements, each committed on its own, in one round trip where the
  connection takes two.

The three ways: `PooledWrites` (MariaDB/MySQL with a session pool: the pool's own driver calls),
`CursorWrites` (MariaDB/MySQL on a Django cursor) and `ReturningWrites` (SQLite on a Django cursor). The
in-memory twin (twins.MemoryStore) keeps the same contract: tests/support/store_contract.py runs it on each.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from django.db import DatabaseError

from ..phorge.columns import Columns
from .sessions import SessionPool, Statement

RETURNED = Columns.of("dateModified")  # what SQLite's RETURNING hands back from a versioned UPDATE
Cursor = Callable[[], AbstractContextManager[Any]]
# Of two versioned statements: the first's version, the second's, and whether the second's outcome is known.
Twice = tuple[int | None, int | None, bool]


class Writes(Protocol):
    def versioned(self, statement: Statement) -> int | None: ...
    def matched(self, statement: Statement) -> bool: ...
    def versioned_twice(self, first: Statement, second: Statement) -> Twice: ...


def writes_for(is_mysql: bool, cursor: Cursor, pool: SessionPool | None) -> Writes:
    """The one way a store sends its writes: the pool's driver calls on MariaDB/MySQL when it has a pool,
    else a Django cursor (its own connection's, or one the pool lends on SQLite)."""
    if not is_mysql:
        return ReturningWrites(cursor)
    if pool is None:
        return CursorWrites(cursor)
    return PooledWrites(pool)


class PooledWrites:
    """MariaDB/MySQL through a session pool's own calls (sessions.SessionPool.change): the delivery threads'
    claims and result writes, a write and the next claim in one round trip."""

    def __init__(self, pool: SessionPool) -> None:
        self.pool = pool

    def versioned(self, statement: Statement) -> int | None:
        return _version(self.pool.change(*statement))

    def matched(self, statement: Statement) -> bool:
        return self.pool.change(*statement)[0] == 1

    def versioned_twice(self, first: Statement, second: Statement) -> Twice:
        done, then = self.pool.change_twice(first, second)
        if then is None:
            return _version(done), None, False
        return _version(done), _version(then), True


def _version(counts: tuple[int, int]) -> int | None:
    """The version a versioned UPDATE set, from its (rows matched, LAST_INSERT_ID())."""
    matched, written = counts
    return written if matched == 1 else None


class CursorWrites:
    """MariaDB/MySQL on a Django cursor, one statement per round trip: LAST_INSERT_ID(expr) is the cursor's
    lastrowid."""

    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor

    def versioned(self, statement: Statement) -> int | None:
        with self._cursor() as cursor:
            statement.run(cursor)
            return int(cursor.lastrowid) if cursor.rowcount == 1 else None

    def matched(self, statement: Statement) -> bool:
        with self._cursor() as cursor:
            statement.run(cursor)
            return bool(cursor.rowcount == 1)

    def versioned_twice(self, first: Statement, second: Statement) -> Twice:
        version = self.versioned(first)
        try:
            return version, self.versioned(second), True
        except DatabaseError:
            return version, None, False


class ReturningWrites(CursorWrites):
    """SQLite on a Django cursor: a versioned UPDATE ends with `RETURNING dateModified`."""

    def versioned(self, statement: Statement) -> int | None:
        with self._cursor() as cursor:
            statement.run(cursor)
            row = cursor.fetchone()
        return None if row is None else int(RETURNED.read(row)["dateModified"])
