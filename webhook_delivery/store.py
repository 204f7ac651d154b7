"""The one module that talks SQL to Phorge's herald tables for delivery, and the only one that writes.

It never inserts or deletes, and only UPDATEs herald_webhookrequest rows through a claim: the claim is a
compare-and-set on `dateModified` (the version), and every result write is guarded by the claimed
version, so a lost claim writes nothing. All times are the database's clock. The one other write,
`requeue` (for `manage.py requeue_webhooks`), is guarded the same way: only a failed row still exactly as
read.

Without a session pool it uses the calling thread's own connection (the worker's main thread, the
tests); with one (the delivery threads) it borrows a pooled connection for each statement. Phorge's named
per-hook locks live on the process's lock session (sessions.LockSession), and a claim only succeeds while
the hook's lock is still held by that session.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connections

from .config import PHORGE_ALIAS
from .herald import HOOKS, REQUEST_COLUMNS, REQUESTS, Dialect, Hook, RequestRow, text
from .sessions import SessionPool

INLINE_PROPERTIES = 256 * 1024  # bytes: larger properties are read one row at a time


class Store:
    def __init__(self, alias: str = PHORGE_ALIAS, *, pool: SessionPool | None = None) -> None:
        self.alias = alias
        self.pool = pool
        self._max_packet: int | None = None
        self.dialect = Dialect(str(connections[alias].vendor))
        self.is_mysql = self.dialect.is_mysql
        self.now_sql = now = self.dialect.now_sql
        # Built once: these run for every delivery.
        self._scan_sql = f"SELECT {REQUEST_COLUMNS}, NULL, {now} FROM {REQUESTS} WHERE id > %s ORDER BY id LIMIT %s"
        # Large properties are left out of a batch and read alone (Store.large_properties), one or two at a time.
        with_properties = (
            f"CASE WHEN status = 'queued' AND LENGTH(properties) <= {INLINE_PROPERTIES} THEN properties END"
        )
        self._fetch_sql = f"SELECT {REQUEST_COLUMNS}, {with_properties}, {now} FROM {REQUESTS} WHERE id IN "
        version = self.dialect.greatest("dateModified + 1", now)
        claim_where = f"WHERE id = %s AND dateModified = %s AND {self.dialect.due_sql(positional=True)}"
        if self.is_mysql:
            self._claim_sql = f"UPDATE {REQUESTS} SET dateModified = LAST_INSERT_ID({version}) {claim_where}"
            self._locked_claim_sql = f"{self._claim_sql} AND IS_USED_LOCK(%s) = %s"
        else:
            self._claim_sql = f"UPDATE {REQUESTS} SET dateModified = {version} {claim_where} RETURNING dateModified"
            self._locked_claim_sql = self._claim_sql
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

    def _write_statement(self, attempted: bool, with_properties: bool) -> str:
        now = self.now_sql
        stamp = f"LAST_INSERT_ID({now})" if self.is_mysql else now
        assignments = ["status = %s", "lastRequestResult = %s"]
        if with_properties:
            assignments.append("properties = %s")
        assignments.append(f"lastRequestEpoch = {now if attempted else '0'}")
        assignments.append(f"dateModified = {stamp}")
        sql = (
            f"UPDATE {REQUESTS} SET {', '.join(assignments)} WHERE id = %s AND status = 'queued' AND dateModified = %s"
        )
        return sql if self.is_mysql else f"{sql} RETURNING dateModified"

    def _rows(self, sql: str, params: Any) -> tuple[list[RequestRow], int | None]:
        """Rows of `sql` (whose last column is the database clock) and that clock, None without rows."""
        with self._cursor() as cursor:
            cursor.execute(sql, params)
            fetched = cursor.fetchall()
        rows = [RequestRow.from_columns(r) for r in fetched]
        return rows, (int(fetched[0][-1]) if fetched else None)

    def db_now(self) -> int:
        with self._cursor() as cursor:
            cursor.execute(f"SELECT {self.now_sql}", ())  # with params, so '%%' becomes '%' on SQLite too
            return int(cursor.fetchone()[0])

    def max_request_id(self) -> tuple[int, int]:
        """The highest request id, and the database clock."""
        with self._cursor() as cursor:
            cursor.execute(f"SELECT MAX(id), {self.now_sql} FROM {REQUESTS}", ())
            top, now = cursor.fetchone()
        return int(top or 0), int(now)

    def scan_after(self, after_id: int, limit: int) -> tuple[list[RequestRow], int | None]:
        """Rows above `after_id` in id order (any status, no properties) + db clock."""
        return self._rows(self._scan_sql, (after_id, limit))

    def fetch(self, ids: list[int]) -> tuple[list[RequestRow], int | None]:
        """The rows with these ids, by primary key (properties only for queued rows) + db clock."""
        if not ids:
            return [], None
        return self._rows(f"{self._fetch_sql}({', '.join(['%s'] * len(ids))})", ids)

    def large_properties(self, row_id: int) -> tuple[int, str | None] | None:
        """(length in bytes, text) of one queued row's properties; the text only when the server could have
        taken it in one statement (max_allowed_packet), so never more than a client could have written.
        None when the row is no longer queued."""
        limit = self.max_statement_bytes()
        sql = (
            f"SELECT LENGTH(properties), CASE WHEN LENGTH(properties) < %s THEN properties END "
            f"FROM {REQUESTS} WHERE id = %s AND status = 'queued'"
        )
        with self._cursor() as cursor:
            cursor.execute(sql, (limit, row_id))
            found = cursor.fetchone()
        if found is None:
            return None
        return int(found[0]), None if found[1] is None else text(found[1])

    def max_statement_bytes(self) -> int:
        """The server's max_allowed_packet: no INSERT of Phorge's can have carried a longer value."""
        if self._max_packet is None:
            if not self.is_mysql:
                self._max_packet = 1 << 30
            else:
                with self._cursor() as cursor:
                    cursor.execute("SELECT @@max_allowed_packet", ())
                    self._max_packet = int(cursor.fetchone()[0])
        return self._max_packet

    def in_ranges(self, ranges: Sequence[tuple[int, int]], limit: int) -> tuple[list[RequestRow], int | None]:
        """Rows whose id lies in one of the closed ranges, in id order (no properties), by primary key."""
        if not ranges:
            return [], None
        where = " OR ".join(["id BETWEEN %s AND %s"] * len(ranges))
        return self._rows(
            f"SELECT {REQUEST_COLUMNS}, NULL, {self.now_sql} FROM {REQUESTS} WHERE {where} ORDER BY id LIMIT %s",
            [bound for pair in ranges for bound in pair] + [limit],
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
        branch = (
            f"SELECT {REQUEST_COLUMNS}, NULL, {self.now_sql} FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID = %s AND lastRequestResult = 'none' AND lastRequestEpoch = 0 AND id > %s "
            "AND status = 'queued' ORDER BY id LIMIT %s"
        )
        return self._rows(
            self._union([branch] * len(cursors)), [v for hook, after in cursors for v in (hook, after, limit)]
        )

    def retries(
        self, cursors: Sequence[tuple[str, int, int]], cutoff: int, limit: int
    ) -> tuple[list[RequestRow], int | None]:
        """Per hook, up to `limit` queued rows whose last attempt failed at or before `cutoff`, after the
        hook's cursor (epoch, id), in the order they become due (key_ratelimit order)."""
        if not cursors:
            return [], None
        branch = (
            f"SELECT {REQUEST_COLUMNS}, NULL, {self.now_sql} FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID = %s AND lastRequestResult = 'fail' AND lastRequestEpoch <= %s "
            "AND (lastRequestEpoch > %s OR (lastRequestEpoch = %s AND id > %s)) AND status = 'queued' "
            "ORDER BY lastRequestEpoch, id LIMIT %s"
        )
        params = [v for hook, epoch, after in cursors for v in (hook, cutoff, epoch, epoch, after, limit)]
        return self._rows(self._union([branch] * len(cursors)), params)

    def next_failures(self, hooks: Sequence[str], after_epoch: int) -> dict[str, int]:
        """Per hook, the earliest failed attempt after `after_epoch` (any status: one index dive each)."""
        if not hooks:
            return {}
        branch = (
            f"SELECT webhookPHID, MIN(lastRequestEpoch) FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID = %s AND lastRequestResult = 'fail' AND lastRequestEpoch > %s GROUP BY webhookPHID"
        )
        with self._cursor() as cursor:
            cursor.execute(self._union([branch] * len(hooks)), [v for hook in hooks for v in (hook, after_epoch)])
            return {text(phid): int(epoch) for phid, epoch in cursor.fetchall() if epoch is not None}

    def hook_phids(self) -> list[str]:
        """Every hook Phorge lists (herald_webhook is small: one row per configured hook)."""
        with self._cursor() as cursor:
            cursor.execute(f"SELECT phid FROM {HOOKS}")
            return [text(phid) for (phid,) in cursor.fetchall()]

    def request_hooks_after(self, after: str, limit: int) -> list[str]:
        """Distinct webhookPHIDs of the request table above `after`, by a loose scan of key_ratelimit
        (one index dive per hook): finds requests whose hook is no longer in herald_webhook."""
        sql = (
            f"SELECT DISTINCT webhookPHID FROM {self.dialect.requests_by_result} WHERE webhookPHID > %s "
            "ORDER BY webhookPHID LIMIT %s"
        )
        with self._cursor() as cursor:
            cursor.execute(sql, (after, limit))
            return [text(phid) for (phid,) in cursor.fetchall()]

    def hooks(self) -> dict[str, Hook]:
        with self._cursor() as cursor:
            cursor.execute(f"SELECT phid, name, status, webhookURI, hmacKey FROM {HOOKS}")
            return {
                text(phid): Hook(text(phid), text(name), text(status), text(uri), text(key))
                for phid, name, status, uri, key in cursor.fetchall()
            }

    def claim(
        self, row: RequestRow, *, lease: int, retry_backoff: int, lock: tuple[str, int] | None = None
    ) -> int | None:
        """Compare-and-set the version; returns the new version when this process won the row.

        With `lock` (name, session id) the claim also requires that session to hold the hook's named lock
        right now.
        """
        params: tuple[Any, ...] = (row.id, row.date_modified, retry_backoff, lease)
        sql = self._claim_sql
        if lock is not None and self.is_mysql:
            sql, params = self._locked_claim_sql, (*params, *lock)
        return self._guarded_update(sql, params)

    def write_outcome(
        self, row_id: int, version: int, *, status: str, result: str, attempted: bool, properties: str | None
    ) -> int | None:
        """Write one outcome if our claim still holds; returns the database time written, None if lost.

        `properties=None` leaves the column byte-for-byte as it is. lastRequestEpoch and dateModified get
        the same clock reading, which is how is_due() recognises a row that is not under a claim.
        """
        sql = self._write_sql[(attempted, properties is not None)]
        params = (
            (status, result, properties, row_id, version)
            if properties is not None
            else (status, result, row_id, version)
        )
        return self._guarded_update(sql, params)

    def _guarded_update(self, sql: str, params: tuple[Any, ...]) -> int | None:
        """Run a one-row compare-and-set UPDATE; the dateModified it set, or None when no row matched.

        MySQL hands the value back through LAST_INSERT_ID(expr), SQLite through RETURNING: one round trip.
        """
        with self._cursor() as cursor:
            cursor.execute(sql, params)
            if self.is_mysql:
                return int(cursor.lastrowid) if cursor.rowcount == 1 else None
            row = cursor.fetchone()
            return None if row is None else int(row[0])

    def failed_attempts(
        self, hook_phid: str, *, since: int, until: int, after: tuple[int, int], limit: int
    ) -> list[RequestRow]:
        """A hook's failed requests whose last attempt failed in [since, until], after the (epoch, id) cursor,
        with their properties: key_ratelimit's `fail` range, in its order."""
        sql = (
            f"SELECT {REQUEST_COLUMNS}, properties, {self.now_sql} FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID = %s AND lastRequestResult = 'fail' AND lastRequestEpoch BETWEEN %s AND %s "
            "AND (lastRequestEpoch > %s OR (lastRequestEpoch = %s AND id > %s)) AND status = 'failed' "
            "ORDER BY lastRequestEpoch, id LIMIT %s"
        )
        epoch, after_id = after
        return self._rows(sql, (hook_phid, since, until, epoch, epoch, after_id, limit))[0]

    def failed_unattempted(
        self, hook_phid: str, *, since: int, until: int, after_id: int, limit: int
    ) -> list[RequestRow]:
        """A hook's requests failed without an attempt (hook errors, unreadable rows: `none`, epoch 0) whose
        failure was written (dateModified) in [since, until], above `after_id`, with their properties."""
        sql = (
            f"SELECT {REQUEST_COLUMNS}, properties, {self.now_sql} FROM {self.dialect.requests_by_result} "
            "WHERE webhookPHID = %s AND lastRequestResult = 'none' AND lastRequestEpoch = 0 AND id > %s "
            "AND status = 'failed' AND dateModified BETWEEN %s AND %s ORDER BY id LIMIT %s"
        )
        return self._rows(sql, (hook_phid, after_id, since, until, limit))[0]

    def requeue(self, row: RequestRow) -> bool:
        """Put a failed request back as Phorge queued it (`queued`, `none`, epoch 0, dateModified =
        dateCreated: due at once), if it is still exactly as read. Properties are left as they are."""
        sql = (
            f"UPDATE {REQUESTS} SET status = 'queued', lastRequestResult = 'none', lastRequestEpoch = 0, "
            "dateModified = dateCreated WHERE id = %s AND status = 'failed' AND lastRequestResult = %s "
            "AND lastRequestEpoch = %s AND dateModified = %s"
        )
        with self._cursor() as cursor:
            cursor.execute(sql, (row.id, row.last_result, row.last_epoch, row.date_modified))
            return bool(cursor.rowcount == 1)

    def recent_failures(self, hook_phid: str, *, window: int, limit: int) -> list[int]:
        """Epochs of this hook's failed attempts inside the breaker window, newest first (key_ratelimit)."""
        failed = self.dialect.breaker_failure_sql(f"{self.now_sql} - %s")
        sql = (
            f"SELECT lastRequestEpoch FROM {REQUESTS} WHERE webhookPHID = %s AND {failed} "
            "ORDER BY lastRequestEpoch DESC LIMIT %s"
        )
        with self._cursor() as cursor:
            cursor.execute(sql, (hook_phid, window, limit))
            return [int(r[0]) for r in cursor.fetchall()]

    def close(self) -> None:
        self.connection.close()
