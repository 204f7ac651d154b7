"""The SQL reads of Phorge's herald tables that the pages, the JSON diagnostics and the alert watcher share:
the hooks, the recent failures, one request, and what is left to Phorge's PHP worker (the queue's figures
are in queue.py, the watcher's own reads in watching.py).

Upstream Phorge has no index on `herald_webhookrequest.status`, and a week of a busy site is a million
rows, so nothing here filters on status alone, nor counts the history: requests are reached by id, by PHID
(key_phid), or through key_ratelimit (webhookPHID, lastRequestResult, lastRequestEpoch), a hook and a result
at a time. Requests of a hook that no longer exists are not shown (Phorge deletes a hook's requests before
the hook itself).

The secret columns are never selected: the only use of hmacKey is the boolean `hmacKey = ''`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from django.db import DatabaseError, connections, transaction

from ..config import DeliveryConfig
from ..phorge.columns import Columns, in_filter
from ..phorge.databases import qualified
from ..phorge.herald import HOOKS, REQUEST_COLUMNS, REQUESTS, Dialect, RequestRow, text
from ..phorge.payload import phid_get_type
from ..phorge.php_guard import WEBHOOK_TASK_CLASS
from ..phorge.phpjson import UndecodableProperties, decode_properties
from . import replica
from .health import QueueHealth
from .replica import read_alias

RECENT_FAILURES = 20
PENDING_RESULTS = "lastRequestResult IN ('none', 'fail')"


def read_dialect() -> Dialect:
    return Dialect(str(connections[read_alias()].vendor))


def as_int(value: Any) -> int:
    return 0 if value is None else int(value)


def fetch_rows(sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    # Always pass a mapping, even an empty one, so `%%` in the SQLite clock expression is unescaped.
    with connections[read_alias()].cursor() as cursor:
        cursor.execute(sql, dict(params))
        return list(cursor.fetchall())


def _one(sql: str, params: Mapping[str, Any]) -> Any:
    """The value of a statement that selects one column of one row (a count, the clock)."""
    ((value,),) = fetch_rows(sql, params)
    return value


P = ParamSpec("P")
R = TypeVar("R")


def uncommitted_reads(func: Callable[P, R]) -> Callable[P, R]:
    """Run the queries of `func` in one READ UNCOMMITTED transaction on MySQL/MariaDB.

    Counting is a covering scan of key_ratelimit, but under a snapshot InnoDB visits the row behind every
    index entry newer than the oldest open transaction: one long transaction elsewhere (a nightly
    `mysqldump --single-transaction`) made a million-row dashboard forty times slower. A count that
    includes a write still in flight is fine for diagnostics.
    """

    @functools.wraps(func)
    def reading(*args: P.args, **kwargs: P.kwargs) -> R:
        with replica.consistent() as alias:
            connection = connections[alias]
            if connection.vendor != "mysql" or connection.in_atomic_block:
                return func(*args, **kwargs)
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            with transaction.atomic(using=alias):
                return func(*args, **kwargs)

    return reading


def hook_filter(phids: Sequence[str], column: str = "webhookPHID") -> tuple[str, dict[str, Any]]:
    return in_filter(column, phids, "hook")


FAILED_ROW = "(status = 'failed' OR lastRequestResult = 'fail')"


def json_text(dialect: Dialect, key: str, *, only_failed: bool = True, column: str = "properties") -> str:
    """properties.<key> as text, read by the database (NULL when absent or not JSON); by default only of a
    failed row: only failures carry a meaningful error."""
    failed = f"{FAILED_ROW} AND " if only_failed else ""
    if dialect.is_mysql:
        value = f"JSON_UNQUOTE(JSON_EXTRACT({column}, '$.{key}'))"
        return f"CASE WHEN {failed}JSON_VALID({column}) THEN {value} END"
    return f"CASE WHEN {failed}json_valid({column}) THEN json_extract({column}, '$.{key}') END"


def stored_error_sql(key: str) -> str:
    """SQL for properties.<key> (errorType, errorCode) of any row, read by the database: for lists that show
    the error and must not load the properties."""
    return json_text(read_dialect(), key, only_failed=False)


SHOWN_PROPERTIES = 256 * 1024  # bytes decoded for a page; beyond, the database reads out what is shown


# -- hooks -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HookRow:
    phid: str
    name: str
    status: str
    misconfigured: bool  # empty HMAC key: the worker never calls it unsigned
    id: int = 0  # Phorge's id: its pages are /herald/webhook/view/<id>/


def hooks(only: Sequence[str] | None = None) -> tuple[int, list[HookRow]]:
    """Every hook, or the ones named (no URI, no key), and the database clock."""
    dialect = read_dialect()
    where, params = hook_filter(only, column="phid") if only is not None else ("1 = 1", {})
    columns = Columns.of("phid", "name", "status", no_key="hmacKey = '' AS no_key", now=dialect.now_sql, id="id")
    rows = columns.read_all(fetch_rows(f"SELECT {columns.sql} FROM {HOOKS} WHERE {where} ORDER BY name, id", params))
    now = int(rows[0]["now"]) if rows else int(_one(f"SELECT {dialect.now_sql}", {}))
    return now, [
        HookRow(text(r["phid"]), text(r["name"]), text(r["status"]), bool(r["no_key"]), as_int(r["id"])) for r in rows
    ]


def hook_total() -> int:
    return as_int(_one(f"SELECT COUNT(*) FROM {HOOKS}", {}))


# -- recent failures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecentFailure:
    id: int
    phid: str
    hook_phid: str
    hook_name: str
    hook_id: int
    status: str
    last_result: str
    failed_at: int
    error_type: str
    error_code: str


RECENT_ATTEMPTS_SEC = 86400


def _failure_ids(health: QueueHealth, since: int, limit: int) -> list[int]:
    """The newest failed attempts of each hook that failed since `since` (at most `limit` each, read from the
    end of its `fail` slice of key_ratelimit), and the newest failures without a call the tally saw."""
    attempted = [h.phid for h in health.hooks if h.last_failed_attempt and h.last_failed_attempt >= since]
    found = [row_id for _modified, row_id, _hook in health.refusals]
    table = read_dialect().requests_by_result
    for start in range(0, len(attempted), 50):
        batch = attempted[start : start + 50]
        params: dict[str, Any] = {"since": since, "limit": limit}
        parts = []
        for index, phid in enumerate(batch):
            params[f"h{index}"] = phid
            parts.append(
                f"SELECT id FROM (SELECT id FROM {table} WHERE webhookPHID = %(h{index})s "
                "AND lastRequestResult = 'fail' AND lastRequestEpoch >= %(since)s "
                f"ORDER BY lastRequestEpoch DESC, id DESC LIMIT %(limit)s) AS a{index}"
            )
        found += [as_int(row_id) for (row_id,) in fetch_rows(" UNION ALL ".join(parts), params)]
    return found


@uncommitted_reads
def recent_failures(health: QueueHealth, *, limit: int = RECENT_FAILURES) -> list[RecentFailure]:
    """The newest failures: failed attempts of the last day and failures without a call (hook errors).

    Only hooks whose latest failed attempt is of the last day are read, each from the end of its `fail`
    slice of key_ratelimit; hook errors (written with lastRequestEpoch = 0 and the failure time in
    dateModified) are the ones the tally saw in the last day. Each is read again by id, as it is now.
    """
    dialect = read_dialect()
    by_phid = {hook.phid: hook for hook in health.hooks}
    since = health.now - RECENT_ATTEMPTS_SEC
    failure = Columns.of(
        "id",
        "phid",
        "webhookPHID",
        "status",
        "lastRequestResult",
        "dateModified",
        error_type=json_text(dialect, "errorType"),
        error_code=json_text(dialect, "errorCode"),
    )
    ids = sorted(set(_failure_ids(health, since, limit)))
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(ids), 1000):
        where, params = in_filter("id", ids[start : start + 1000], "id")
        rows += fetch_rows(
            f"SELECT {failure.sql} FROM {REQUESTS} WHERE {where} AND (lastRequestResult = 'fail' "
            "OR (lastRequestResult = 'none' AND lastRequestEpoch = 0 AND status = 'failed'))",
            params,
        )
    found = sorted(failure.read_all(rows), key=lambda r: (as_int(r["dateModified"]), as_int(r["id"])), reverse=True)
    return [
        RecentFailure(
            id=as_int(r["id"]),
            phid=text(r["phid"]),
            hook_phid=text(r["webhookPHID"]),
            hook_name=by_phid[text(r["webhookPHID"])].name if text(r["webhookPHID"]) in by_phid else "",
            hook_id=by_phid[text(r["webhookPHID"])].id if text(r["webhookPHID"]) in by_phid else 0,
            status=text(r["status"]),
            last_result=text(r["lastRequestResult"]),
            failed_at=as_int(r["dateModified"]),
            error_type=text(r["error_type"]),
            error_code=text(r["error_code"]),
        )
        for r in found[:limit]
    ]


# -- one request, as Phorge holds it -----------------------------------------------------------------


@dataclass(frozen=True)
class RequestDetail:
    row: RequestRow
    properties: dict[str, Any] | None  # None: not JSON PHP would accept (the worker leaves such a row alone)
    hook_name: str | None  # None: the hook is gone
    hook_id: int | None
    hook_status: str | None

    @property
    def object_type(self) -> str:
        return phid_get_type(self.row.object_phid)

    @property
    def error_type(self) -> str:
        return str((self.properties or {}).get("errorType", ""))

    @property
    def error_code(self) -> str:
        return str((self.properties or {}).get("errorCode", ""))


def request_detail(phid: str) -> RequestDetail | None:
    """One request and its hook's name and status (never the hook's URI or key)."""
    dialect = read_dialect()
    fields = [column.strip() for column in REQUEST_COLUMNS.split(",")]
    columns = Columns.of(
        **{field: f"r.{field}" for field in fields},
        properties=f"CASE WHEN LENGTH(r.properties) <= {SHOWN_PROPERTIES} THEN r.properties END",
        hook_name="h.name",
        hook_id="h.id",
        hook_status="h.status",
        is_json="JSON_VALID(r.properties)" if dialect.is_mysql else "json_valid(r.properties)",
        **{
            name: json_text(dialect, key, only_failed=False, column="r.properties")
            for name, key in (("error_type", "errorType"), ("error_code", "errorCode"))
        },
    )
    rows = fetch_rows(
        f"SELECT {columns.sql} FROM {REQUESTS} r LEFT JOIN {HOOKS} h ON h.phid = r.webhookPHID WHERE r.phid = %(phid)s",
        {"phid": phid},
    )
    if not rows:
        return None
    found = columns.read(rows[0])
    row = RequestRow.from_record(found)
    properties: dict[str, Any] | None
    if row.properties is not None:
        try:
            properties = decode_properties(row.properties)
        except UndecodableProperties:
            properties = None
    else:  # too large to decode for a page: only what the page shows, read by the database
        read_out = {"errorType": found["error_type"], "errorCode": found["error_code"]}
        properties = (
            {key: text(value) for key, value in read_out.items() if value is not None} if found["is_json"] else None
        )
    name, hook_id, hook_status = found["hook_name"], found["hook_id"], found["hook_status"]
    return RequestDetail(
        row=row,
        properties=properties,
        hook_name=None if name is None else text(name),
        hook_id=None if hook_id is None else as_int(hook_id),
        hook_status=None if hook_status is None else text(hook_status),
    )


# -- what is left to Phorge's own PHP worker ---------------------------------------------------------


def due_left_to_php(health: QueueHealth, config: DeliveryConfig) -> int | None:
    """How many of the due requests have a live HeraldWebhookWorker task (the worker leaves those to PHP);
    None when Phorge's worker queue cannot be read.

    One query, driven by the task table's `taskClass` key (a handful of rows once PHP stops delivering)
    into herald_webhookrequest's `key_phid` (the join order is forced: as a semi-join the optimizer would
    rather scan the requests). The derived table keeps the two tables' dateModified apart.
    """
    if not health.due_now:
        return 0
    dialect = read_dialect()
    tasks = qualified(config.namespace, "worker", "worker_activetask")
    join = "STRAIGHT_JOIN" if dialect.is_mysql else "JOIN"
    where, params = hook_filter(health.hook_phids)
    try:
        count = _one(
            f"SELECT COUNT(*) FROM (SELECT DISTINCT objectPHID FROM {tasks} WHERE taskClass = %(task_class)s) AS t "
            f"{join} {REQUESTS} ON phid = t.objectPHID "
            f"WHERE {where} AND {PENDING_RESULTS} AND {dialect.due_sql('%(now)s')}",
            {
                **params,
                "task_class": WEBHOOK_TASK_CLASS,
                "now": health.now,
                "lease": config.claim_lease_sec,
                "retry": config.retry_backoff_sec,
            },
        )
    except DatabaseError:
        return None
    return as_int(count)
