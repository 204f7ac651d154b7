"""One hook's turn on a delivery thread: lock, breaker, then claim, deliver and write its rows one by one.

The job takes Phorge's named lock for the hook (busy: the hook is skipped for now), checks Phorge's error
breaker, re-reads its rows, then delivers them oldest first. It hands the hook back after the first failed
or timed-out attempt: the rest of its rows go back to the window for a later turn, so a dead receiver
costs one timeout per turn, never a batch of them. Every statement goes through the process's session
pool; the lock lives on the process's lock session.

While few jobs run, a result is written on a helper thread while the job claims and sends its next row,
and once the hook has answered, the next row is claimed while the current call runs (pipeline.py): the
hook's calls stop waiting on the database, and still follow each other one at a time. With many jobs the
other hooks' calls fill those waits, and both stay on the job's thread. The write starts the moment the answer is in,
so the window in which a crash leaves a delivered row to be sent again is as wide as it was; a result is
still written only under its claim.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError

from ..config import DeliveryConfig
from ..phorge.databases import MasterUnavailable
from ..phorge.herald import Hook, RequestResult, RequestRow, RequestStatus, backoff_until, is_due
from ..phorge.locks import webhook_lock_name
from ..phorge.outcomes import Outcome, readable_properties, with_error
from ..phorge.phpjson import encode_compact
from .attempts import AttemptLog, AttemptRecord
from .dispatcher import Dispatcher, SilentModeUnknown, UnsendableRequest
from .memory import release_free_memory
from .metrics import Counters, Event
from .parts import HookLocks, QueueStore
from .php_watch import PhpWatch
from .pipeline import AHEAD_JOBS, Ahead, ClaimWithWrite, Writes
from .results import Results
from .sessions import LockLost
from .window import Settlement

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


UNREADABLE = Outcome(
    RequestStatus.FAILED, RequestResult.NONE, "hook", "unreadable", attempted=False
)  # recorded as failed/none/0 only
StartWrite = Callable[[RequestRow, Outcome, int, float, str], None]  # row, outcome, version, claimed at, properties
UNLOCKED = -1  # the token of a job run without the hook lock (never a lock session's generation)


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
        php: PhpWatch | None = None,
        attempts: AttemptLog | None = None,
        held: Callable[[], frozenset[str]] = frozenset,
        writers: int = 16,
    ) -> None:
        self.config = config
        self.held = held  # the hooks an operator holds now (read at each heartbeat)
        self.store = store
        self.locks = locks
        self.dispatcher = dispatcher
        self.counters = counters
        self.stopping = stopping
        self.php = php
        self.attempts = attempts
        self.results = Results(store, config, counters)
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
                writes = Writes(self._writer, lambda row, outcome, written: self._settle(row, outcome, written, result))
                try:
                    self._deliver_rows(job, result, name, token, writes)
                finally:
                    writes.settle()  # every result written (or given up) before the hook's lock goes
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
                    extra={"lock_database": self.locks.alias},
                )
            return UNLOCKED
        if self._unlocked and token is not None:
            self._unlocked = False
            logger.info("Phorge's hook locks are taken again", extra={"lock_database": self.locks.alias})
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
            elif now is not None and is_due(current, now, self.config.claim_lease_sec, self.config.retry_backoff_sec):
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

    def _deliver_rows(self, job: Job, result: JobResult, name: str, token: int, writes: Writes) -> None:
        pending = self._reread(job.rows, result.settlement)
        lost_once: set[int] = set()
        locked = token != UNLOCKED
        ahead: Ahead | None = None
        answered = False

        def claim_next() -> None:
            """Just before a call: once the hook has answered, its next row is claimed while the call runs."""
            nonlocal ahead
            # With many hooks at once the process is bound by its CPU, not by the database's answers.
            if answered and pending and pending[0].properties is not None and self._running <= AHEAD_JOBS:
                held, lock = self.locks.for_claim(name, token) if locked else (True, None)
                if held:
                    ahead = self._claim_ahead(job, pending.pop(0), lock)

        def start_write(row: RequestRow, outcome: Outcome, version: int, claimed_at: float, properties: str) -> None:
            """The result's write; with many jobs running, on this thread and, when the job goes on, with the
            next row's claim in the same round trip."""
            nonlocal ahead
            write = (row, version, claimed_at, (outcome.status, outcome.result, outcome.attempted, properties))
            here = self._running > AHEAD_JOBS
            # A row claimed ahead already (while fewer jobs ran) is the next one: nothing to claim with this write.
            following = (
                None if not here or ahead else self._following(job, outcome, pending, name, token if locked else None)
            )
            if following is None:
                writes.start(row, outcome, lambda: self.results.write(*write), here=here)
                return
            claim = ClaimWithWrite(*following, store=self.store, config=self.config)
            writes.start(row, outcome, lambda: self.results.write(*write, first=claim.write_then_claim), here=True)
            ahead = claim.ahead()
            if ahead is None:
                pending.insert(0, following[0])  # the claim's fate is not known: its own claim finds out

        try:
            while (pending or ahead is not None) and not self.stopping.is_set():
                if job.hook_phid in self.held():
                    return  # held since the job began: no new call (hold_webhooks waits for this)
                if ahead is not None:
                    taken, ahead = ahead, None
                    row = taken.row
                    version, claimed_at = taken.take()
                    if version is not None and not Ahead.fresh(claimed_at):
                        # The call before took long: this one's deadline would be short. Claim it again.
                        if taken.release(self.store, None):
                            self.counters.record("claims_released")
                            pending.insert(0, row)
                        else:
                            result.settlement.claimed.append(row.id)
                        continue
                    readable = (taken.properties, taken.problem)
                    outcome = self._claimed(job, row, readable, version, claimed_at, result, start_write, claim_next)
                else:
                    row = pending.pop(0)
                    held, lock = self.locks.for_claim(name, token) if locked else (True, None)
                    if not held:
                        result.lock_lost = True
                        return
                    outcome = self._deliver_row(job, row, result, lock, start_write, claim_next)
                if outcome is None:  # claim lost: our snapshots are likely stale, or the lock is gone
                    if locked and not self.locks.holds(name, token):
                        result.lock_lost = True
                        return
                    if row.id in lost_once:
                        result.settlement.fresh.append(dataclasses.replace(row, properties=None))
                        continue
                    lost_once.add(row.id)
                    pending = self._reread([row, *pending], result.settlement)
                elif outcome.result == RequestResult.FAIL:
                    return  # hand the hook back: its other rows wait for a later turn
                else:
                    answered = answered or outcome.result == RequestResult.OKAY
        finally:
            if ahead is not None and ahead.release(self.store, result.settlement):
                self.counters.record("claims_released")

    def _following(
        self, job: Job, outcome: Outcome, pending: list[RequestRow], name: str, token: int | None
    ) -> tuple[RequestRow, tuple[str, int] | None] | None:
        """The row to claim in the round trip that writes `outcome` (taken off `pending`), and the lock the
        claim checks: the job's next row, when the job goes on to it."""
        if outcome.result == RequestResult.FAIL or not pending or pending[0].properties is None:
            return None
        held, lock = self.locks.for_claim(name, token) if token is not None else (True, None)
        try:
            self._may_claim(job)
        except _Stop:
            return None
        return (pending.pop(0), lock) if held and not self.stopping.is_set() else None

    def _claim_ahead(self, job: Job, row: RequestRow, lock: tuple[str, int] | None) -> Ahead | None:
        try:
            self._may_claim(job)
        except _Stop:
            return None  # the next turn of the loop finds out again, on its own thread
        claim = lambda: self.store.claim(  # noqa: E731
            row, lease=self.config.claim_lease_sec, retry_backoff=self.config.retry_backoff_sec, lock=lock
        )
        return Ahead.start(self._writer, claim, row, readable_properties(row.properties))

    def _deliver_row(
        self,
        job: Job,
        row: RequestRow,
        result: JobResult,
        lock: tuple[str, int] | None,
        start_write: StartWrite,
        before_call: Callable[[], None],
    ) -> Outcome | None:
        if row.properties is not None:
            return self._deliver_loaded(job, row, result, lock, "", start_write, before_call)
        # Queued rows always have properties: these were too large to come with the batch.
        with self._large:
            found = self.store.large_properties(row.id)
            if found is None:
                return None  # no longer queued: re-read as after a lost claim
            length, properties = found
            problem = "" if properties is not None else f"properties of {length} bytes, more than Phorge can write"
            try:
                with_text = dataclasses.replace(row, properties=properties)
                return self._deliver_loaded(job, with_text, result, lock, problem, start_write, before_call)
            finally:
                release_free_memory()

    def _may_claim(self, job: Job) -> None:
        if job.hook is not None and not job.hook.hmac_key:
            raise _Stop
        if self.dispatcher.silent() is None:
            raise _Stop  # silent mode unknown: claim nothing

    def _deliver_loaded(
        self,
        job: Job,
        row: RequestRow,
        result: JobResult,
        lock: tuple[str, int] | None,
        problem: str,
        start_write: StartWrite,
        before_call: Callable[[], None],
    ) -> Outcome | None:
        """Claim, deliver and write one row; None when the claim was lost.

        The poison rule: a row we cannot read, cannot turn into a payload, or whose outcome could not be
        written back, is marked failed before any call, its properties left byte for byte, after one
        claim. Nothing is ever sent that cannot be recorded, so nothing is sent twice or loops.
        """
        self._may_claim(job)
        readable = (None, problem) if problem else readable_properties(row.properties)
        version = self.store.claim(
            row, lease=self.config.claim_lease_sec, retry_backoff=self.config.retry_backoff_sec, lock=lock
        )
        return self._claimed(job, row, readable, version, time.monotonic(), result, start_write, before_call)

    def _claimed(
        self,
        job: Job,
        row: RequestRow,
        readable: tuple[dict[str, Any] | None, str],
        version: int | None,
        claimed_at: float,
        result: JobResult,
        start_write: StartWrite,
        before_call: Callable[[], None],
    ) -> Outcome | None:
        """Deliver a row whose claim was tried (`version` None: lost) and start its result's write."""
        if version is None:
            self.counters.record("claims_lost")
            return None
        self.counters.record("claims_won")
        began = time.time()
        properties, problem = readable
        if properties is None:
            return self._poison(row, version, claimed_at, result, problem, began)
        before_call()
        try:
            outcome = self.dispatcher.process(row, properties, job.hook, started=claimed_at)
        except UnsendableRequest as exc:
            return self._poison(row, version, claimed_at, result, str(exc), began)
        except SilentModeUnknown:
            result.settlement.claimed.append(row.id)  # untouched but for the claim: back after the lease
            raise _Stop from None
        except MasterUnavailable:
            # Its object lives on a master that does not answer (Masters said so): it waits out its claim.
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
            return self._poison(row, version, claimed_at, result, "internal error", began)
        self._log_attempt(row, outcome, began, time.monotonic() - claimed_at)
        new_properties = encode_compact(with_error(properties, outcome))  # cannot fail: readable_properties() tried it
        start_write(row, outcome, version, claimed_at, new_properties)
        return outcome

    def _settle(self, row: RequestRow, outcome: Outcome, written: int | None, result: JobResult) -> None:
        """What a written (or given up) result means for the job, the window and the log."""
        self.results.record(row, outcome, written)
        if outcome.result == RequestResult.OKAY:
            result.answered = True
        elif outcome.result == RequestResult.FAIL:
            result.answered = False
        if written is None:
            result.settlement.claimed.append(row.id)
        elif outcome.retried:
            result.settlement.retried.append((row.id, written))
        else:
            result.settlement.done.append(row.id)

    def _log_attempt(self, row: RequestRow, outcome: Outcome, began: float, seconds: float) -> None:
        if self.attempts is not None:
            self.attempts.record(AttemptRecord.of(row, outcome, began, seconds))

    def _poison(
        self, row: RequestRow, version: int, claimed_at: float, result: JobResult, problem: str, began: float
    ) -> Outcome:
        logger.error(
            "request cannot be delivered as stored: marked failed, properties left untouched",
            extra={"request": row.phid, "hook": row.webhook_phid, "reason": problem},
        )
        written = self.results.write(row, version, claimed_at, (RequestStatus.FAILED, RequestResult.NONE, False, None))
        self.counters.record("deliveries.unreadable")
        (result.settlement.done if written is not None else result.settlement.claimed).append(row.id)
        self._log_attempt(row, UNREADABLE, began, time.monotonic() - claimed_at)
        return UNREADABLE
