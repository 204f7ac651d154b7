"""The attempt log: every processing of a request, kept in Django's own database (never Phorge's).

Delivery threads hand records to an in-memory queue and go on; one writer thread inserts them in batches
once a second and prunes the log now and then (by age, and by count per hook). If Django's database is
down, locked or full, delivery goes on: the records that cannot be written are counted
(`gorge_webhook_attempt_log_lost_total`), said once, and said again with the count when writing works
again. A full queue drops records the same way rather than slow a delivery down (said once too).

Records hold text from receivers and from Phorge's rows: each is first made storable in Django's database
(`Storable`: no NUL, which PostgreSQL refuses; only characters the column's and the connection's character
set hold on MySQL/MariaDB; no longer than the column). A batch that still fails is written again record by
record, so one bad record costs only itself; and no exception ends the writer thread.
"""

from __future__ import annotations

import codecs
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.models import Count

from ..config import DeliveryConfig
from ..phorge.herald import RequestRow
from ..phorge.outcomes import Outcome
from ..records.models import BreakerEvent, DeliveryAttempt
from . import metrics

logger = logging.getLogger(__name__)

BATCH = 500
FLUSH_SEC = 1.0
QUEUE_SIZE = 20_000
COLUMNS = (  # DeliveryAttempt's columns, in the order AttemptLog._insert gives them
    "request_phid",
    "hook_phid",
    "object_phid",
    "started_at",
    "duration_ms",
    "status",
    "result",
    "error_type",
    "error_code",
    "http_status",
    "response_bytes",
    "redirects",
    "worker_id",
    "response_prefix",
)
PRUNE_SEC = 600.0
# A record Django's database refuses fails at once; one that failed after a wait this long (SQLite's busy
# timeout, a lock wait) met a database that does not answer: the rest of the batch is not tried one by one.
WAITED_SEC = 1.0


@dataclass(frozen=True)
class AttemptRecord:
    request_phid: str
    hook_phid: str
    object_phid: str
    started_at: float  # unix seconds
    duration_ms: float
    status: str
    result: str
    error_type: str
    error_code: str
    http_status: int | None = None
    response_bytes: int | None = None
    redirects: int = 0
    response_prefix: str = ""

    @classmethod
    def of(cls, row: RequestRow, outcome: Outcome, started_at: float, seconds: float) -> AttemptRecord:
        """One attempt at `row` that began at `started_at` (unix) and took `seconds`."""
        http = outcome.http
        return cls(
            request_phid=row.phid,
            hook_phid=row.webhook_phid,
            object_phid=row.object_phid,
            started_at=started_at,
            duration_ms=seconds * 1000,
            status=outcome.status,
            result=outcome.result,
            error_type=outcome.error_type,
            error_code=str(outcome.error_code),
            http_status=None if http is None else http.status,
            response_bytes=None if http is None else http.response_bytes,
            redirects=0 if http is None else http.redirects,
            response_prefix="" if http is None else http.body_prefix.decode("utf-8", "replace"),
        )


# MySQL/MariaDB character sets as Python codecs. "bmp": utf8mb3 (three bytes at most). Sets not listed are
# treated as ASCII: what is stored may lose characters, but it is stored.
_MYSQL_CODECS = {
    "utf8mb4": None,
    "utf8mb3": "bmp",
    "utf8": "bmp",
    "ucs2": "bmp",
    "utf16": None,
    "utf16le": None,
    "utf32": None,
    "latin1": "cp1252",  # MySQL's latin1 is Windows-1252
    "ascii": "ascii",
    "binary": None,
    "latin2": "iso8859_2",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "gbk": "gbk",
    "gb2312": "gb2312",
    "gb18030": None,
    "big5": "big5",
    "euckr": "euc_kr",
    "tis620": "tis_620",
}


def _charset_codec(charset: str | None) -> str | None:
    """The codec for a MySQL character set: None when it holds every character."""
    if not charset:
        return None
    return _MYSQL_CODECS.get(charset.lower(), "ascii")


