"""The attempt log: every processing of a request, kept in Django's own database (never Phorge's).

Delivery threads hand records to an in-memory queue and go on; one writer thread inserts them in batches
once a second and prunes the log now and then (by age, and by count per hook). If Django's database is
down, delivery goes on: the records that cannot be written are counted
(`gorge_webhook_attempt_log_lost_total`), said once, and said again with the count when writing works
again. A full queue drops records the same way rather than slow a delivery down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, connections, transaction
from django.db.models import Count

from . import metrics
from .config import DeliveryConfig
from .status.models import BreakerEvent, DeliveryAttempt

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
        self._thread.start()

    def record(self, attempt: AttemptRecord) -> None:
        self._put(attempt)

    def breaker_entered(self, hook_phid: str, until_epoch: int) -> None:
        now = datetime.now(UTC)
        until = datetime.fromtimestamp(until_epoch, UTC)
        self._put(BreakerEvent(hook_phid=hook_phid, entered_at=now, until=until, worker_id=self.worker_id))

    def _put(self, item: AttemptRecord | BreakerEvent) -> None:
        if len(self._pending) >= QUEUE_SIZE:
            self._lost(1)
        else:
            self._pending.append(item)

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
                    self._write(batch)
                if stopping:
                    break
                if time.monotonic() - self._pruned_at > PRUNE_SEC:
                    self._prune()
        finally:
            connections["default"].close()

    def _take(self) -> list[AttemptRecord | BreakerEvent]:
        batch: list[AttemptRecord | BreakerEvent] = []
        while self._pending and len(batch) < BATCH:
            batch.append(self._pending.popleft())
        return batch

    def _write(self, batch: list[AttemptRecord | BreakerEvent]) -> None:
        attempts = [item for item in batch if isinstance(item, AttemptRecord)]
        events = [item for item in batch if isinstance(item, BreakerEvent)]
        try:
            if attempts:
                self._insert(attempts)
            BreakerEvent.objects.bulk_create(events)
        except DatabaseError:
            connections["default"].close()
            self._lost(len(batch))
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                logger.error(
                    "attempt log: Django's database cannot be written; delivery goes on, attempts go unrecorded",
                    extra={"lost": len(batch)},
                )
            return
        if self._failing_since is not None:
            logger.info("attempt log written again", extra={"lost": self._lost_while_failing})
            self._failing_since = None
            self._lost_while_failing = 0

    def _insert(self, attempts: list[AttemptRecord]) -> None:
        """One executemany in one transaction: a quarter of bulk_create's CPU per row, and this thread
        competes for the GIL with the deliveries."""
        connection = connections["default"]
        table = connection.ops.quote_name(DeliveryAttempt._meta.db_table)
        columns = ", ".join(connection.ops.quote_name(column) for column in COLUMNS)
        sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
        when = connection.ops.adapt_datetimefield_value
        rows = [
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
            )
            for a in attempts
        ]
        with transaction.atomic(using="default"), connection.cursor() as cursor:
            cursor.executemany(sql, rows)

    def _prune(self) -> None:
        """Keep GORGE_WEBHOOK_ATTEMPT_LOG_DAYS, and at most GORGE_WEBHOOK_ATTEMPT_LOG_PER_HOOK per hook."""
        self._pruned_at = time.monotonic()
        try:
            prune(self.config)
        except DatabaseError:
            connections["default"].close()


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
