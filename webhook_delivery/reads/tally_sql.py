"""The reads of Phorge's request table that keep the tally (tally_refresh.py), each by primary-key range or
through a key Phorge has: MIN/MAX dives on the primary key and key_collect, ranges of ids grouped by the
database (what comes back is one row per chunk, hook, status and error, not one per request), runs of ids
computed by the database (`id - ROW_NUMBER()`: consecutive ids share it), a hook's never-attempted slice of
key_ratelimit, and Phorge's optional key_status (status, id) where it exists.

Ids in the statements are this module's own integers, written into the SQL: a refresh can name thousands.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..config import DeliveryConfig
from ..phorge.columns import Columns, positional
from ..phorge.herald import REQUESTS, Dialect, text
from .herald import json_text
from .tally import CHUNK, Group, Run, normalized

BETWEENS_PER_STATEMENT = 200  # SQLite nests an OR chain: its expression depth is limited
IDS_PER_STATEMENT = 5000
REFUSALS_PER_CHUNK = 50
KEY_STATUS = "key_status"


def id_conditions(runs: Sequence[Run]) -> Iterator[str]:
    """`runs` as conditions on `id`, as many statements' worth as it takes."""
    singles: list[int] = []
    ranges: list[Run] = []

    def condition() -> str:
        parts = [f"id BETWEEN {int(low)} AND {int(high)}" for low, high in ranges]
        if singles:
            parts.append("id IN (" + ", ".join(str(int(one)) for one in singles) + ")")
        return "(" + " OR ".join(parts) + ")"

    for low, high in runs:
        if low == high:
            singles.append(low)
        else:
            ranges.append((low, high))
        if len(ranges) >= BETWEENS_PER_STATEMENT or len(singles) >= IDS_PER_STATEMENT:
            yield condition()
            singles, ranges = [], []
    if singles or ranges:
        yield condition()