def _fits(codec: str | None) -> Callable[[str], str]:
    """A function keeping what `codec` can encode and replacing the rest (U+FFFD, or ? without it)."""
    if codec is None:
        return lambda text: text
    if codec == "bmp":
        return lambda text: "".join(c if ord(c) <= 0xFFFF else "\ufffd" for c in text)
    codecs.lookup(codec)  # an unknown one fails here, once, not per record
    try:
        "\ufffd".encode(codec)
        mark = "\ufffd"
    except UnicodeEncodeError:
        mark = "?"
    return lambda text: "".join(c if _encodes(c, codec) else mark for c in text)


def _encodes(char: str, codec: str) -> bool:
    try:
        char.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


class Storable:
    """Text made storable in Django's database, per column: NUL escaped (`\\x00`, PostgreSQL refuses it),
    lone surrogates replaced (no driver can encode them), characters outside what the MySQL/MariaDB column
    and connection hold replaced, and cut to the column's max_length."""

    def __init__(self, model: Any, columns: Sequence[str], charsets: dict[str, str | None] | None = None) -> None:
        charsets = charsets or {}
        self._columns: dict[str, tuple[int | None, list[Callable[[str], str]]]] = {}
        for column in columns:
            field = model._meta.get_field(column)
            if field.get_internal_type() not in ("CharField", "TextField"):
                continue
            filters = [_fits(_charset_codec(charset)) for charset in (charsets.get(column), charsets.get(""))]
            self._columns[column] = (getattr(field, "max_length", None), filters)

    @classmethod
    def for_connection(cls, connection: Any, model: Any, columns: Sequence[str]) -> Storable:
        if connection.vendor != "mysql":
            return cls(model, columns)
        charsets: dict[str, str | None] = {}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COLUMN_NAME, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                [model._meta.db_table],
            )
            charsets.update({str(name): charset for name, charset in cursor.fetchall()})
            cursor.execute("SELECT @@character_set_connection")  # "" below: the connection's own set
            charsets[""] = cursor.fetchone()[0]
        return cls(model, columns, charsets)

    def text(self, column: str, value: str) -> str:
        spec = self._columns.get(column)
        if spec is None or not isinstance(value, str):
            return value
        max_length, filters = spec
        if value.isascii() and "\x00" not in value and (max_length is None or len(value) <= max_length):
            return value
        if "\x00" in value:
            value = value.replace("\x00", "\\x00")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates
                value = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
            for keep in filters:
                value = keep(value)
        return value if max_length is None else value[:max_length]

    def row(self, columns: Iterable[str], values: Iterable[Any]) -> tuple[Any, ...]:
        text = self._columns
        return tuple(
            self.text(column, value) if column in text and type(value) is str else value
            for column, value in zip(columns, values, strict=True)
        )


BREAKER_COLUMNS = ("hook_phid", "worker_id")
ROWS_PER_INSERT = 200  # and at most what the backend takes in one statement (SQLite: 999 parameters)


