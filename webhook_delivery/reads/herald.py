"""The SQL reads of Phorge's herald tables that the dashboard, the JSON diagnostics, the web metrics and the
alert watcher make (the model they feed is in health.py; the watcher's own reads are in watching.py).

Upstream Phorge has no index on `herald_webhookrequest.status`, and a week of a busy site is a million
rows, so nothing here filters on status alone. Two facts keep every query on `key_ratelimit`
(webhookPHID, lastRequestResult, lastRequestEpoch):

* `lastRequestResult = 'okay'` exactly when `status = 'sent'` (Phorge and the worker write them
  together), so sent rows are counted from the index alone;
* queued and failed rows all have `lastRequestResult IN ('none', 'fail')`, a small slice of the index
  whose rows are the only ones ever read in full.

Every request query is therefore restricted to `webhookPHID IN (<every hook>)`. Requests of a hook that
no longer exists are not counted (Phorge deletes a hook's requests before the hook itself).

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
from ..records.holds import held_hook_phids
from . import replica
from .health import QueueHealth, Tally, queue_health_of
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


# -- queue counts (the Gorge-compatible /api/webhook/stats) ------------------------------------------


@dataclass(frozen=True)
class QueueCounts:
    queued: int
    sent: int
    failed: int
    active_webhooks: int


STATUS_COUNTS = Columns.of("status", requests="COUNT(*)")


@uncommitted_reads
def queue_counts() -> QueueCounts:
    _now, all_hooks = hooks()
    active = sum(1 for hook in all_hooks if hook.status != "disabled")
    if not all_hooks:
        return QueueCounts(0, 0, 0, active)
    dialect = read_dialect()
    where, params = hook_filter([hook.phid for hook in all_hooks])
    table = dialect.requests_by_result
    sent = _one(f"SELECT COUNT(*) FROM {table} WHERE {where} AND lastRequestResult = 'okay'", params)
    grouped = fetch_rows(
        f"SELECT {STATUS_COUNTS.sql} FROM {table} WHERE {where} AND {PENDING_RESULTS} GROUP BY status", params
    )
    by_status = {row["status"]: row["requests"] for row in STATUS_COUNTS.read_all(grouped)}
    return QueueCounts(
        queued=as_int(by_status.get("queued")),
        sent=as_int(sent),
        failed=as_int(by_status.get("failed")),
        active_webhooks=active,
    )


# -- per-hook health and lag (the model: health.py) ----------------------------------------------------


def _held_hooks() -> set[str]:
    """Hooks held by an operator, from Django's database; none when it cannot be read (the pages then show
    their requests as due, never hide them)."""
    try:
        return held_hook_phids()
    except DatabaseError:
        return set()


SETTLED = Columns.of("webhookPHID", requests="COUNT(*)", last_success="MAX(lastRequestEpoch)")


def _pending_columns(dialect: Dialect) -> Columns:
    due = dialect.due_sql("%(now)s")
    return Columns.of(
        "webhookPHID",
        "status",
        error_type=f"{json_text(dialect, 'errorType')} AS error_type",
        error_code=f"{json_text(dialect, 'errorCode')} AS error_code",
        requests="COUNT(*)",
        failed_attempt="MAX(CASE WHEN lastRequestResult = 'fail' THEN lastRequestEpoch END)",
        configuration_failure="MAX(CASE WHEN lastRequestResult = 'none' AND status = 'failed' THEN dateModified END)",
        in_window=f"SUM(CASE WHEN {Dialect.breaker_failure_sql('%(window_start)s')} THEN 1 ELSE 0 END)",
        due=f"SUM(CASE WHEN {due} THEN 1 ELSE 0 END)",
        due_since=f"MIN(CASE WHEN {due} THEN {dialect.due_since_sql()} END)",
    )


@uncommitted_reads
def queue_health(config: DeliveryConfig, only: Sequence[str] | None = None) -> QueueHealth:
    """Counts, due requests, breaker state and errors per hook (every hook, or the ones named): three
    queries however large the table."""
    dialect = read_dialect()
    now, all_hooks = hooks(only)
    tallies: dict[str, Tally] = {hook.phid: Tally() for hook in all_hooks}
    if all_hooks:
        where, params = hook_filter(list(tallies))
        settled = fetch_rows(
            f"SELECT {SETTLED.sql} FROM {dialect.requests_by_result} "
            f"WHERE {where} AND lastRequestResult = 'okay' GROUP BY webhookPHID",
            params,
        )
        for row in SETTLED.read_all(settled):
            tally = tallies[text(row["webhookPHID"])]
            tally.sent, tally.last_success = as_int(row["requests"]), as_int(row["last_success"]) or None
        pending = _pending_columns(dialect)
        grouped = fetch_rows(
            f"SELECT {pending.sql} FROM {dialect.requests_by_result} WHERE {where} AND {PENDING_RESULTS} "
            "GROUP BY webhookPHID, status, lastRequestResult, error_type, error_code",
            {
                **params,
                "now": now,
                "window_start": now - config.error_backoff_sec,
                "lease": config.claim_lease_sec,
                "retry": config.retry_backoff_sec,
            },
        )
        for row in pending.read_all(grouped):
            error_type, due_since = row["error_type"], row["due_since"]
            tallies[text(row["webhookPHID"])].add_pending(
                status=text(row["status"]),
                error=None if error_type is None else (text(error_type), text(row["error_code"])),
                requests=as_int(row["requests"]),
                failed_attempt=as_int(row["failed_attempt"]) or None,
                configuration_failure=as_int(row["configuration_failure"]) or None,
                in_window=as_int(row["in_window"]),
                due=as_int(row["due"]),
                due_since=None if due_since is None else as_int(due_since),
            )
    return queue_health_of(now, all_hooks, tallies, _held_hooks(), config)


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


@uncommitted_reads
def recent_failures(health: QueueHealth, *, limit: int = RECENT_FAILURES) -> list[RecentFailure]:
    """The newest failures: failed attempts of the last day and configuration failures (hook errors).

    Only hooks that the health counts say have such rows are read, so a healthy queue costs nothing
    here; failed attempts come from a key_ratelimit range on lastRequestEpoch, hook errors (written
    with lastRequestEpoch = 0 and the failure time in dateModified) from the failing hooks' `none` slice.
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
    columns = f"SELECT {failure.sql} FROM {dialect.requests_by_result} "
    rows: list[tuple[Any, ...]] = []
    attempted = [h.phid for h in health.hooks if h.last_failed_attempt and h.last_failed_attempt >= since]
    if attempted:
        where, params = hook_filter(attempted)
        rows += fetch_rows(
            f"{columns} WHERE {where} AND lastRequestResult = 'fail' AND lastRequestEpoch >= %(since)s "
            "ORDER BY lastRequestEpoch DESC, id DESC LIMIT %(limit)s",
            {**params, "since": since, "limit": limit},
        )
    misconfigured = [h.phid for h in health.hooks if h.last_configuration_failure]
    if misconfigured:
        where, params = hook_filter(misconfigured)
        rows += fetch_rows(
            f"{columns} WHERE {where} AND lastRequestResult = 'none' AND lastRequestEpoch = 0 "
            "AND status = 'failed' ORDER BY dateModified DESC, id DESC LIMIT %(limit)s",
            {**params, "limit": limit},
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