@contextmanager
def consistent_snapshot(connection: Any) -> Iterator[None]:
    """Every read inside sees the table as it was at the first one (InnoDB's consistent read, SQLite's read
    transaction): the counts of one refresh are of one moment, whatever the workers write meanwhile."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        else:
            cursor.execute("BEGIN")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ROLLBACK")


@dataclass(frozen=True)
class Bounds:
    now: int
    max_id: int  # 0: no request
    min_id: int
    min_created: int


class TallyReader:
    """Reads on one connection (the caller holds one consistent snapshot open on it); counts its statements."""

    def __init__(self, connection: Any, config: DeliveryConfig) -> None:
        self.connection = connection  # a Django connection of its own (connections.create_connection)
        self.config = config
        self.dialect = Dialect(str(connection.vendor))
        self.statements = 0
        self._groups = self._group_columns()

    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        self.statements += 1
        text_sql, values = positional(sql, params or {})
        with self.connection.cursor() as cursor:
            cursor.execute(text_sql, values)
            return list(cursor.fetchall())

    def bounds(self) -> Bounds:
        # One aggregate per subquery: SQLite serves MIN and MAX from an index only alone in their query.
        (row,) = self._rows(
            f"SELECT {self.dialect.now_sql}, (SELECT MAX(id) FROM {REQUESTS}), (SELECT MIN(id) FROM {REQUESTS}), "
            f"(SELECT MIN(dateCreated) FROM {REQUESTS})"
        )
        now, high, low, created = row
        return Bounds(int(now), int(high or 0), int(low or 0), int(created or 0))

    def phid_at(self, row_id: int) -> str | None:
        rows = self._rows(f"SELECT phid FROM {REQUESTS} WHERE id = %(id)s", {"id": row_id})
        return text(rows[0][0]) if rows else None

    # -- ranges of ids, grouped by the database ---------------------------------------------------------

    def _group_columns(self) -> Columns:
        dialect = self.dialect
        due = dialect.due_sql("%(now)s")
        chunk = f"id DIV {CHUNK}" if dialect.is_mysql else f"id / {CHUNK}"
        return Columns.of(
            chunk=f"{chunk} AS chunk",
            hook="webhookPHID",
            status="status",
            result="lastRequestResult",
            error_type=f"{self._short(json_text(dialect, 'errorType'))} AS error_type",
            error_code=f"{self._short(json_text(dialect, 'errorCode'))} AS error_code",
            requests="COUNT(*)",
            refused_at="MAX(CASE WHEN lastRequestResult = 'none' AND status = 'failed' THEN dateModified ELSE 0 END)",
            oldest="MIN(dateCreated)",
            due=f"SUM(CASE WHEN {due} THEN 1 ELSE 0 END)",
            due_since=f"MIN(CASE WHEN {due} THEN {dialect.due_since_sql()} END)",
        )

    def _short(self, text_sql: str) -> str:
        # JSON_UNQUOTE gives LONGTEXT, and a GROUP BY on a text column makes MariaDB group on disk.
        return f"CAST({text_sql} AS CHAR(255))" if self.dialect.is_mysql else text_sql

    def groups(self, runs: Sequence[Run], now: int) -> list[Group]:
        """The requests of these ids, grouped by chunk, hook, status, result and error; queued ones with how
        many were due at `now` and since when."""
        params = {"now": now, "lease": self.config.claim_lease_sec, "retry": self.config.retry_backoff_sec}
        found: list[Group] = []
        for condition in id_conditions(runs):
            rows = self._rows(
                f"SELECT {self._groups.sql} FROM {REQUESTS} WHERE {condition} "
                "GROUP BY chunk, webhookPHID, status, lastRequestResult, error_type, error_code",
                params,
            )
            for row in self._groups.read_all(rows):
                error_type = row["error_type"]
                found.append(
                    Group(
                        chunk=int(row["chunk"]),
                        hook=text(row["hook"]),
                        status=text(row["status"]),
                        result=text(row["result"]),
                        error=None if error_type is None else (text(error_type), text(row["error_code"])),
                        requests=int(row["requests"]),
                        refused_at=int(row["refused_at"] or 0),
                        oldest=int(row["oldest"]),
                        due=int(row["due"] or 0),
                        due_since=None if row["due_since"] is None else int(row["due_since"]),
                    )
                )
        return found

    def _runs(self, where: str, table: str = REQUESTS) -> list[Run]:
        rows = self._rows(
            f"SELECT MIN(id), MAX(id) FROM (SELECT id, id - ROW_NUMBER() OVER (ORDER BY id) AS run "
            f"FROM {table} WHERE {where}) AS ids GROUP BY run"
        )
        return [(int(low), int(high)) for low, high in rows]

    def queued_runs(self, runs: Sequence[Run]) -> list[Run]:
        """Which of these ids are queued requests, as runs."""
        found: list[Run] = []
        for condition in id_conditions(runs):
            found += self._runs(f"{condition} AND status = 'queued'")
        return normalized(found)

    def existing_runs(self, runs: Sequence[Run]) -> list[Run]:
        """Which of these ids are requests at all, as runs."""
        found: list[Run] = []
        for condition in id_conditions(runs):
            found += self._runs(condition)
        return normalized(found)

    def refusals(self, chunk: int, hook: str, since: int) -> list[tuple[int, int, str]]:
        """A hook's newest failures without a call in a chunk since `since`: (dateModified, id, hook)."""
        low = chunk * CHUNK
        rows = self._rows(
            f"SELECT dateModified, id FROM {self.dialect.requests_by_result} WHERE webhookPHID = %(hook)s "
            "AND lastRequestResult = 'none' AND lastRequestEpoch = 0 AND id BETWEEN %(low)s AND %(high)s "
            "AND status = 'failed' AND dateModified >= %(since)s ORDER BY dateModified DESC, id DESC LIMIT %(limit)s",
            {"low": low, "high": low + CHUNK - 1, "hook": hook, "since": since, "limit": REFUSALS_PER_CHUNK},
        )
        return [(int(modified), int(row_id), hook) for modified, row_id in rows]

    # -- requests put back in the queue -----------------------------------------------------------------

    def untried_queued(self, hook: str, lowest: int, highest: int) -> list[int]:
        """A hook's queued, never-attempted requests from `lowest` to `highest` (a requeue leaves them so),
        through its slice of key_ratelimit."""
        rows = self._rows(
            f"SELECT id FROM {self.dialect.requests_by_result} WHERE webhookPHID = %(hook)s "
            "AND lastRequestResult = 'none' AND lastRequestEpoch = 0 AND id BETWEEN %(low)s AND %(high)s "
            "AND status = 'queued'",
            {"hook": hook, "low": lowest, "high": highest},
        )
        return [int(row_id) for (row_id,) in rows]

    def has_key_status(self) -> bool:
        """Whether Phorge's table has an index that starts with `status` (the fork's key_status)."""
        self.statements += 1
        with self.connection.cursor() as cursor:
            if self.dialect.is_mysql:
                cursor.execute(f"SHOW INDEX FROM {REQUESTS}")
                columns = [column[0] for column in cursor.description]
                rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
                return any(
                    r["Key_name"] == KEY_STATUS and r["Seq_in_index"] == 1 and r["Column_name"] == "status"
                    for r in rows
                )
            cursor.execute(f"PRAGMA index_list({REQUESTS})")
            names = [row[1] for row in cursor.fetchall()]
            for name in names:
                cursor.execute(f'PRAGMA index_info("{name}")')
                info = sorted(cursor.fetchall())
                if info and info[0][2] == "status":
                    return True
            return False

    def all_queued_runs(self, highest: int) -> list[Run]:
        """Every queued request up to `highest`, as runs, through key_status."""
        table = f"{REQUESTS} FORCE INDEX ({KEY_STATUS})" if self.dialect.is_mysql else REQUESTS
        return self._runs(f"status = 'queued' AND id <= {int(highest)}", table)