class AttemptLog:
    def __init__(self, config: DeliveryConfig, worker_id: str) -> None:
        self.config = config
        self.worker_id = worker_id
        # A deque, not a queue.Queue: appending wakes nobody. The writer looks every FLUSH_SEC, so at
        # hundreds of deliveries a second it is not switched to (and handed the GIL) once per record.
        self._pending: deque[AttemptRecord | BreakerEvent] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="attempt-log", daemon=True)
        self._failing_since: float | None = None
        self._lost_while_failing = 0
        self._pruned_at = 0.0
        self._storable: tuple[Storable, Storable] | None = None  # (attempts, breaker events), once known
        self._said_unstorable = False
        self._said_crash = False
        self._said_full = False
        self._said_down = False
        self._thread.start()

    def record(self, attempt: AttemptRecord) -> None:
        self._put(attempt)

    def breaker_entered(self, hook_phid: str, until_epoch: int) -> None:
        now = datetime.now(UTC)
        until = datetime.fromtimestamp(until_epoch, UTC)
        self._put(BreakerEvent(hook_phid=hook_phid, entered_at=now, until=until, worker_id=self.worker_id))

    def _put(self, item: AttemptRecord | BreakerEvent) -> None:
        if len(self._pending) < QUEUE_SIZE:
            self._pending.append(item)
            return
        self._lost(1)
        if not self._said_full:
            self._said_full = True
            if self._failing_since is None:
                self._failing_since = time.monotonic()  # "written again" tells how many were lost meanwhile
            logger.error(
                "attempt log: Django's database does not keep up; delivery goes on, attempts go unrecorded",
                extra={"event": "attempts.queue_full", "queued": QUEUE_SIZE},
            )

    def close(self) -> None:
        """Write what is queued (as far as Django's database lets us), then stop."""
        self._stop.set()
        self._thread.join(30)

    def _lost(self, count: int) -> None:
        metrics.ATTEMPT_LOG_LOST.inc(count)
        self._lost_while_failing += count

    def _run(self) -> None:
        try:
            while True:
                stopping = self._stop.wait(FLUSH_SEC)
                while batch := self._take():
                    try:
                        self._write(batch)
                    except Exception:  # noqa: BLE001 - a bug of ours must not end the thread: those are lost
                        self._lost(len(batch))
                        self._say_crash()
                if stopping:
                    break
                if time.monotonic() - self._pruned_at > PRUNE_SEC:
                    self._prune()
        finally:
            connections["default"].close()

    def _say_crash(self) -> None:
        if not self._said_crash:
            self._said_crash = True
            logger.exception(
                "attempt log: unexpected error writing records; they go unrecorded, writing goes on",
                extra={"event": "attempts.unexpected_error"},
            )

    def _take(self) -> list[AttemptRecord | BreakerEvent]:
        batch: list[AttemptRecord | BreakerEvent] = []
        while self._pending and len(batch) < BATCH:
            batch.append(self._pending.popleft())
        return batch

    def _write(self, batch: list[AttemptRecord | BreakerEvent]) -> None:
        attempts = [item for item in batch if isinstance(item, AttemptRecord)]
        events = [item for item in batch if isinstance(item, BreakerEvent)]
        try:
            self._store(attempts, events)
        except Exception:  # a record it cannot hold (ValueError with psycopg2), or an outage
            self._storable = None  # read the columns' character sets again
            stored, failed, answering = self._one_by_one(attempts, events) if self._usable() else (0, len(batch), False)
            if not stored or not answering:
                self._down(failed)
                return
            self._lost(failed)
            if failed and not self._said_unstorable:
                self._said_unstorable = True
                logger.exception(
                    "attempt log: a record cannot be stored in Django's database even made storable; "
                    "it goes unrecorded, the others are written (said once)",
                    extra={"event": "attempts.record_dropped", "lost": failed},
                )
        if self._failing_since is not None:
            logger.info(
                "attempt log written again", extra={"event": "attempts.written_again", "lost": self._lost_while_failing}
            )
            self._failing_since = None
            self._lost_while_failing = 0
            self._said_full = self._said_down = False

    def _down(self, lost: int) -> None:
        connections["default"].close()
        self._lost(lost)
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        if not self._said_down:
            self._said_down = True
            logger.error(
                "attempt log: Django's database cannot be written; delivery goes on, attempts go unrecorded",
                extra={"event": "attempts.unwritable", "lost": lost},
            )

    def _usable(self) -> bool:
        """Whether Django's database still answers (else a record-by-record retry only waits for timeouts)."""
        connection = connections["default"]
        try:
            connection.ensure_connection()  # at most one connect attempt: a dead server fails it once
            return bool(connection.is_usable())
        except Exception:  # noqa: BLE001 - any failure to tell means: not usable
            return False

    def _one_by_one(self, attempts: list[AttemptRecord], events: list[BreakerEvent]) -> tuple[int, int, bool]:
        """Each record in its own transaction: (stored, lost, whether the database still answers). Stops,
        counting the rest lost, when the database stops answering (or makes a record wait)."""
        stored = failed = 0
        items: list[tuple[list[AttemptRecord], list[BreakerEvent]]] = [([a], []) for a in attempts]
        items += [([], [e]) for e in events]
        for index, (one_attempt, one_event) in enumerate(items):
            began = time.monotonic()
            try:
                self._store(one_attempt, one_event)
            except Exception:  # noqa: BLE001 - this record only
                failed += 1
                if time.monotonic() - began >= WAITED_SEC or not self._usable():
                    return stored, failed + len(items) - index - 1, False
                continue
            stored += 1
        return stored, failed, True

    def _store(self, attempts: list[AttemptRecord], events: list[BreakerEvent]) -> None:
        if self._storable is None:
            connection = connections["default"]
            self._storable = (
                Storable.for_connection(connection, DeliveryAttempt, COLUMNS),
                Storable.for_connection(connection, BreakerEvent, BREAKER_COLUMNS),
            )
        if attempts:
            self._insert(attempts, self._storable[0])
        if events:
            storable = self._storable[1]
            BreakerEvent.objects.bulk_create(
                [replace_event(e, **{c: storable.text(c, getattr(e, c)) for c in BREAKER_COLUMNS}) for e in events]
            )

    def _insert(self, attempts: list[AttemptRecord], storable: Storable) -> None:
        """Multi-row INSERTs in one transaction: a quarter of bulk_create's CPU per row, and this thread
        competes for the GIL with the deliveries. Not executemany: SQLite's steps each row on its own, and
        hands the GIL over and back once a row."""
        connection = connections["default"]
        table = connection.ops.quote_name(DeliveryAttempt._meta.db_table)
        columns = ", ".join(connection.ops.quote_name(column) for column in COLUMNS)
        values = f"({', '.join(['%s'] * len(COLUMNS))})"
        when = connection.ops.adapt_datetimefield_value
        rows = [
            storable.row(
                COLUMNS,
                (
                    a.request_phid,
                    a.hook_phid,
                    a.object_phid,
                    when(datetime.fromtimestamp(a.started_at, UTC)),
                    a.duration_ms,
                    a.status,
                    a.result,
                    a.error_type,
                    a.error_code,
                    a.http_status,
                    a.response_bytes,
                    a.redirects,
                    self.worker_id,
                    a.response_prefix,
                ),
            )
            for a in attempts
        ]
        size = max(1, min(ROWS_PER_INSERT, connection.ops.bulk_batch_size(COLUMNS, rows)))
        with transaction.atomic(using="default"), connection.cursor() as cursor:
            for start in range(0, len(rows), size):
                chunk = rows[start : start + size]
                sql = f"INSERT INTO {table} ({columns}) VALUES {', '.join([values] * len(chunk))}"
                cursor.execute(sql, [value for row in chunk for value in row])

    def _prune(self) -> None:
        """Keep GORGE_WEBHOOK_ATTEMPT_LOG_DAYS, and at most GORGE_WEBHOOK_ATTEMPT_LOG_PER_HOOK per hook."""
        self._pruned_at = time.monotonic()
        try:
            prune(self.config)
        except DatabaseError:
            connections["default"].close()
        except Exception:  # noqa: BLE001 - never the end of the writer thread
            self._say_crash()


