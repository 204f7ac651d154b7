"""Every read the dashboard, the JSON diagnostics, the readiness probe and the web metrics make.

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
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, ParamSpec, TypeVar

from django.conf import settings
from django.db import DatabaseError, connections, transaction

from .config import PHORGE_ALIAS, DeliveryConfig
from .herald import HOOKS, REQUEST_COLUMNS, REQUESTS, Dialect, RequestRow, text
from .history import DeliverySeries, delivery_series
from .payload import phid_get_type
from .phorge_config import PhorgeConfig, PhorgeSettings
from .phorge_lookups import WEBHOOK_TASK_CLASS, PhpWorkerGuard, qualified
from .phpjson import UndecodableProperties, decode_properties
from .state import PhpDeliveryState
from .status.holds import held_hook_phids
from .status.models import WorkerHeartbeat

WORKER_ALIVE_SEC = 30
WORKERS_SHOWN_FOR = timedelta(days=1)
RECENT_FAILURES = 20
HOOKS_SHOWN = 200
PENDING_RESULTS = "lastRequestResult IN ('none', 'fail')"

LagState = Literal["healthy", "late", "stalled"]
HookState = Literal["ok", "failing", "backoff", "misconfigured", "disabled"]


def _dialect() -> Dialect:
    return Dialect(str(connections[PHORGE_ALIAS].vendor))


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def _fetch(sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    # Always pass a mapping, even an empty one, so `%%` in the SQLite clock expression is unescaped.
    with connections[PHORGE_ALIAS].cursor() as cursor:
        cursor.execute(sql, dict(params))
        return list(cursor.fetchall())


P = ParamSpec("P")
R = TypeVar("R")


def _uncommitted_reads(func: Callable[P, R]) -> Callable[P, R]:
    """Run the queries of `func` in one READ UNCOMMITTED transaction on MySQL/MariaDB.

    Counting is a covering scan of key_ratelimit, but under a snapshot InnoDB visits the row behind every
    index entry newer than the oldest open transaction: one long transaction elsewhere (a nightly
    `mysqldump --single-transaction`) made a million-row dashboard forty times slower. A count that
    includes a write still in flight is fine for diagnostics.
    """

    @functools.wraps(func)
    def reading(*args: P.args, **kwargs: P.kwargs) -> R:
        connection = connections[PHORGE_ALIAS]
        if connection.vendor != "mysql" or connection.in_atomic_block:
            return func(*args, **kwargs)
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
        with transaction.atomic(using=PHORGE_ALIAS):
            return func(*args, **kwargs)

    return reading


def _hook_filter(phids: Sequence[str], column: str = "webhookPHID") -> tuple[str, dict[str, str]]:
    if not phids:
        return "1 = 0", {}
    params = {f"hook{index}": phid for index, phid in enumerate(phids)}
    return f"{column} IN (" + ", ".join(f"%({name})s" for name in params) + ")", params


FAILED_ROW = "(status = 'failed' OR lastRequestResult = 'fail')"


def _json_text(dialect: Dialect, key: str, *, only_failed: bool = True, column: str = "properties") -> str:
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
    return _json_text(_dialect(), key, only_failed=False)


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
    dialect = _dialect()
    where, params = _hook_filter(only, column="phid") if only is not None else ("1 = 1", {})
    rows = _fetch(
        f"SELECT phid, name, status, hmacKey = '' AS no_key, {dialect.now_sql}, id FROM {HOOKS} WHERE {where} "
        "ORDER BY name, id",
        params,
    )
    now = int(rows[0][4]) if rows else int(_fetch(f"SELECT {dialect.now_sql}", {})[0][0])
    return now, [HookRow(text(r[0]), text(r[1]), text(r[2]), bool(r[3]), _int(r[5])) for r in rows]


def hook_total() -> int:
    return _int(_fetch(f"SELECT COUNT(*) FROM {HOOKS}", {})[0][0])


# -- queue counts (the Gorge-compatible /api/webhook/stats) ------------------------------------------


@dataclass(frozen=True)
class QueueCounts:
    queued: int
    sent: int
    failed: int
    active_webhooks: int


@_uncommitted_reads
def queue_counts() -> QueueCounts:
    _now, all_hooks = hooks()
    active = sum(1 for hook in all_hooks if hook.status != "disabled")
    if not all_hooks:
        return QueueCounts(0, 0, 0, active)
    dialect = _dialect()
    where, params = _hook_filter([hook.phid for hook in all_hooks])
    table = dialect.requests_by_result
    sent = _fetch(f"SELECT COUNT(*) FROM {table} WHERE {where} AND lastRequestResult = 'okay'", params)
    by_status = dict(
        _fetch(
            f"SELECT status, COUNT(*) FROM {table} WHERE {where} AND {PENDING_RESULTS} GROUP BY status",
            params,
        )
    )
    return QueueCounts(
        queued=_int(by_status.get("queued")),
        sent=_int(sent[0][0]),
        failed=_int(by_status.get("failed")),
        active_webhooks=active,
    )


# -- per-hook health and lag -------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorCount:
    error_type: str
    error_code: str
    count: int


@dataclass(frozen=True)
class HookHealth:
    phid: str
    name: str
    id: int
    status: str
    misconfigured: bool
    queued: int = 0
    sent: int = 0
    failed: int = 0
    due: int = 0
    oldest_due_since: int | None = None
    window_failures: int = 0  # attempts failed inside the breaker window (Phorge's rule)
    in_backoff: bool = False
    last_success: int | None = None
    last_failed_attempt: int | None = None  # lastRequestEpoch of the newest `fail` row
    last_configuration_failure: int | None = None  # dateModified of the newest failed/none row (hook error)
    errors: tuple[ErrorCount, ...] = ()
    on_hold: bool = False  # held by an operator (manage.py hold_webhooks)

    @property
    def last_failure(self) -> int | None:
        return _latest(self.last_failed_attempt, self.last_configuration_failure)

    @property
    def held(self) -> bool:
        """Due requests of this hook wait on purpose (breaker, missing key or a hold), not on the worker."""
        return self.misconfigured or self.in_backoff or self.on_hold

    @property
    def state(self) -> HookState:
        if self.status == "disabled":
            return "disabled"
        if self.misconfigured:
            return "misconfigured"
        if self.in_backoff:
            return "backoff"
        # Only what the receiver did: a refused URI or a deleted object is the request's, not the receiver's.
        if self.last_failed_attempt is not None and (
            self.last_success is None or self.last_failed_attempt >= self.last_success
        ):
            return "failing"
        return "ok"


@dataclass(frozen=True)
class LagThresholds:
    late_after: int
    stalled_after: int


def lag_thresholds(config: DeliveryConfig) -> LagThresholds:
    """When the oldest due request is late, and when delivery looks stalled (seconds).

    A due request is normally claimed within one poll interval; with every slot busy it can wait behind
    deliveries that each take up to the delivery timeout. So it is late after the largest of 30 s,
    twenty poll intervals and two delivery timeouts. It is stalled once it has waited longer than
    Phorge itself holds back a failing request (the retry backoff) or a crashed worker's claim (the
    lease), and never before twice the late threshold: by then no worker is taking due requests.
    Defaults (250 ms poll, 15 s timeout, 300 s backoff, 60 s lease): late after 30 s, stalled after 300 s.
    """
    late = max(30, math.ceil(config.poll_interval_ms / 50), math.ceil(2 * config.delivery_timeout))
    return LagThresholds(late, max(2 * late, config.retry_backoff_sec, config.claim_lease_sec))


@dataclass(frozen=True)
class QueueHealth:
    now: int
    hooks: tuple[HookHealth, ...]
    thresholds: LagThresholds
    error_threshold: int
    error_window_sec: int

    @property
    def queued(self) -> int:
        return sum(hook.queued for hook in self.hooks)

    @property
    def sent(self) -> int:
        return sum(hook.sent for hook in self.hooks)

    @property
    def failed(self) -> int:
        return sum(hook.failed for hook in self.hooks)

    @property
    def due_now(self) -> int:
        return sum(hook.due for hook in self.hooks)

    @property
    def due_held(self) -> int:
        return sum(hook.due for hook in self.hooks if hook.held)

    @property
    def oldest_due_age(self) -> int | None:
        """Seconds the oldest deliverable due request has been waiting (held hooks excluded)."""
        since = [h.oldest_due_since for h in self.hooks if not h.held and h.oldest_due_since is not None]
        return max(0, self.now - min(since)) if since else None

    @property
    def lag_state(self) -> LagState:
        age = self.oldest_due_age or 0
        if age >= self.thresholds.stalled_after:
            return "stalled"
        return "late" if age >= self.thresholds.late_after else "healthy"

    @property
    def active_hooks(self) -> int:
        return sum(1 for hook in self.hooks if hook.status != "disabled")

    @property
    def hooks_in_backoff(self) -> int:
        return sum(1 for hook in self.hooks if hook.in_backoff)

    @property
    def hooks_misconfigured(self) -> int:
        return sum(1 for hook in self.hooks if hook.misconfigured)

    @property
    def hook_phids(self) -> list[str]:
        return [hook.phid for hook in self.hooks]


@dataclass
class _Tally:
    queued: int = 0
    sent: int = 0
    failed: int = 0
    due: int = 0
    oldest_due_since: int | None = None
    window_failures: int = 0
    last_success: int | None = None
    last_failed_attempt: int | None = None
    last_configuration_failure: int | None = None
    errors: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))


def _latest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _earliest(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _held_hooks() -> set[str]:
    """Hooks held by an operator, from Django's database; none when it cannot be read (the pages then show
    their requests as due, never hide them)."""
    try:
        return held_hook_phids()
    except DatabaseError:
        return set()


@_uncommitted_reads
def queue_health(config: DeliveryConfig, only: Sequence[str] | None = None) -> QueueHealth:
    """Counts, due requests, breaker state and errors per hook (every hook, or the ones named): three
    queries however large the table."""
    dialect = _dialect()
    now, all_hooks = hooks(only)
    tallies: dict[str, _Tally] = {hook.phid: _Tally() for hook in all_hooks}
    if all_hooks:
        where, params = _hook_filter(list(tallies))
        settled = _fetch(
            f"SELECT webhookPHID, COUNT(*), MAX(lastRequestEpoch) FROM {dialect.requests_by_result} "
            f"WHERE {where} AND lastRequestResult = 'okay' GROUP BY webhookPHID",
            params,
        )
        for phid, count, last in settled:
            tally = tallies[text(phid)]
            tally.sent, tally.last_success = _int(count), _int(last) or None
        due = dialect.due_sql("%(now)s")
        pending = _fetch(
            f"SELECT webhookPHID, status, {_json_text(dialect, 'errorType')} AS error_type, "
            f"{_json_text(dialect, 'errorCode')} AS error_code, COUNT(*), "
            "MAX(CASE WHEN lastRequestResult = 'fail' THEN lastRequestEpoch END), "
            "MAX(CASE WHEN lastRequestResult = 'none' AND status = 'failed' THEN dateModified END), "
            f"SUM(CASE WHEN {Dialect.breaker_failure_sql('%(window_start)s')} THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN {due} THEN 1 ELSE 0 END), MIN(CASE WHEN {due} THEN {dialect.due_since_sql()} END) "
            f"FROM {dialect.requests_by_result} WHERE {where} AND {PENDING_RESULTS} "
            "GROUP BY webhookPHID, status, lastRequestResult, error_type, error_code",
            {
                **params,
                "now": now,
                "window_start": now - config.error_backoff_sec,
                "lease": config.claim_lease_sec,
                "retry": config.retry_backoff_sec,
            },
        )
        for row in pending:
            phid, status, error_type, error_code, count, failed_attempt, config_failure = row[:7]
            in_window, due_count, due_since = row[7:]
            tally = tallies[text(phid)]
            status = text(status)
            if status == "queued":
                tally.queued += _int(count)
            elif status == "failed":
                tally.failed += _int(count)
            tally.last_failed_attempt = _latest(tally.last_failed_attempt, _int(failed_attempt) or None)
            tally.last_configuration_failure = _latest(tally.last_configuration_failure, _int(config_failure) or None)
            tally.window_failures += _int(in_window)
            tally.due += _int(due_count)
            if due_since is not None:
                tally.oldest_due_since = _earliest(tally.oldest_due_since, _int(due_since))
            if error_type is not None:
                tally.errors[(text(error_type), text(error_code))] += _int(count)
    held = _held_hooks()
    health = []
    for hook in all_hooks:
        tally = tallies[hook.phid]
        errors = sorted(
            (ErrorCount(kind, code, count) for (kind, code), count in tally.errors.items()),
            key=lambda error: (-error.count, error.error_type, error.error_code),
        )
        health.append(
            HookHealth(
                phid=hook.phid,
                id=hook.id,
                name=hook.name,
                status=hook.status,
                misconfigured=hook.misconfigured,
                queued=tally.queued,
                sent=tally.sent,
                failed=tally.failed,
                due=tally.due,
                oldest_due_since=tally.oldest_due_since,
                window_failures=tally.window_failures,
                in_backoff=tally.window_failures >= config.error_threshold,
                last_success=tally.last_success,
                last_failed_attempt=tally.last_failed_attempt,
                last_configuration_failure=tally.last_configuration_failure,
                errors=tuple(errors),
                on_hold=hook.phid in held,
            )
        )
    return QueueHealth(
        now=now,
        hooks=tuple(health),
        thresholds=lag_thresholds(config),
        error_threshold=config.error_threshold,
        error_window_sec=config.error_backoff_sec,
    )


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


@_uncommitted_reads
def recent_failures(health: QueueHealth, *, limit: int = RECENT_FAILURES) -> list[RecentFailure]:
    """The newest failures: failed attempts of the last day and configuration failures (hook errors).

    Only hooks that the health counts say have such rows are read, so a healthy queue costs nothing
    here; failed attempts come from a key_ratelimit range on lastRequestEpoch, hook errors (written
    with lastRequestEpoch = 0 and the failure time in dateModified) from the failing hooks' `none` slice.
    """
    dialect = _dialect()
    by_phid = {hook.phid: hook for hook in health.hooks}
    since = health.now - RECENT_ATTEMPTS_SEC
    columns = (
        f"SELECT id, phid, webhookPHID, status, lastRequestResult, dateModified, "
        f"{_json_text(dialect, 'errorType')}, {_json_text(dialect, 'errorCode')} FROM {dialect.requests_by_result} "
    )
    rows: list[tuple[Any, ...]] = []
    attempted = [h.phid for h in health.hooks if h.last_failed_attempt and h.last_failed_attempt >= since]
    if attempted:
        where, params = _hook_filter(attempted)
        rows += _fetch(
            f"{columns} WHERE {where} AND lastRequestResult = 'fail' AND lastRequestEpoch >= %(since)s "
            "ORDER BY lastRequestEpoch DESC, id DESC LIMIT %(limit)s",
            {**params, "since": since, "limit": limit},
        )
    misconfigured = [h.phid for h in health.hooks if h.last_configuration_failure]
    if misconfigured:
        where, params = _hook_filter(misconfigured)
        rows += _fetch(
            f"{columns} WHERE {where} AND lastRequestResult = 'none' AND lastRequestEpoch = 0 "
            "AND status = 'failed' ORDER BY dateModified DESC, id DESC LIMIT %(limit)s",
            {**params, "limit": limit},
        )
    rows.sort(key=lambda r: (_int(r[5]), _int(r[0])), reverse=True)
    return [
        RecentFailure(
            id=_int(r[0]),
            phid=text(r[1]),
            hook_phid=text(r[2]),
            hook_name=by_phid[text(r[2])].name if text(r[2]) in by_phid else "",
            hook_id=by_phid[text(r[2])].id if text(r[2]) in by_phid else 0,
            status=text(r[3]),
            last_result=text(r[4]),
            failed_at=_int(r[5]),
            error_type=text(r[6]),
            error_code=text(r[7]),
        )
        for r in rows[:limit]
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
    dialect = _dialect()
    columns = ", ".join(f"r.{column.strip()}" for column in REQUEST_COLUMNS.split(","))
    shown = f"CASE WHEN LENGTH(r.properties) <= {SHOWN_PROPERTIES} THEN r.properties END"
    valid = "JSON_VALID(r.properties)" if dialect.is_mysql else "json_valid(r.properties)"
    extracted = [
        _json_text(dialect, key, only_failed=False, column="r.properties") for key in ("errorType", "errorCode")
    ]
    rows = _fetch(
        f"SELECT {columns}, {shown}, h.name, h.id, h.status, {valid}, {', '.join(extracted)} FROM {REQUESTS} r "
        f"LEFT JOIN {HOOKS} h ON h.phid = r.webhookPHID WHERE r.phid = %(phid)s",
        {"phid": phid},
    )
    if not rows:
        return None
    row = RequestRow.from_columns(rows[0])
    properties: dict[str, Any] | None
    if row.properties is not None:
        try:
            properties = decode_properties(row.properties)
        except UndecodableProperties:
            properties = None
    else:  # too large to decode for a page: only what the page shows, read by the database
        is_json, error_type, error_code = rows[0][13:16]
        found = {"errorType": error_type, "errorCode": error_code}
        properties = {key: text(value) for key, value in found.items() if value is not None} if is_json else None
    name, hook_id, hook_status = rows[0][10:13]
    return RequestDetail(
        row=row,
        properties=properties,
        hook_name=None if name is None else text(name),
        hook_id=None if hook_id is None else _int(hook_id),
        hook_status=None if hook_status is None else text(hook_status),
    )


# -- workers (heartbeats in Django's own database) ---------------------------------------------------


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen: datetime
    seen_ago_sec: int
    alive: bool
    max_concurrent: int
    in_flight: int
    tracked_queued: int
    database_down_for_sec: float | None
    stopping: bool
    hooks_in_backoff: int
    hooks_misconfigured: int
    hooks_lock_busy: int
    degraded: Mapping[str, int]  # cumulative counters of this process, by reason
    counts: Mapping[str, int]

    @property
    def state(self) -> str:
        if not self.alive:
            return "stale"
        if self.database_down_for_sec is not None:
            return "database down"
        return "stopping" if self.stopping else "ok"


def _count_map(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(key): int(count) for key, count in value.items() if isinstance(count, int)}


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (list, dict)) else 0


def workers(now: datetime | None = None) -> list[WorkerStatus]:
    """deliver_webhooks processes seen in the last day, newest first; alive = beat in the last 30 s."""
    now = now or datetime.now(UTC)
    result = []
    for beat in WorkerHeartbeat.objects.filter(last_seen__gte=now - WORKERS_SHOWN_FOR)[:50]:
        state = beat.state if isinstance(beat.state, dict) else {}
        counts = _count_map(state.get("counts"))
        down = state.get("database_down_for_sec")
        result.append(
            WorkerStatus(
                worker_id=beat.worker_id,
                hostname=beat.hostname,
                pid=beat.pid,
                started_at=beat.started_at,
                last_seen=beat.last_seen,
                seen_ago_sec=max(0, int((now - beat.last_seen).total_seconds())),
                alive=now - beat.last_seen <= timedelta(seconds=WORKER_ALIVE_SEC),
                max_concurrent=_int(state.get("max_concurrent")),
                in_flight=_int(state.get("in_flight")),
                tracked_queued=_int(state.get("tracked_queued")),
                database_down_for_sec=float(down) if isinstance(down, (int, float)) else None,
                stopping=bool(state.get("stopping")),
                hooks_in_backoff=_size(state.get("hooks_in_backoff")),
                hooks_misconfigured=_size(state.get("hooks_misconfigured")),
                hooks_lock_busy=_size(state.get("hooks_lock_busy")),
                degraded={k.removeprefix("degraded."): v for k, v in counts.items() if k.startswith("degraded.")},
                counts=counts,
            )
        )
    return result


# -- Phorge's own PHP worker -------------------------------------------------------------------------


@functools.cache
def _phorge_settings(config: DeliveryConfig) -> PhorgeSettings:
    return PhorgeSettings(config)  # one per process and configuration, cached a few seconds


def phorge_settings() -> PhorgeConfig | None:
    """Phorge's settings in force (silent mode, blacklist, base URI, retention) and where each came from;
    None when Phorge's database is unreachable."""
    try:
        return _phorge_settings(settings.GORGE_WEBHOOK).current()
    except DatabaseError:
        return None


