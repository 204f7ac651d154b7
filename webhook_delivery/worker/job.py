"""One hook's turn on a delivery thread: lock, breaker, then claim, deliver and write its rows one by one.

The job takes Phorge's named lock for the hook (busy: the hook is skipped for now), checks Phorge's error
breaker, re-reads its rows, then delivers them oldest first. It hands the hook back after the first failed
or timed-out attempt: the rest of its rows go back to the window for a later turn, so a dead receiver
costs one timeout per turn, never a batch of them. Every statement goes through the process's session
pool; the lock lives on the process's lock session.

Each row takes one way through the row loop: the next row under a claim (or a lost claim), the decision
for it (the call's outcome, or the poison rule's), its result's write, given back as a value (`Written`)
and settled. How claims and writes overlap the calls is the job's pipeline (pipeline.py), chosen when the
job starts as the worker's `Pipelining` says: on helper threads while few jobs run, on the job's own
thread, a write carrying the next claim, while many do.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.db import DatabaseError

from ..config import DeliveryConfig
from ..phorge.databases import MasterUnavailable
from ..phorge.herald import Hook, RequestResult, RequestRow, RequestStatus, backoff_until, is_due, retry_wait
from ..phorge.locks import webhook_lock_name
from ..phorge.outcomes import Outcome, readable_properties, with_error
from ..phorge.phpjson import encode_compact
from .attempts import AttemptLog, AttemptRecord
from .dispatcher import Dispatcher, SilentModeUnknown, UnsendableRequest
from .memory import release_free_memory
from .metrics import Counters, Event
from .parts import HookLocks, Pipelining, QueueStore
from .php_watch import PhpWatch
from .pipeline import Claimed, Inline, Lost, Overlapped, Pipeline
from .results import UNREADABLE, Finish, NextClaim, Results, Written
from .sessions import LockLost
from .source import Settlement

logger = logging.getLogger(__name__)

LARGE_AT_ONCE = 1  # requests with large properties in hand at once, per process: memory stays bounded


@dataclass
class Job:
    hook_phid: str
    hook: Hook | None
    rows: list[RequestRow]
    now: int | None = None  # the database's time as the window estimated it when the job was made


@dataclass
class JobResult:
    """What one job did: the window's part, settled in one call, and the facts the scheduler acts on."""

    settlement: Settlement
    answered: bool | None = None  # True after a 2xx, False after a failed or timed-out attempt
    lock_busy: bool = False
    lock_lost: bool = False
    breaker_closed: bool = False
    backoff_until: int | None = None
    database_error: bool = False
    failed_at: float = 0.0  # time.monotonic() of the database error: the loop ignores one from before it recovered


UNLOCKED = -1  # the token of a job run without the hook lock (never a lock session's generation)


def _nothing() -> None:
    pass


class _Stop(Exception):
    """End the job early; the rows it did not reach go back to the window as they were."""