def replace_event(event: BreakerEvent, **values: str) -> BreakerEvent:
    """A copy of an unsaved BreakerEvent with `values` replaced."""
    return BreakerEvent(
        hook_phid=values.get("hook_phid", event.hook_phid),
        entered_at=event.entered_at,
        until=event.until,
        worker_id=values.get("worker_id", event.worker_id),
    )


def prune(config: DeliveryConfig) -> int:
    """Delete what the retention rules say is too old or too much; the number of attempts deleted."""
    oldest = datetime.now(UTC) - timedelta(days=config.attempt_log_days)
    deleted, _ = DeliveryAttempt.objects.filter(started_at__lt=oldest).delete()
    BreakerEvent.objects.filter(entered_at__lt=oldest).delete()
    limit = config.attempt_log_per_hook
    crowded = (
        DeliveryAttempt.objects.values("hook_phid").annotate(n=Count("id")).filter(n__gt=limit).values("hook_phid")
    )
    for hook_phid in [row["hook_phid"] for row in crowded]:
        newest = DeliveryAttempt.objects.filter(hook_phid=hook_phid).order_by("-started_at", "-id")
        boundary = newest.values_list("started_at", "id")[limit - 1]
        older = DeliveryAttempt.objects.filter(hook_phid=hook_phid, started_at__lte=boundary[0]).exclude(
            started_at=boundary[0], id__gte=boundary[1]
        )
        deleted += older.delete()[0]
    return deleted
