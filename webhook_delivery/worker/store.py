"""The one module that talks SQL to Phorge's herald tables for delivery, and the only one that writes.

It never inserts or deletes, and only UPDATEs herald_webhookrequest rows through a claim: the claim is a
compare-and-set on `dateModified` (the version), and every result write is guarded by the claimed
version, so a lost claim writes nothing. All times are the database's clock. The one other write,
`requeue` (for `manage.py requeue_webhooks`), is guarded the same way: only a failed row still exactly as
read.

Without a session pool it uses the calling thread's own connection (the worker's main thread, the
tests); with one (the delivery threads) it borrows a pooled connection for each statement. How it sends
its writes is decided once, when it is built (writes.writes_for). Phorge's named per-hook locks live on
the process's lock session (sessions.LockSession), and a claim only succeeds while the hook's lock is
still held by that session.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connections

from ..config import PHORGE_ALIAS
from ..phorge.columns import Columns, Record
from ..phorge.herald import (
    HOOK_SELECT,
    HOOKS,
    REQUEST_SELECT,
    REQUESTS,
    ROW_FIELDS,
    Dialect,
    Hook,
    RequestRow,
    text,
)
from .sessions import SessionPool, Statement, close_quietly
from .writes import Twice, Writes, writes_for

INLINE_PROPERTIES = 256 * 1024  # bytes: larger properties are read one row at a time
# What a result write sets besides the version: status, lastRequestResult, attempted, properties (or None).
WrittenOutcome = tuple[str, str, bool, str | None]
PHIDS = Columns.of("phid")
REQUEST_HOOKS = Columns.of("webhookPHID")
EPOCHS = Columns.of("lastRequestEpoch")


def _execute(cursor: Any, sql: str, params: dict[str, Any] | None) -> None:
    if params is None:
        cursor.execute(sql)
        return
    Statement(sql, params).run(cursor)


def _numbered(n: int, **values: Any) -> dict[str, Any]:
    """The parameters of the n-th repeat of a statement part: `hook` is `%(hook{n})s` there."""
    return {f"{name}{n}": value for name, value in values.items()}


class Store:
    def __init__(self, alias: str = PHORGE_ALIAS, *, pool: SessionPool | None = None) -> None:
        self.alias = alias
        self.pool = pool
        self._max_packet: int | None = None
        self.dialect = Dialect(str(connections[alias].vendor))
        self.is_mysql = self.dialect.is_mysql
        self.writes: Writes = writes_for(self.is_mysql, self._cursor, pool)
        self.now_sql = now = self.dialect.now_sql
        self._clock = Columns.of(now=now)
        # Request reads: REQUEST_SELECT, then properties (or NULL), then the database clock.
        self._listed = REQUEST_SELECT.plus(properties="NULL", now=now)
        self._with_properties = REQUEST_SELECT.plus("properties", now=now)
        # Built once: these run for every delivery.
        self._scan_sql = f"SELECT {self._listed.sql} FROM {REQUESTS} WHERE id > %(after)s ORDER BY id LIMIT %(limit)s"
        # Large properties are left out of a batch and read alone (Store.large_properties), one or two at a time.
        inline_properties = (
            f"CASE WHEN status = 'queued' AND LENGTH(properties) <= {INLINE_PROPERTIES} THEN properties END"
        )
        self._fetched = REQUEST_SELECT.plus(properties=inline_properties, now=now)
        self._fetch_sql = f"SELECT {self._fetched.sql} FROM {REQUESTS} WHERE id IN "
        version = self.dialect.greatest("dateModified + 1", now)
        claim_where = f"id = %(id)s AND dateModified = %(version)s AND {self.dialect.due_sql()}"
        self._claim_sql = self._versioned([], version, claim_where)
        # The hook's lock, checked by the claim itself: only MariaDB/MySQL have them on the server.
        locked = f"{claim_where} AND IS_USED_LOCK(%(lock)s) = %(session)s"
        self._locked_claim_sql = self._versioned([], version, locked) if self.is_mysql else self._claim_sql
        # A claim taken back before any call: the row as it was, if the claim is still ours.
        self._release_sql = (
            f"UPDATE {REQUESTS} SET dateModified = %(previous)s "
            "WHERE id = %(id)s AND status = 'queued' AND dateModified = %(version)s"
        )
        self._write_sql = {
            (attempted, with_properties): self._write_statement(attempted, with_properties)
            for attempted in (True, False)
            for with_properties in (True, False)
        }

    @property
    def connection(self) -> Any:
        return connections[self.alias]

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        if self.pool is None:
            with self.connection.cursor() as cursor:
                yield cursor
            return
        with self.pool.connection() as connection, connection.cursor() as cursor:
            yield cursor

    def _versioned(self, assignments: list[str], version: str, where: str) -> str:
        """An UPDATE of the request table that sets `assignments`, then dateModified to `version`, in the form
        that hands the version set back in the same round trip (writes.Writes.versioned reads it):
        LAST_INSERT_ID(expr) on MariaDB/MySQL, RETURNING on SQLite."""
        if self.is_mysql:
            sets = ", ".join([*assignments, f"dateModified = LAST_INSERT_ID({version})"])
            return f"UPDATE {REQUESTS} SET {sets} WHERE {where}"
        sets = ", ".join([*assignments, f"dateModified = {version}"])
        return f"UPDATE {REQUESTS} SET {sets} WHERE {where} RETURNING dateModified"

    def _write_statement(self, attempted: bool, with_properties: bool) -> str:
        now = self.now_sql
        assignments = ["status = %(status)s", "lastRequestResult = %(result)s"]
        if with_properties:
            assignments.append("properties = %(properties)s")
        assignments.append(f"lastRequestEpoch = {now if attempted else '0'}")
        return self._versioned(assignments, now, "id = %(id)s AND status = 'queued' AND dateModified = %(version)s")

    def _records(self, columns: Columns, sql: str, params: dict[str, Any] | None = None) -> list[Record]:
        """Every row of `sql`, whose SELECT list is `columns`, by name."""
        with self._cursor() as cursor:
            _execute(cursor, sql, params)
            return columns.read_all(cursor.fetchall())

    def _record(self, columns: Columns, sql: str, params: dict[str, Any]) -> Record | None:
        """The first row of `sql`, whose SELECT list is `columns`, by name; None without one."""
        with self._cursor() as cursor:
            _execute(cursor, sql, params)
            found = cursor.fetchone()
        return None if found is None else columns.read(found)

    def _rows(self, columns: Columns, sql: str, params: dict[str, Any]) -> tuple[list[RequestRow], int | None]:
        """Request rows of `sql` (selected as `columns`, ending with the database clock) and that clock, None
        without rows."""
        with self._cursor() as cursor:
            _execute(cursor, sql, params)
            fetched = cursor.fetchall()
        pick = columns.picker(*ROW_FIELDS)
        rows = [RequestRow.from_values(pick(values)) for values in fetched]
        return rows, (int(fetched[0][columns.names.index("now")]) if fetched else None)

    def db_now(self) -> int:
        # With params, so '%%' becomes '%' on SQLite too.
        return int(self._records(self._clock, f"SELECT {self._clock.sql}", {})[0]["now"])

    def max_request_id(self) -> tuple[int, int]:
        """The highest request id, and the database clock."""
        columns = Columns.of(top="MAX(id)", now=self.now_sql)
        found = self._records(columns, f"SELECT {columns.sql} FROM {REQUESTS}", {})[0]
        return int(found["top"] or 0), int(found["now"])

    def scan_after(self, after_id: int, limit: int) -> tuple[list[RequestRow], int | None]:
        """Rows above `after_id` in id order (any status, no properties) + db clock."""
        return self._rows(self._listed, self._scan_sql, {"after": after_id, "limit": limit})

    def fetch(self, ids: list[int]) -> tuple[list[RequestRow], int | None]:
        """The rows with these ids, by primary key (properties only for queued rows) + db clock."""
        if not ids:
            return [], None
        params: dict[str, Any] = {}
        for n, row_id in enumerate(ids):
            params.update(_numbered(n, id=row_id))
        listed = ", ".join(f"%(id{n})s" for n in range(len(ids)))
        return self._rows(self._fetched, f"{self._fetch_sql}({listed})", params)

    def large_properties(self, row_id: int) -> tuple[int, str | None] | None:
        """(length in bytes, text) of one queued row's properties; the text only when the server could have
        taken it in one statement (max_allowed_packet), so never more than a client could have written.
        None when the row is no longer queued."""
        columns = Columns.of(
            length="LENGTH(properties)", properties="CASE WHEN LENGTH(properties) < %(limit)s THEN properties END"
        )
        sql = f"SELECT {columns.sql} FROM {REQUESTS} WHERE id = %(id)s AND status = 'queued'"
        found = self._record(columns, sql, {"limit": self.max_statement_bytes(), "id": row_id})
        if found is None:
            return None
        return int(found["length"]), None if found["properties"] is None else text(found["properties"])

    def max_statement_bytes(self) -> int:
        """The server's max_allowed_packet: no INSERT of Phorge's can have carried a longer value."""
        if self._max_packet is None:
            if not self.is_mysql:
                self._max_packet = 1 << 30
            else:
                columns = Columns.of(packet="@@max_allowed_packet")
                self._max_packet = int(self._records(columns, f"SELECT {columns.sql}", {})[0]["packet"])
        return self._max_packet

    def in_ranges(self, ranges: Sequence[tuple[int, int]], limit: int) -> tuple[list[RequestRow], int | None]:
        """Rows whose id lies in one of the closed ranges, in id order (no properties), by primary key."""
        if not ranges:
            return [], None
        params: dict[str, Any] = {"limit": limit}
        for n, (low, high) in enumerate(ranges):
            params.update(_numbered(n, low=low, high=high))
        where = " OR ".join(f"id BETWEEN %(low{n})s AND %(high{n})s" for n in range(len(ranges)))
        return self._rows(
            self._listed,
            f"SELECT {self._listed.sql} FROM {REQUESTS} WHERE {where} ORDER BY id LIMIT %(limit)s",
            params,
        )

    def _union(self, branches: list[str]) -> str:
        if self.is_mysql:
            return " UNION ALL ".join(f"({branch})" for branch in branches)
        return " UNION ALL ".join(f"SELECT * FROM ({branch})" for branch in branches)

    def untried(self, cursors: Sequence[tuple[str, int]], limit: int) -> tuple[list[RequestRow], int | None]:
        """Per hook, up to `limit` queued rows never attempted (`none`, epoch 0) above the hook's cursor id.

        Read through key_ratelimit, whose (hook, 'none', 0) range is in id order: each read costs what it
        returns plus the non-queued rows it steps over, never the hook's whole history.
        """
        if not cursors:
            return [], None

        def branch(n: int) -> str:
            return (
                f"SELECT {self._listed.sql} FROM {self.dialect.requests_by_result} "
                f"WHERE webhookPHID = %(hook{n})s AND lastRequestResult = 'none' AND lastRequestEpoch = 0 "
                f"AND id > %(after{n})s AND status = 'queued' ORDER BY id LIMIT %(limit)s"
            )

        params: dict[str, Any] = {"limit": limit}
        for n, (hook, after) in enumerate(cursors):
            params.update(_numbered(n, hook=hook, after=after))
        return self._rows(self._listed, self._union([branch(n) for n in range(len(cursors))]), params)

    def retries(
        self, cursors: Sequence[tuple[str, int, int]], cutoff: int, limit: int
    ) -> tuple[list[RequestRow], int | None]:
        """Per hook, up to `limit` queued rows whose last attempt failed at or before `cutoff`, after the
        hook's cursor (epoch, id), in the order they become due (key_ratelimit order)."""
        if not cursors:
            return [], None

        def branch(n: int) -> str:
            return (
                f"SELECT {self._listed.sql} FROM {self.dialect.requests_by_result} "
                f"WHERE webhookPHID = %(hook{n})s AND lastRequestResult = 'fail' AND lastRequestEpoch <= %(cutoff)s "
                f"AND (lastRequestEpoch > %(epoch{n})s OR (lastRequestEpoch = %(epoch{n})s AND id > %(after{n})s)) "
                "AND status = 'queued' ORDER BY lastRequestEpoch, id LIMIT %(limit)s"
            )

        params: dict[str, Any] = {"cutoff": cutoff, "limit": limit}
        for n, (hook, epoch, after) in enumerate(cursors):
            params.update(_numbered(n, hook=hook, epoch=epoch, after=after))
        return self._rows(self._listed, self._union([branch(n) for n in range(len(cursors))]), params)

    def next_failures(self, hooks: Sequence[str], after_epoch: int) -> dict[str, int]:
        """Per hook, the earliest failed attempt after `after_epoch` (any status: one index dive each)."""
        if not hooks:
            return {}
        columns = REQUEST_HOOKS.plus(first="MIN(lastRequestEpoch)")

        def branch(n: int) -> str:
            return (
                f"SELECT {columns.sql} FROM {self.dialect.requests_by_result} WHERE webhookPHID = %(hook{n})s "
                "AND lastRequestResult = 'fail' AND lastRequestEpoch > %(after)s GROUP BY webhookPHID"
            )

        params: dict[str, Any] = {"after": after_epoch}
        for n, hook in enumerate(hooks):
            params.update(_numbered(n, hook=hook))
        found = self._records(columns, self._union([branch(n) for n in range(len(hooks))]), params)
        return {text(r["webhookPHID"]): int(r["first"]) for r in found if r["first"] is not None}

    def hook_phids(self) -> list[str]:
        """Every hook Phorge lists (herald_webhook is small: one row per configured hook)."""
        return [text(r["phid"]) for r in self._records(PHIDS, f"SELECT {PHIDS.sql} FROM {HOOKS}")]

    def request_hooks_after(self, after: str, limit: int) -> list[str]:
        """Distinct webhookPHIDs of the request table above `after`, by a loose scan of key_ratelimit
        (one index dive per hook): finds requests whose hook is no longer in herald_webhook."""
        sql = (
            f"SELECT DISTINCT {REQUEST_HOOKS.sql} FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID > %(after)s ORDER BY webhookPHID LIMIT %(limit)s"
        )
        return [text(r["webhookPHID"]) for r in self._records(REQUEST_HOOKS, sql, {"after": after, "limit": limit})]

    def hooks(self) -> dict[str, Hook]:
        found = self._records(HOOK_SELECT, f"SELECT {HOOK_SELECT.sql} FROM {HOOKS}")
        return {hook.phid: hook for hook in map(Hook.from_record, found)}

    def claim(
        self, row: RequestRow, *, lease: int, retry_backoff: int, lock: tuple[str, int] | None = None
    ) -> int | None:
        """Compare-and-set the version; returns the new version when this process won the row.

        With `lock` (name, session id) the claim also requires that session to hold the hook's named lock
        right now.
        """
        return self.writes.versioned(self._claim(row, lease, retry_backoff, lock))

    def _claim(self, row: RequestRow, lease: int, retry_backoff: int, lock: tuple[str, int] | None) -> Statement:
        params: dict[str, Any] = {"id": row.id, "version": row.date_modified, "retry": retry_backoff, "lease": lease}
        if lock is None or not self.is_mysql:
            return Statement(self._claim_sql, params)
        params["lock"], params["session"] = lock
        return Statement(self._locked_claim_sql, params)

    def release_claim(self, row_id: int, version: int, *, previous: int) -> bool:
        """Undo a claim no call was made under: dateModified back to `previous` (the version claimed from) if
        the row is still under our claim `version`. Nothing else was changed, so the row is as it was."""
        return self.writes.matched(
            Statement(self._release_sql, {"id": row_id, "version": version, "previous": previous})
        )

    def write_outcome(
        self, row_id: int, version: int, *, status: str, result: str, attempted: bool, properties: str | None
    ) -> int | None:
        """Write one outcome if our claim still holds; returns the database time written, None if lost.

        `properties=None` leaves the column byte-for-byte as it is. lastRequestEpoch and dateModified get
        the same clock reading, which is how is_due() recognises a row that is not under a claim.
        """
        return self.writes.versioned(self._write(row_id, version, status, result, attempted, properties))

    def _write(
        self, row_id: int, version: int, status: str, result: str, attempted: bool, properties: str | None
    ) -> Statement:
        params: dict[str, Any] = {"status": status, "result": result, "id": row_id, "version": version}
        if properties is not None:
            params["properties"] = properties
        return Statement(self._write_sql[(attempted, properties is not None)], params)

    def write_then_claim(
        self,
        written: tuple[int, int],
        outcome: WrittenOutcome,
        claim: RequestRow,
        *,
        lease: int,
        retry_backoff: int,
        lock: tuple[str, int] | None = None,
    ) -> Twice:
        """write_outcome() of the row and version in `written`, then claim() of the job's next row, in one
        round trip on MariaDB/MySQL with a pool: (as write_outcome, as claim, whether the claim's outcome is
        known). Each is committed on its own, as if made one after the other; when the claim fails after
        the write is done, whether it took is not known (a later claim of that row finds out)."""
        write = self._write(written[0], written[1], *outcome)
        return self.writes.versioned_twice(write, self._claim(claim, lease, retry_backoff, lock))

    def failed_attempts(
        self, hook_phid: str, *, since: int, until: int, after: tuple[int, int], limit: int
    ) -> list[RequestRow]:
        """A hook's failed requests whose last attempt failed in [since, until], after the (epoch, id) cursor,
        with their properties: key_ratelimit's `fail` range, in its order."""
        sql = (
            f"SELECT {self._with_properties.sql} FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID = %(hook)s AND lastRequestResult = 'fail' AND lastRequestEpoch BETWEEN %(since)s "
            "AND %(until)s AND (lastRequestEpoch > %(epoch)s OR (lastRequestEpoch = %(epoch)s AND id > %(after)s)) "
            "AND status = 'failed' ORDER BY lastRequestEpoch, id LIMIT %(limit)s"
        )
        epoch, after_id = after
        params = {"hook": hook_phid, "since": since, "until": until, "epoch": epoch, "after": after_id, "limit": limit}
        return self._rows(self._with_properties, sql, params)[0]

    def failed_unattempted(
        self, hook_phid: str, *, since: int, until: int, after_id: int, limit: int
    ) -> list[RequestRow]:
        """A hook's requests failed without an attempt (hook errors, unreadable rows: `none`, epoch 0) whose
        failure was written (dateModified) in [since, until], above `after_id`, with their properties."""
        sql = (
            f"SELECT {self._with_properties.sql} FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID = %(hook)s AND lastRequestResult = 'none' AND lastRequestEpoch = 0 AND id > %(after)s "
            "AND status = 'failed' AND dateModified BETWEEN %(since)s AND %(until)s ORDER BY id LIMIT %(limit)s"
        )
        params = {"hook": hook_phid, "after": after_id, "since": since, "until": until, "limit": limit}
        return self._rows(self._with_properties, sql, params)[0]

    def requeue(self, row: RequestRow) -> bool:
        """Put a failed request back as Phorge queued it (`queued`, `none`, epoch 0, dateModified =
        dateCreated: due at once), if it is still exactly as read. Properties are left as they are."""
        sql = (
            f"UPDATE {REQUESTS} SET status = 'queued', lastRequestResult = 'none', lastRequestEpoch = 0, "
            "dateModified = dateCreated WHERE id = %(id)s AND status = 'failed' AND lastRequestResult = %(result)s "
            "AND lastRequestEpoch = %(epoch)s AND dateModified = %(version)s"
        )
        params = {"id": row.id, "result": row.last_result, "epoch": row.last_epoch, "version": row.date_modified}
        return self.writes.matched(Statement(sql, params))

    def waiting_retries(self, hook_phid: str, *, after: int, up_to: int, limit: int) -> list[RequestRow]:
        """A hook's queued requests whose last attempt failed in (after, up_to], oldest failure first, without
        properties: those still in their retry backoff that a Retry now makes due (key_ratelimit's range)."""
        sql = (
            f"SELECT {self._listed.sql} FROM {self.dialect.requests_by_result} WHERE webhookPHID = %(hook)s "
            "AND lastRequestResult = 'fail' AND lastRequestEpoch > %(after)s AND lastRequestEpoch <= %(up_to)s "
            "AND status = 'queued' ORDER BY lastRequestEpoch, id LIMIT %(limit)s"
        )
        params = {"hook": hook_phid, "after": after, "up_to": up_to, "limit": limit}
        return self._rows(self._listed, sql, params)[0]

    def recent_failures(self, hook_phid: str, *, window: int, limit: int) -> list[int]:
        """Epochs of this hook's failed attempts inside the breaker window, newest first (key_ratelimit)."""
        failed = self.dialect.breaker_failure_sql(f"{self.now_sql} - %(window)s")
        sql = (
            f"SELECT {EPOCHS.sql} FROM {REQUESTS} WHERE webhookPHID = %(hook)s AND {failed} "
            "ORDER BY lastRequestEpoch DESC LIMIT %(limit)s"
        )
        found = self._records(EPOCHS, sql, {"hook": hook_phid, "window": window, "limit": limit})
        return [int(r["lastRequestEpoch"]) for r in found]

    def recycle_connection(self) -> None:
        """Before a poll: replace the connection if it went bad or outlived CONN_MAX_AGE."""
        connections[self.alias].close_if_unusable_or_obsolete()

    def drop_connection(self) -> None:
        """After an outage: the next statement opens a new connection."""
        close_quietly(connections[self.alias])

    def close(self) -> None:
        self.connection.close()
