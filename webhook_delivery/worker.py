"""The claim-and-deliver loop behind `manage.py deliver_webhooks`.

The main thread polls (QueueTracker), groups due requests by hook and hands each hook to one pool thread
at a time (a "job"). A job takes Phorge's named lock for the hook on its own connection (busy: the hook is
skipped for now), checks Phorge's error breaker, then claims, delivers and writes its rows one by one.
Hooks that are busy, in backoff or misconfigured never hold back the others.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from django.db import DatabaseError, connections

from . import metrics
from .config import DeliveryConfig
from .dispatcher import Dispatcher
from .locks import webhook_lock_name
from .outcomes import Outcome, with_error
from .phorge_lookups import PhorgeObjects, PhpWorkerGuard, SilentMode
from .phpjson import UndecodableProperties, decode_properties, encode_compact
from .status.heartbeat import Heartbeat
from .store import Hook, RequestRow, Store, is_due
from .tracker import QueueTracker

logger = logging.getLogger(__name__)

ROWS_PER_JOB = 32
HEARTBEAT_SEC = 5.0
HOOKS_RELOAD_SEC = 1.0
LOCK_BUSY_SKIP_SEC = 1.0
DB_RETRY_MAX_SEC = 30.0
WRITE_MARGIN_SEC = 2.0


class _Step(enum.Enum):
    NEXT = "next"
    LOST = "lost"  # the claim was lost: our snapshots may be stale
    STOP = "stop"  # the hook tripped its breaker


@dataclass
class Job:
    hook_phid: str
    hook: Hook | None
    rows: list[RequestRow]


@dataclass
class JobResult:
    hook_phid: str
    finished: list[int] = field(default_factory=list)
    retry: list[RequestRow] = field(default_factory=list)
    recheck: list[int] = field(default_factory=list)
    lock_busy: bool = False
    breaker_closed: bool = False
    backoff_until: int | None = None
    database_error: bool = False


class Worker:
    def __init__(
        self,
        config: DeliveryConfig,
        *,
        store: Store | None = None,
        dispatcher: Dispatcher | None = None,
        max_concurrent: int | None = None,
        poll_interval_ms: int | None = None,
        once: bool = False,
    ) -> None:
        self.config = config
        self.store = store or Store()
        self.dispatcher = dispatcher or Dispatcher(
            config, silent=SilentMode(config), objects=PhorgeObjects(config.namespace)
        )
        self.php_guard = PhpWorkerGuard(config.namespace)
        self.php_state: dict[str, Any] = {"state": "unknown"}
        self.max_concurrent = max_concurrent or config.max_concurrent
        self.poll_interval = (poll_interval_ms or config.poll_interval_ms) / 1000.0
        self.once = once
        self.tracker = QueueTracker(self.store, lease=config.claim_lease_sec, retry_backoff=config.retry_backoff_sec)
        self.stopping = threading.Event()
        self.hooks: dict[str, Hook] = {}
        self._hooks_loaded = 0.0
        self.busy_hooks: set[str] = set()
        self.skip_until: dict[str, float] = {}
        self.backoff_until: dict[str, int] = {}
        self.misconfigured: set[str] = set()
        self._db_down_since: float | None = None
        self._signals = 0
        self._thread_connections: list[Any] = []
        self._registry_lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self.heartbeat = Heartbeat()
        self._last_heartbeat = 0.0
        self._reported: dict[str, int] = {}

    def count(self, key: str, amount: int = 1) -> None:
        with self._counts_lock:
            self.counts[key] += amount

    def snapshot(self) -> dict[str, Any]:
        """The heartbeat state: what the dashboard and the health JSON show about this process."""
        with self._counts_lock:
            counts = dict(self.counts)
        now = time.monotonic()
        return {
            "version": 1,
            "max_concurrent": self.max_concurrent,
            "in_flight": len(self.tracker.in_flight),
            "tracked_queued": self.tracker.queued_count,
            "counts": counts,
            "database_down_for_sec": None if self._db_down_since is None else round(now - self._db_down_since, 1),
            "hooks_in_backoff": dict(self.backoff_until),
            "hooks_misconfigured": sorted(self.misconfigured),
            "hooks_lock_busy": sorted(phid for phid, until in self.skip_until.items() if until > now),
            "stopping": self.stopping.is_set(),
            "php_worker": self.php_state,
        }

    def _beat(self, *, force: bool = False) -> None:
        if force or time.monotonic() - self._last_heartbeat >= HEARTBEAT_SEC:
            self._last_heartbeat = time.monotonic()
            state = self.snapshot()
            self.heartbeat.publish(state)
            self._report_activity(state["counts"])

    def _report_activity(self, counts: dict[str, int]) -> None:
        """One INFO line per period: deliveries, and claims lost to other processes (normal when several
        run). Each success alone is logged at DEBUG only; at hundreds per second it would drown the rest."""
        keys = ("deliveries.sent", "deliveries.retry", "deliveries.failed", "claims_won", "claims_lost")
        new = {key: counts.get(key, 0) - self._reported.get(key, 0) for key in keys}
        if any(new.values()):
            logger.info(
                "activity since the last report",
                extra={
                    "delivered": new["deliveries.sent"],
                    "retried": new["deliveries.retry"],
                    "failed": new["deliveries.failed"],
                    "claims_won": new["claims_won"],
                    "claims_lost": new["claims_lost"],
                },
            )
        self._reported = {key: counts.get(key, 0) for key in keys}

    # -- lifecycle -------------------------------------------------------------------------------

    def install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            logger.warning("not in the main thread: signal handlers not installed")
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def handle(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals > 1:
                logger.warning("second signal: exiting now; claimed requests come back after the lease")
                os._exit(1)
            logger.info("stopping: no new claims, finishing deliveries in flight", extra={"signal": signum})
            self.stop()

        for sig in previous:
            signal.signal(sig, handle)

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> int:
        restore = self.install_signal_handlers()
        logger.info(
            "deliver_webhooks started",
            extra={
                "max_concurrent": self.max_concurrent,
                "poll_interval_ms": int(self.poll_interval * 1000),
                "lease_sec": self.config.claim_lease_sec,
                "retry_backoff_sec": self.config.retry_backoff_sec,
                "timeout_sec": self.config.delivery_timeout,
            },
        )
        pool = ThreadPoolExecutor(max_workers=self.max_concurrent, thread_name_prefix="deliver")
        running: dict[Future[JobResult], Job] = {}
        try:
            while not self.stopping.is_set():
                self.php_state = self.php_guard.watch()
                self._beat()
                scheduled, more = self._poll_and_schedule(pool, running)
                if self.once and not running and not scheduled and not more:
                    break
                self._wait(running, scheduled or more)
        finally:
            for future in list(running):
                self._absorb(future.result(), running.pop(future))
            pool.shutdown(wait=True)
            self._report_activity(self.snapshot()["counts"])
            self.heartbeat.retire()
            self._close_connections()
            restore()
        logger.info("deliver_webhooks stopped")
        return 0

    def _wait(self, running: dict[Future[JobResult], Job], busy: bool) -> None:
        if running:
            done, _ = wait(
                list(running),
                timeout=0 if busy and len(running) < self.max_concurrent else self.poll_interval,
                return_when=FIRST_COMPLETED,
            )
            for future in done:
                self._absorb(future.result(), running.pop(future))
        elif not busy:
            self.stopping.wait(self.poll_interval)

    # -- main thread: poll and schedule ----------------------------------------------------------

    def _schedulable(self, hook_phid: str) -> bool:
        if hook_phid in self.busy_hooks or hook_phid in self.misconfigured:
            return False
        if self.skip_until.get(hook_phid, 0.0) > time.monotonic():
            return False
        return self.backoff_until.get(hook_phid, 0) <= self.tracker.estimated_now()

    def _poll_and_schedule(self, pool: ThreadPoolExecutor, running: dict[Future[JobResult], Job]) -> tuple[bool, bool]:
        free = self.max_concurrent - len(running)
        try:
            connections[self.store.alias].close_if_unusable_or_obsolete()
            batches, more = self.tracker.poll(self._schedulable, hooks=max(free, 1), rows=ROWS_PER_JOB)
            if batches and free > 0:
                self._load_hooks(batches)
                if self._note_misconfigured(batches):
                    batches = [rows for rows in batches if rows[0].webhook_phid not in self.misconfigured]
            self._database_recovered()
        except DatabaseError:
            self._database_failed()
            return False, False
        metrics.TRACKED_QUEUED.set(self.tracker.queued_count)
        scheduled = False
        for rows in batches:
            if free <= 0 or self.stopping.is_set():
                break
            hook_phid = rows[0].webhook_phid
            job = Job(hook_phid, self.hooks.get(hook_phid), rows)
            self.busy_hooks.add(hook_phid)
            self.tracker.in_flight.update(row.id for row in rows)
            running[pool.submit(self._run_job, job)] = job
            free -= 1
            scheduled = True
        metrics.IN_FLIGHT.set(len(self.tracker.in_flight))
        return scheduled, more or (bool(batches) and free <= 0)

    def _load_hooks(self, batches: list[list[RequestRow]]) -> None:
        """Hook rows (URI, key, status) at most HOOKS_RELOAD_SEC old, as PHP reads them per task."""
        unknown = any(rows[0].webhook_phid not in self.hooks for rows in batches)
        if unknown or time.monotonic() - self._hooks_loaded > HOOKS_RELOAD_SEC:
            self.hooks = self.store.hooks()
            self._hooks_loaded = time.monotonic()

    def _note_misconfigured(self, batches: list[list[RequestRow]]) -> bool:
        """Track hooks with an empty HMAC key (never called unsigned); True if a batch belongs to one."""
        unsigned = {phid for phid, hook in self.hooks.items() if not hook.hmac_key}
        waiting = {rows[0].webhook_phid for rows in batches}
        for phid in (unsigned - self.misconfigured) & waiting:
            logger.error(
                "hook has an empty HMAC key: its requests stay queued until a key is set",
                extra={"hook": phid, "hook_name": self.hooks[phid].name},
            )
        for phid in self.misconfigured - unsigned:
            logger.info("hook has an HMAC key again: delivering its requests", extra={"hook": phid})
        self.misconfigured = unsigned
        metrics.HOOKS_MISCONFIGURED.set(len(unsigned))
        return bool(unsigned & waiting)

    def _absorb(self, result: JobResult, job: Job) -> None:
        self.busy_hooks.discard(job.hook_phid)
        self.tracker.in_flight.difference_update(row.id for row in job.rows)
        for row_id in result.finished:
            self.tracker.forget(row_id)
        self.tracker.refresh(result.retry)
        for row_id in result.recheck:
            self.tracker.recheck_soon(row_id)
        if result.lock_busy:
            metrics.LOCK_BUSY.inc()
            self.count("lock_busy")
            self.skip_until[job.hook_phid] = time.monotonic() + LOCK_BUSY_SKIP_SEC
        if result.breaker_closed and job.hook_phid in self.backoff_until:
            del self.backoff_until[job.hook_phid]
            logger.info("hook left error backoff", extra={"hook": job.hook_phid})
        if result.backoff_until is not None:
            metrics.BREAKER_SKIPS.inc()
            self.count("breaker_skips")
            if job.hook_phid not in self.backoff_until:
                logger.warning(
                    "hook entered error backoff: too many recent failures",
                    extra={"hook": job.hook_phid, "until_epoch": result.backoff_until},
                )
            self.backoff_until[job.hook_phid] = result.backoff_until
        metrics.HOOKS_IN_BACKOFF.set(len(self.backoff_until))
        if result.database_error:
            self._database_failed()

    def _database_failed(self) -> None:
        metrics.DEGRADED.labels("database").inc()
        self.count("degraded.database")
        if self._db_down_since is None:
            self._db_down_since = time.monotonic()
            logger.error("database unavailable: backing off and reconnecting; nothing is marked failed")
        _close_quietly(connections[self.store.alias])
        delay = min(DB_RETRY_MAX_SEC, 0.5 + (time.monotonic() - self._db_down_since) / 4)
        self.stopping.wait(delay)

    def _database_recovered(self) -> None:
        if self._db_down_since is not None:
            logger.info(
                "database reachable again",
                extra={"outage_sec": round(time.monotonic() - self._db_down_since, 1)},
            )
            self._db_down_since = None

    # -- pool threads: one hook at a time --------------------------------------------------------

    def _register_thread_connection(self) -> None:
        connection = connections[self.store.alias]
        with self._registry_lock:
            if all(known is not connection for known in self._thread_connections):
                connection.inc_thread_sharing()
                self._thread_connections.append(connection)

    def _close_connections(self) -> None:
        for connection in self._thread_connections:
            _close_quietly(connection)
        _close_quietly(connections[self.store.alias])

    def _run_job(self, job: Job) -> JobResult:
        result = JobResult(job.hook_phid)
        self._register_thread_connection()
        connection = connections[self.store.alias]
        lock = webhook_lock_name(self.config.namespace, job.hook_phid)
        try:
            connection.close_if_unusable_or_obsolete()
            if not self.store.try_lock(lock):
                result.lock_busy = True
                return result
            try:
                if self._in_backoff(job.hook_phid, result):
                    return result
                result.breaker_closed = True
                pending = list(job.rows)
                while pending and not self.stopping.is_set():
                    step = self._deliver_row(job, pending.pop(0), result)
                    if step is _Step.STOP:
                        break
                    if step is _Step.LOST and pending:
                        pending = self._still_due(pending, result)
            finally:
                self.store.release_lock(lock)
        except DatabaseError:
            result.database_error = True
            _close_quietly(connection)
        except Exception:
            logger.exception("unexpected error in delivery job", extra={"hook": job.hook_phid})
        return result

    def _in_backoff(self, hook_phid: str, result: JobResult) -> bool:
        threshold = self.config.error_threshold
        window = self.config.error_backoff_sec
        epochs = self.store.recent_failures(hook_phid, window=window, limit=threshold)
        if len(epochs) >= threshold:
            result.backoff_until = epochs[threshold - 1] + window + 1
            return True
        return False

    def _still_due(self, rows: list[RequestRow], result: JobResult) -> list[RequestRow]:
        """After a lost claim our snapshots are likely stale (another process is at work): re-read them."""
        fresh, now = self.store.fetch([row.id for row in rows])
        by_id = {row.id: row for row in fresh}
        keep = []
        for row in rows:
            current = by_id.get(row.id)
            lease, retry = self.config.claim_lease_sec, self.config.retry_backoff_sec
            if current is not None and now is not None and is_due(current, now, lease, retry):
                keep.append(current)
            else:
                result.recheck.append(row.id)
        return keep

    def _deliver_row(self, job: Job, row: RequestRow, result: JobResult) -> _Step:
        """Claim, deliver and write one row."""
        if job.hook is not None and not job.hook.hmac_key:
            return _Step.STOP
        try:
            properties: dict[str, Any] | None = decode_properties(row.properties or "")
        except UndecodableProperties:
            properties = None
        version = self.store.claim(row, lease=self.config.claim_lease_sec, retry_backoff=self.config.retry_backoff_sec)
        if version is None:
            metrics.CLAIMS.labels("lost").inc()
            self.count("claims_lost")
            result.recheck.append(row.id)
            return _Step.LOST
        metrics.CLAIMS.labels("won").inc()
        self.count("claims_won")
        claimed_at = time.monotonic()
        if properties is None:
            logger.error(
                "request properties cannot be decoded: marked failed, column left untouched",
                extra={"request": row.phid, "hook": row.webhook_phid},
            )
            written = self._write(row, version, claimed_at, "failed", "none", False, None)
            metrics.DELIVERIES.labels("failed", "properties").inc()
            self.count("deliveries.failed")
            self._finish(row, written, result)
            return _Step.NEXT
        outcome = self.dispatcher.process(row, properties, job.hook)
        new_properties = encode_compact(with_error(properties, outcome))
        written = self._write(
            row, version, claimed_at, outcome.status, outcome.result, outcome.attempted, new_properties
        )
        self._record(row, outcome, written)
        if written is not None and outcome.retried:
            result.retry.append(
                replace(
                    row,
                    last_result=outcome.result,
                    last_epoch=written,
                    date_modified=written,
                    properties=new_properties,
                )
            )
        else:
            self._finish(row, written, result)
        if outcome.result == "fail" and self._in_backoff(row.webhook_phid, result):
            return _Step.STOP
        return _Step.NEXT

    def _finish(self, row: RequestRow, written: int | None, result: JobResult) -> None:
        if written is None:
            result.recheck.append(row.id)
        else:
            result.finished.append(row.id)

    def _write(
        self,
        row: RequestRow,
        version: int,
        claimed_at: float,
        status: str,
        result: str,
        attempted: bool,
        properties: str | None,
    ) -> int | None:
        """Write the outcome, retrying through a database outage while our claim can still hold."""
        give_up = claimed_at + self.config.claim_lease_sec - WRITE_MARGIN_SEC
        delay = 0.2
        while True:
            try:
                written = self.store.write_outcome(
                    row.id, version, status=status, result=result, attempted=attempted, properties=properties
                )
                if written is None:
                    metrics.DEGRADED.labels("claim_lost_before_write").inc()
                    self.count("degraded.claim_lost_before_write")
                    logger.warning("claim expired before the result was written", extra={"request": row.phid})
                return written
            except DatabaseError:
                _close_quietly(connections[self.store.alias])
                metrics.DEGRADED.labels("result_write_retry").inc()
                self.count("degraded.result_write_retry")
                if time.monotonic() + delay > give_up:
                    logger.error(
                        "result could not be written before the lease ran out; the request will be retried",
                        extra={"request": row.phid},
                    )
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _record(self, row: RequestRow, outcome: Outcome, written: int | None) -> None:
        label = "sent" if outcome.status == "sent" else "retry" if outcome.retried else "failed"
        metrics.DELIVERIES.labels(label, outcome.error_type).inc()
        self.count(f"deliveries.{label}")
        extra = {
            "request": row.phid,
            "hook": row.webhook_phid,
            "status": outcome.status,
            "error_type": outcome.error_type,
            "error_code": outcome.error_code,
        }
        if written is None:
            return
        if outcome.status == "sent":
            logger.debug("webhook delivered", extra=extra)
        else:
            logger.warning("webhook request failed", extra=extra)


def _close_quietly(connection: Any) -> None:
    """Drop a connection that may already be broken (closing one can itself raise)."""
    try:
        connection.close()
    except DatabaseError:
        connection.connection = None