class JobRunner:
    """Runs jobs on delivery threads; holds nothing per job."""

    def __init__(
        self,
        config: DeliveryConfig,
        *,
        store: QueueStore,
        locks: HookLocks,
        dispatcher: Dispatcher,
        counters: Counters,
        stopping: threading.Event,
        pipelining: Pipelining,
        php: PhpWatch | None = None,
        attempts: AttemptLog | None = None,
        held: Callable[[], frozenset[str]] = frozenset,
        retrying: Callable[[str], int] = lambda hook_phid: 0,
        writers: int = 16,
    ) -> None:
        self.config = config
        self.held = held  # the hooks an operator holds now (read at each heartbeat)
        self.retrying = retrying  # a hook's Retry now: its failures up to this moment wait no backoff
        self.store = store
        self.locks = locks
        self.dispatcher = dispatcher
        self.counters = counters
        self.stopping = stopping
        self.php = php
        self.attempts = attempts
        self.results = Results(store, config, counters)
        self.pipelining = pipelining
        self._large = threading.BoundedSemaphore(LARGE_AT_ONCE)
        # At most one write and one claim ahead in flight per job: two helper threads per job that can run.
        self._writer = ThreadPoolExecutor(max_workers=2 * max(1, writers), thread_name_prefix="write")
        self._unlocked = False  # delivering without hook locks now (their master does not answer)
        self._running = 0  # jobs running now
        self._count = threading.Lock()

    def close(self) -> None:
        """After the last job: the writer threads end."""
        self._writer.shutdown(wait=True)

    def run(self, job: Job) -> JobResult:
        with self._count:
            self._running += 1
        try:
            return self._run(job)
        finally:
            with self._count:
                self._running -= 1

    def _run(self, job: Job) -> JobResult:
        result = JobResult(Settlement(job.hook_phid, job.rows))
        name = webhook_lock_name(self.config.namespace, job.hook_phid)
        try:
            if self._all_php(job, result.settlement):
                return result  # the hook's lock was never taken, so no PHP task finds it busy
            token = self._lock(name)
            if token is None:
                result.lock_busy = True
                return result
            try:
                if self._in_backoff(job.hook_phid, result):
                    return result
                result.breaker_closed = True
                self._deliver_rows(job, result, name, token)  # every result written (or given up) before the lock goes
            finally:
                if token != UNLOCKED:
                    self.locks.release(name, token)
        except _Stop:
            pass
        except DatabaseError:
            result.database_error, result.failed_at = True, time.monotonic()
        except Exception:
            logger.exception(
                "unexpected error in delivery job", extra={"event": "job.unexpected_error", "hook": job.hook_phid}
            )
        return result

    def _lock(self, name: str) -> int | None:
        """Phorge's hook lock: its token, None when someone else holds it, UNLOCKED when the lock master (the
        repository application's, not herald's) does not answer. PHP's workers cannot lock there either, so
        none of them delivers meanwhile; claims still make each request one call."""
        try:
            token = self.locks.acquire(name)
        except LockLost:
            if self.locks.beside_claims:
                raise  # herald's own server: the worker's outage handling
            if not self._unlocked:
                self._unlocked = True
                logger.error(
                    "the master holding Phorge's hook locks does not answer: delivering without the locks (PHP's "
                    "workers cannot take them either; a claim still makes each request one call)",
                    extra={"event": "locks.unavailable", "lock_database": self.locks.alias},
                )
            return UNLOCKED
        if self._unlocked and token is not None:
            self._unlocked = False
            logger.info(
                "Phorge's hook locks are taken again",
                extra={"event": "locks.available", "lock_database": self.locks.alias},
            )
        return token

    def _in_backoff(self, hook_phid: str, result: JobResult) -> bool:
        threshold, window = self.config.error_threshold, self.config.error_backoff_sec
        epochs = self.store.recent_failures(hook_phid, window=window, limit=threshold)
        result.backoff_until = backoff_until(epochs, threshold, window)
        return result.backoff_until is not None

    def _reread(self, rows: list[RequestRow], settlement: Settlement) -> list[RequestRow]:
        """The rows as they are now (with properties); those no longer due go back to the window, and
        those that are PHP's to deliver are left alone for a while."""
        fresh, now = self.store.fetch([row.id for row in rows])
        by_id = {row.id: row for row in fresh}
        due = []
        for row in rows:
            current = by_id.get(row.id)
            if current is None or current.status != RequestStatus.QUEUED:
                settlement.done.append(row.id)
            elif now is not None and is_due(current, now, self.config.claim_lease_sec, self.retry_wait(current)):
                due.append(current)
            else:
                settlement.fresh.append(dataclasses.replace(current, properties=None))  # the window keeps no text
        return self._leave_to_php(due, settlement, now) if due and now is not None else due

    def _all_php(self, job: Job, settlement: Settlement) -> bool:
        """Before the hook's lock: True (and the rows deferred) when every row of the job is PHP's."""
        if self.php is None or not self.php.latest().delivering or job.now is None:
            return False
        mine, deferred = self.php.split(job.rows, job.now)
        if mine is None or mine:
            return False
        self._defer(deferred, settlement)
        return True

    def _leave_to_php(self, rows: list[RequestRow], settlement: Settlement, now: int) -> list[RequestRow]:
        mine, deferred = (None, []) if self.php is None else self.php.split(rows, now)
        if mine is None:
            return rows
        self._defer(deferred, settlement)
        return mine

    def _defer(self, deferred: list[tuple[RequestRow, int, Event]], settlement: Settlement) -> None:
        for row, until, why in deferred:
            settlement.deferred.append((row.id, until))
            self.counters.record(why)
        if deferred:
            self.counters.record("left_to_php", len(deferred))

    def _deliver_rows(self, job: Job, result: JobResult, name: str, token: int) -> None:
        """The row loop: the next row under a claim, the decision for it, its result's write, what the written
        result means; one way to finish a row, whichever strategy the pipeline follows."""
        pending = deque(self._reread(job.rows, result.settlement))
        pipeline = self._pipeline(job, result, name, token)
        lost_once: set[int] = set()
        try:
            while not self.stopping.is_set():
                if job.hook_phid in self.held():
                    return  # held since the job began: no new call (hold_webhooks waits for this)
                step = pipeline.ahead(pending)
                if step is None and not pending:
                    return
                if step is None:
                    step = self._claim_now(job, pending.popleft(), result, name, token)
                if isinstance(step, Lost):  # our snapshots are likely stale, or the lock is gone
                    self.counters.record("claims_lost")
                    if token != UNLOCKED and not self.locks.holds(name, token):
                        result.lock_lost = True
                        return
                    if step.row.id in lost_once:
                        result.settlement.fresh.append(dataclasses.replace(step.row, properties=None))
                    else:
                        lost_once.add(step.row.id)
                        pending = deque(self._reread([step.row, *pending], result.settlement))
                    continue
                self.counters.record("claims_won")
                done = step.done
                try:
                    finish = self._decide(job, step, result, functools.partial(pipeline.before_call, pending))
                    self._settle(pipeline.finish(step, finish, pending), result)
                    failed = finish.outcome.result == RequestResult.FAIL
                finally:
                    step = finish = None  # type: ignore[assignment]  # a large row's text goes before its slot
                    done()
                if failed:
                    return  # hand the hook back: its other rows wait for a later turn
        finally:
            self._settle(pipeline.close(), result)

    def _pipeline(self, job: Job, result: JobResult, name: str, token: int) -> Pipeline:
        """The job's strategy for the whole job, as `pipelining` says for the jobs running now."""
        with self._count:
            overlapped = self.pipelining.overlapped(self._running)
        beside = functools.partial(self._beside, job, name, token)
        if overlapped:
            return Overlapped(self.results, result.settlement, beside, executor=self._writer)
        return Inline(self.results, result.settlement, beside)

    def _beside(self, job: Job, name: str, token: int, row: RequestRow) -> NextClaim | None:
        """Whether the row may be claimed beside the job's own steps now, and how: the lock that claim
        checks, the backoff the row waits."""
        held, lock = self.locks.for_claim(name, token) if token != UNLOCKED else (True, None)
        if not held or self.stopping.is_set():
            return None
        try:
            self._may_claim(job)
        except _Stop:
            return None
        return NextClaim(row, self.retry_wait(row), lock)

    def retry_wait(self, row: RequestRow) -> int:
        """The backoff the row waits: none when an operator's Retry now covers its failed attempt."""
        return retry_wait(row, self.config.retry_backoff_sec, self.retrying(row.webhook_phid))

    def _claim_now(self, job: Job, row: RequestRow, result: JobResult, name: str, token: int) -> Claimed | Lost:
        """The row's claim on the job's thread, the hook's lock checked with it. Queued rows always have
        properties: a row without came without them because they are large, and is read now, one such row
        at a time per process, its slot kept until the row is finished."""
        held, lock = self.locks.for_claim(name, token) if token != UNLOCKED else (True, None)
        if not held:
            result.lock_lost = True
            raise _Stop
        problem, done = "", _nothing
        if row.properties is None:
            self._large.acquire()
            done = self._large_done
        try:
            if row.properties is None:
                found = self.store.large_properties(row.id)
                if found is None:
                    done()
                    return Lost(row)  # no longer queued: re-read as after a lost claim
                length, text = found
                problem = "" if text is not None else f"properties of {length} bytes, more than Phorge can write"
                row = dataclasses.replace(row, properties=text)
            self._may_claim(job)
            properties, problem = (None, problem) if problem else readable_properties(row.properties)
            version = self.store.claim(
                row, lease=self.config.claim_lease_sec, retry_backoff=self.retry_wait(row), lock=lock
            )
        except BaseException:
            done()
            raise
        if version is None:
            done()
            return Lost(row)
        return Claimed(row, version, time.monotonic(), properties, problem, done, large=done is not _nothing)

    def _large_done(self) -> None:
        self._large.release()
        release_free_memory()

    def _may_claim(self, job: Job) -> None:
        if job.hook is not None and not job.hook.hmac_key:
            raise _Stop
        if self.dispatcher.silent() is None:
            raise _Stop  # silent mode unknown: claim nothing

    def _decide(self, job: Job, claimed: Claimed, result: JobResult, before_call: Callable[[], None]) -> Finish:
        """What is written for a claimed row: the call's outcome, or the poison rule's.

        The poison rule: a row we cannot read, cannot turn into a payload, or whose outcome could not be
        written back, is marked failed before any call, its properties left byte for byte, after one
        claim. Nothing is ever sent that cannot be recorded, so nothing is sent twice or loops.
        """
        began = time.time()
        row, properties = claimed.row, claimed.properties
        if properties is None:
            return self._poison(claimed, claimed.problem, began)
        before_call()
        try:
            outcome = self.dispatcher.process(row, properties, job.hook, started=claimed.at)
        except UnsendableRequest as exc:
            return self._poison(claimed, str(exc), began)
        except (SilentModeUnknown, MasterUnavailable):
            # Silent mode unknown, or its object lives on a master that does not answer (Masters said so):
            # untouched but for the claim, it comes back after the lease.
            result.settlement.claimed.append(row.id)
            raise _Stop from None
        except DatabaseError:
            raise  # an outage: the row waits out its claim and comes back
        except Exception:
            # A bug of ours, possibly after a call: never try this row again on its own.
            logger.exception(
                "unexpected error delivering a request",
                extra={"event": "delivery.unexpected_error", "request": row.phid},
            )
            return self._poison(claimed, "internal error", began)
        self._log_attempt(row, outcome, began, time.monotonic() - claimed.at)
        return Finish(outcome, encode_compact(with_error(properties, outcome)))  # readable_properties() tried it

    def _settle(self, settled: list[Written], result: JobResult) -> None:
        """What written (or given up) results mean for the job, the window and the log."""
        for written in settled:
            self.results.record(written)
            outcome = written.outcome
            if outcome.result == RequestResult.OKAY:
                result.answered = True
            elif outcome.result == RequestResult.FAIL:
                result.answered = False
            if written.version is None:
                result.settlement.claimed.append(written.row.id)
            elif outcome.retried:
                result.settlement.retried.append((written.row.id, written.version))
            else:
                result.settlement.done.append(written.row.id)

    def _log_attempt(self, row: RequestRow, outcome: Outcome, began: float, seconds: float) -> None:
        if self.attempts is not None:
            self.attempts.record(AttemptRecord.of(row, outcome, began, seconds))

    def _poison(self, claimed: Claimed, problem: str, began: float) -> Finish:
        row = claimed.row
        logger.error(
            "request cannot be delivered as stored: marked failed, properties left untouched",
            extra={"event": "delivery.unreadable", "request": row.phid, "hook": row.webhook_phid, "reason": problem},
        )
        self._log_attempt(row, UNREADABLE, began, time.monotonic() - claimed.at)
        return Finish(UNREADABLE, None)
