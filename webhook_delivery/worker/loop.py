"""The main loop behind `manage.py deliver_webhooks`: poll, schedule, signals, heartbeat.

The main thread reads the queue window (window.QueueWindow), picks hooks with due rows as the scheduler
allows (scheduling.Scheduler: one job per hook, capacity shared out by lanes) and hands each to a delivery
thread as a job (job.JobRunner: lock, breaker, claim, deliver, write). A job's result is given back in one
piece: its Settlement to the window, the rest to the scheduler.

What it is made of comes in one `Parts` (parts.py: the real ones over Phorge's and Django's databases, or
twins.py's in memory); `build_worker` is what the command runs.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from types import FrameType

from django.db import DatabaseError

from ..config import PHORGE_ALIAS, DeliveryConfig
from ..phorge.databases import lock_warning
from ..phorge.herald import Hook
from ..state import WorkerState
from ..version import VERSION
from . import metrics
from .dispatcher import Dispatcher
from .duties import Duties, Every, Throttle
from .job import Job, JobResult, JobRunner
from .memory import limit_malloc_arenas
from .metrics import Counters
from .parts import Parts, build_parts
from .scheduling import Scheduler
from .site_records import SiteRecords
from .window import Candidate, QueueWindow

logger = logging.getLogger(__name__)

ROWS_PER_JOB = 32
HEARTBEAT_SEC = 5.0
HOOKS_RELOAD_SEC = 1.0
LOCK_CHECK_SEC = 1.0
DB_RETRY_MAX_SEC = 30.0
PAUSED_REPEAT_SEC = 300.0
QUICK_POLL_SEC = 0.02  # the poll period while requests keep arriving
QUICK_FOR_SEC = 2.0  # how long after the last arrival the poll stays quick


class Worker:
    def __init__(
        self,
        config: DeliveryConfig,
        parts: Parts,
        *,
        max_concurrent: int | None = None,
        poll_interval_ms: int | None = None,
        once: bool = False,
    ) -> None:
        self.config = config
        self.parts = parts
        self.reader = parts.reader
        self.locks = parts.locks
        self.partitions = parts.partitions
        self.phorge_settings = parts.settings
        self.dispatcher = parts.dispatcher
        self.php = parts.php
        self.heartbeat = parts.heartbeat
        self.notices = parts.notices
        self.attempts = parts.attempts
        self.holds = parts.holds  # hooks held by an operator (manage.py hold_webhooks): nothing of theirs is claimed
        self.retries = parts.retries  # Retry now orders: failures they cover wait no backoff
        self.retrying: Mapping[str, int] = {}
        self.max_concurrent = max_concurrent or config.max_concurrent
        self.poll_interval = (poll_interval_ms or config.poll_interval_ms) / 1000.0
        self.once = once
        self.window = QueueWindow(self.reader, lease=config.claim_lease_sec, retry_backoff=config.retry_backoff_sec)
        self.stopping = threading.Event()
        self.counters = Counters()
        self.scheduler = self._scheduler(config)
        self.locks.on_lost = lambda: self.counters.record("degraded.lock_session_lost")
        self.runner = JobRunner(
            config,
            store=parts.store,
            locks=self.locks,
            dispatcher=self.dispatcher,
            counters=self.counters,
            stopping=self.stopping,
            php=self.php,
            attempts=self.attempts,
            held=lambda: self.scheduler.held,
            retrying=lambda hook_phid: self.retrying.get(hook_phid, 0),
            writers=self.max_concurrent,
            pipelining=parts.pipelining,
        )
        self.hooks: dict[str, Hook] = {}
        self._hooks_loaded = 0.0
        self._db_down_since: float | None = None
        self._db_back_at = float("-inf")  # when the loop last found the database again
        self._signals = 0
        self._reported: dict[str, int] = {}  # the counts the last activity line was told
        self.paused: str | None = None  # why nothing is delivered now (silent mode unknown)
        self._quick_until = float("-inf")
        self._paused_repeat = Throttle(PAUSED_REPEAT_SEC)
        self._silent_said = False

    def _scheduler(self, config: DeliveryConfig) -> Scheduler:
        """The hooks' scheduling, told what each hook's last answer asked for (Retry-After, when honored)."""
        return Scheduler(
            self.max_concurrent,
            estimated_now=self.window.estimated_now,
            counters=self.counters,
            attempts=self.attempts,
            retry_after=self.dispatcher.handles.retry_after,
            honor_retry_after=config.honor_retry_after,
        )

    def snapshot(self) -> WorkerState:
        """The heartbeat state: what the dashboard and the health JSON show about this process."""
        scheduler = self.scheduler
        down = self._db_down_since
        return WorkerState(
            max_concurrent=self.max_concurrent,
            in_flight=scheduler.in_flight(),
            lanes=scheduler.lanes_in_flight(),
            tracked_queued=self.window.held_count,
            counts=self.counters.snapshot(),
            database_down_for_sec=None if down is None else round(time.monotonic() - down, 1),
            hooks_in_backoff=dict(scheduler.backoff_until),
            hooks_misconfigured=tuple(sorted(scheduler.misconfigured)),
            hooks_held=tuple(sorted(scheduler.held)),
            hooks_lock_busy=tuple(scheduler.lock_busy()),
            stopping=self.stopping.is_set(),
            php_worker=self.php.latest(),
            delivery_paused=self.paused,
            php_task_while_delegated=self.php.task_while_delegated(),
            phorge_now=self.window.estimated_now(),
        )

    # -- the loop's duties (duties.py): Django's database is written and read by the site-records thread,
    # so nothing here waits on it.

    def _take_holds(self, site: SiteRecords) -> None:
        """The holds and Retry now orders the site-records thread read last: in force from the next poll on."""
        self.scheduler.hold(site.held())
        self._retry_now(site.retrying())

    def _heartbeat(self, site: SiteRecords) -> None:
        state = self.snapshot()
        site.beat(state)
        self._report_activity(state.counts)
        for hook_phid, lowest_id in site.take_notices().items():
            logger.info(
                "failed requests put back in the queue",
                extra={"event": "requeue.notice_taken", "hook": hook_phid, "from_id": lowest_id},
            )
            self.window.rewind(hook_phid, lowest_id)

    def _retry_now(self, orders: Mapping[str, int]) -> None:
        if orders is self.retrying:
            return
        for hook_phid, failed_up_to in orders.items():
            if failed_up_to > self.retrying.get(hook_phid, 0):
                logger.info(
                    "Retry now: the hook's failed requests up to a moment wait no backoff",
                    extra={"event": "retry.order_seen", "hook": hook_phid, "failed_up_to": failed_up_to},
                )
        self.retrying = orders
        self.window.retry_now(orders)

    def _report_activity(self, counts: Mapping[str, int]) -> None:
        """One INFO line per period: deliveries, and claims lost to other processes (normal when several
        run). Each success alone is logged at DEBUG only; at hundreds per second it would drown the rest."""
        keys = ("deliveries.sent", "deliveries.retry", "deliveries.failed", "claims_won", "claims_lost")
        new = {key: counts.get(key, 0) - self._reported.get(key, 0) for key in keys}
        if any(new.values()):
            logger.info(
                "activity since the last report",
                extra={
                    "event": "worker.activity",
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
            logger.warning(
                "not in the main thread: signal handlers not installed", extra={"event": "worker.no_signals"}
            )
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def handle(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals > 1:
                logger.warning(
                    "second signal: exiting now; claimed requests come back after the lease",
                    extra={"event": "worker.forced_stop"},
                )
                os._exit(1)
            logger.info(
                "stopping: no new claims, finishing deliveries in flight",
                extra={"event": "worker.stopping", "signal": signum},
            )
            self.stop()

        for sig in previous:
            signal.signal(sig, handle)

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def stop(self) -> None:
        self.stopping.set()

    def run(self, *, handle_signals: bool = True) -> int:
        """The loop, until stopped (or, with `once`, until nothing is due). `handle_signals=False` when the
        caller installed them already (the command does, before it opens its metrics port)."""
        restore = self.install_signal_handlers() if handle_signals else (lambda: None)
        site = self._start()
        duties = Duties(
            Every("php_watch", 0.0, lambda: self.php.watch(self.window.estimated_now())),  # read by delivery threads
            Every("holds", 0.0, lambda: self._take_holds(site)),
            Every("heartbeat", HEARTBEAT_SEC, lambda: self._heartbeat(site)),
            Every("lock_check", LOCK_CHECK_SEC, self.locks.check),
        )
        pool = ThreadPoolExecutor(max_workers=self.max_concurrent, thread_name_prefix="deliver")
        running: dict[Future[JobResult], Job] = {}
        clean = False
        try:
            while not self.stopping.is_set():
                duties.run_due()
                scheduled, more = self._poll_and_schedule(pool, running)
                if self.once and not running and not scheduled and not more:
                    break
                self._wait(running, scheduled or more)
            clean = True
        finally:
            for future in list(running):
                self._absorb(future.result(), running.pop(future))
            pool.shutdown(wait=True)
            self.runner.close()
            self.dispatcher.close()  # the libcurl handles and the connections they keep
            self._report_activity(self.counters.snapshot())
            site.close(self.snapshot(), clean=clean)
            self.parts.closing.close()  # the attempt log's last records, the locks, the pools, the connections
            restore()
        logger.info("deliver_webhooks stopped", extra={"event": "worker.stopped"})
        return 0

    def _start(self) -> SiteRecords:
        """Said and read once before the first poll; the site-records thread started."""
        logger.info(
            "deliver_webhooks started",
            extra={
                "event": "worker.started",
                "version": VERSION,
                "max_concurrent": self.max_concurrent,
                "poll_interval_ms": int(self.poll_interval * 1000),
                "lease_sec": self.config.claim_lease_sec,
                "retry_backoff_sec": self.config.retry_backoff_sec,
                "timeout_sec": self.config.delivery_timeout,
                "database_connections": self.parts.connections,
            },
        )
        try:
            self.phorge_settings.current()  # logs each of Phorge's settings in force, and where it came from
        except DatabaseError:
            pass  # the loop notices the outage and says so
        self._warn_if_locks_elsewhere()
        held = self.holds.refresh()  # before the first claim, so a --once run honours the holds too
        self.scheduler.hold(held)
        self._retry_now(self.retries.refresh() if self.retries is not None else {})
        site = SiteRecords(
            self.heartbeat,
            self.holds,
            self.notices,
            held=held,
            period=HEARTBEAT_SEC,
            behind=lambda: self.counters.record("degraded.heartbeat_behind"),
            actions=self.parts.actions,
            retries=self.retries,
            retrying=self.retrying,
        )
        limit_malloc_arenas()
        return site

    def _warn_if_locks_elsewhere(self) -> None:
        """Said at start: on a partitioned Phorge, PHP's workers take their hook locks on another master."""
        try:
            master = self.partitions.current().unreached("repository")
        except DatabaseError:
            return  # the loop notices the outage and says so
        if master is not None:
            logger.warning(
                lock_warning(master), extra={"event": "locks.elsewhere", "application": "repository", "master": master}
            )

    def _wait(self, running: dict[Future[JobResult], Job], busy: bool) -> None:
        if running:
            done, _ = wait(
                list(running),
                timeout=0 if busy and len(running) < self.max_concurrent else self._poll_period(),
                return_when=FIRST_COMPLETED,
            )
            for future in done:
                self._absorb(future.result(), running.pop(future))
        elif not busy:
            self.stopping.wait(self._poll_period())

    def _poll_period(self) -> float:
        """Quick while requests keep arriving, the configured idle period otherwise: with nothing arriving
        the database sees no more polls than the idle period allows."""
        if time.monotonic() < self._quick_until:
            return min(self.poll_interval, QUICK_POLL_SEC)
        return self.poll_interval

    # -- main thread: poll and schedule ----------------------------------------------------------

    def _poll_and_schedule(self, pool: ThreadPoolExecutor, running: dict[Future[JobResult], Job]) -> tuple[bool, bool]:
        try:
            self.reader.recycle_connection()
            frontier = self.window.frontier
            more = self.window.poll()
            if self.window.frontier != frontier:  # new requests arrived: more are likely to follow
                self._quick_until = time.monotonic() + QUICK_FOR_SEC
            if self._pause_for_silent_mode():
                self._database_recovered()
                return False, False
            candidates = self.window.candidates(self.scheduler.schedulable)
            if candidates and len(running) < self.max_concurrent:
                self._load_hooks(candidates)
                if self.scheduler.note_misconfigured(self.hooks, candidates):
                    candidates = [c for c in candidates if c.hook not in self.scheduler.misconfigured]
            self._database_recovered()
        except DatabaseError:
            self._database_failed()
            return False, False
        metrics.TRACKED_QUEUED.set(self.window.held_count)
        scheduler = self.scheduler
        last_results = ((c.first_id, c.hook, self.window.last_result(c.hook, c.first_id)) for c in candidates)
        scheduled = False
        for hook_phid, lane in scheduler.order(last_results):
            if self.stopping.is_set() or scheduler.full():
                break
            if not scheduler.admits(lane):
                continue
            rows = self.window.take(hook_phid, ROWS_PER_JOB)
            job = Job(hook_phid, self.hooks.get(hook_phid), rows, now=self.window.estimated_now())
            scheduler.start(job, lane)
            running[pool.submit(self.runner.run, job)] = job
            scheduled = True
        scheduler.set_in_flight_metrics()
        return scheduled, more or (bool(candidates) and scheduler.full())

    def _pause_for_silent_mode(self) -> bool:
        """True while Phorge's silent mode cannot be told: then nothing is claimed, sent or failed. Said at
        once, every few minutes while it lasts, and when it ends; silent mode on is said once as it begins."""
        silent = self.dispatcher.silent()
        if silent is not None:
            if self.paused is not None:
                self.paused = None
                logger.info("phabricator.silent is known again: delivering", extra={"event": "worker.resumed"})
            if silent != self._silent_said:
                self._silent_said = silent
                if silent:
                    logger.warning(
                        "phabricator.silent is on: queued requests are failed for good (hook/silent) without a "
                        "call, as Phorge's own worker does; each is logged at DEBUG and counted as failed",
                        extra={"event": "worker.silent_mode"},
                    )
            return False
        self.paused = self.phorge_settings.current().paused_reason() or "phabricator.silent is unknown"
        if self._paused_repeat.ready():
            logger.warning(self.paused, extra={"event": "worker.paused", "queued_tracked": self.window.held_count})
        return True

    def blocked(self) -> str | None:
        """Why this run could deliver nothing that an operator must fix, in one line; None when it could."""
        if self.paused is not None:
            return f"nothing delivered: {self.paused}; {self.window.held_count} queued request(s) left as they are"
        if self._db_down_since is not None:
            return "nothing more delivered: Phorge's herald database does not answer"
        return None

    def summary(self) -> list[str]:
        """What a `--once` run left queued, and why (a pause is the command's error line: `blocked()`)."""
        counts = self.counters.snapshot()
        lines = []
        if counts.get("left_to_php.task"):
            lines.append(
                f"left {counts['left_to_php.task']} request(s) to Phorge's PHP worker: "
                "each has a HeraldWebhookWorker task queued"
            )
        if counts.get("left_to_php.young"):
            lines.append(
                f"left {counts['left_to_php.young']} request(s) too young to tell whether Phorge's PHP worker "
                "takes them (PHP delivered lately)"
            )
        scheduler = self.scheduler
        if scheduler.misconfigured:
            lines.append(f"left the requests of {len(scheduler.misconfigured)} hook(s) with an empty HMAC key")
        if scheduler.backoff_until:
            lines.append(f"left the requests of {len(scheduler.backoff_until)} hook(s) in Phorge's error backoff")
        if scheduler.held:
            lines.append(f"left the requests of {len(scheduler.held)} held hook(s) (manage.py hold_webhooks --list)")
        return lines

    def _load_hooks(self, candidates: list[Candidate]) -> None:
        """Hook rows (URI, key, status) at most HOOKS_RELOAD_SEC old, as PHP reads them per task."""
        unknown = any(c.hook not in self.hooks for c in candidates)
        if unknown or time.monotonic() - self._hooks_loaded > HOOKS_RELOAD_SEC:
            self.hooks = self.reader.hooks()
            self._hooks_loaded = time.monotonic()

    def _absorb(self, result: JobResult, job: Job) -> None:
        self.scheduler.finish(job, result)
        self.window.settle(result.settlement)
        # A job can end long after its error (its last result write retried through the outage): an error
        # from before the loop saw the database again is that outage's, not a new one.
        if result.database_error and (self._db_down_since is not None or result.failed_at > self._db_back_at):
            self._database_failed()

    def _database_failed(self) -> None:
        self.counters.record("degraded.database")
        if self._db_down_since is None:
            self._db_down_since = time.monotonic()
            logger.error(
                "database unavailable: backing off and reconnecting; nothing is marked failed",
                extra={"event": "database.lost"},
            )
        self.reader.drop_connection()
        delay = min(DB_RETRY_MAX_SEC, 0.5 + (time.monotonic() - self._db_down_since) / 4)
        self.stopping.wait(delay)

    def _database_recovered(self) -> None:
        if self._db_down_since is not None:
            self._db_back_at = time.monotonic()
            logger.info(
                "database reachable again",
                extra={"event": "database.back", "outage_sec": round(time.monotonic() - self._db_down_since, 1)},
            )
            self._db_down_since = None


def build_worker(
    config: DeliveryConfig,
    *,
    dispatcher: Dispatcher | None = None,
    max_concurrent: int | None = None,
    poll_interval_ms: int | None = None,
    once: bool = False,
    alias: str = PHORGE_ALIAS,
) -> Worker:
    """A worker over Phorge's and Django's databases: what `deliver_webhooks` runs (parts.build_parts)."""
    parts = build_parts(config, alias=alias, dispatcher=dispatcher)
    return Worker(config, parts, max_concurrent=max_concurrent, poll_interval_ms=poll_interval_ms, once=once)