def phorge_base_uri() -> str | None:
    """Phorge's `phabricator.base-uri` (for links into its UI), when it is known."""
    resolved = phorge_settings()
    return None if resolved is None else resolved.base_uri.value


@functools.cache
def _php_guard(namespace: str) -> PhpWorkerGuard:
    return PhpWorkerGuard(namespace)  # one per process, so its short cache spares the database


def php_delivery_state() -> PhpDeliveryState:
    """Whether Phorge's PHP HeraldWebhookWorker is delivering too, from `<ns>_worker`.

    Never raises: a missing grant or an unreachable database reads "unknown", never "idle".
    """
    try:
        return _php_guard(settings.GORGE_WEBHOOK.namespace).state()
    except DatabaseError:
        return {"state": "unknown", "detail": "Phorge's worker database is unreachable"}


def due_left_to_php(health: QueueHealth, config: DeliveryConfig) -> int | None:
    """How many of the due requests have a live HeraldWebhookWorker task (the worker leaves those to PHP);
    None when Phorge's worker queue cannot be read.

    One query, driven by the task table's `taskClass` key (a handful of rows once PHP stops delivering)
    into herald_webhookrequest's `key_phid` (the join order is forced: as a semi-join the optimizer would
    rather scan the requests). The derived table keeps the two tables' dateModified apart.
    """
    if not health.due_now:
        return 0
    dialect = _dialect()
    tasks = qualified(config.namespace, "worker", "worker_activetask")
    join = "STRAIGHT_JOIN" if dialect.is_mysql else "JOIN"
    where, params = _hook_filter(health.hook_phids)
    try:
        rows = _fetch(
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
    return _int(rows[0][0])


# -- readiness and the dashboard ---------------------------------------------------------------------


def phorge_database_answers() -> None:
    """Raises DatabaseError unless Phorge's herald database answers a trivial query."""
    _fetch("SELECT 1", {})


@dataclass(frozen=True)
class Dashboard:
    health: QueueHealth
    series: DeliverySeries
    failures: list[RecentFailure]
    workers: list[WorkerStatus]
    php: PhpDeliveryState
    due_left_to_php: int | None = None  # read only while Phorge's PHP worker is active
    attempt_log: bool = True  # the chart draws this service's attempts: none are kept when the log is off
    phorge_uri: str | None = None  # phabricator.base-uri, for links into Phorge's pages
    settings: PhorgeConfig | None = None  # Phorge's own switches in force; None: its database is unreachable

    @property
    def alive_workers(self) -> int:
        return sum(1 for worker in self.workers if worker.alive)

    @property
    def hooks_shown(self) -> list[HookHealth]:
        """Hooks needing attention first, then the busiest; at most HOOKS_SHOWN rows on the page."""
        order = {"backoff": 0, "failing": 1, "misconfigured": 2, "ok": 3, "disabled": 4}
        ranked = sorted(self.health.hooks, key=lambda hook: (order[hook.state], -hook.due, -hook.queued, hook.name))
        return ranked[:HOOKS_SHOWN]

    @property
    def hooks_hidden(self) -> int:
        return max(0, len(self.health.hooks) - HOOKS_SHOWN)


@_uncommitted_reads
def dashboard(config: DeliveryConfig) -> Dashboard:
    health = queue_health(config)
    resolved = phorge_settings()
    php = php_delivery_state()
    return Dashboard(
        health=health,
        series=delivery_series(health.now),
        failures=recent_failures(health),
        workers=workers(),
        php=php,
        due_left_to_php=due_left_to_php(health, config) if php["state"] == "active" else None,
        attempt_log=config.attempt_log,
        phorge_uri=None if resolved is None else resolved.base_uri.value,
        settings=resolved,
    )
