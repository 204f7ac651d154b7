"""How a job gets its rows claimed and its results written: one of two strategies, chosen when the job starts.

Both give the job's row loop (job.py) the same three steps: `next` (the next row, under a claim of ours),
`finish` (start writing a claimed row's result: every row ends there, a poisoned one too) and `close`
(wait for the writes in flight and take back a claim no call was made under). Both keep the promises the
hook's lock and the claims make: one call at a time for the hook, at most one write in flight for the job,
each settled before the next starts and all before the lock goes, a result written only under its claim.

* `Overlapped`, while few jobs run: the write goes to a helper thread while the job claims and sends its
  next row, and once the hook has answered in this job, its next row is claimed on a helper thread while
  the current call runs. A claim changes nothing but dateModified, so one no call was made under is taken
  back exactly (`release`), and one that cannot be taken back waits out its lease as after a crash; the
  next call's deadline counts from its claim, so a claim older than AHEAD_MAX_AGE_SEC is taken back and
  made again.
* `Inline`, while many jobs run (the process is then bound by its CPU, and the other hooks' calls fill
  the waits): the write stays on the job's thread and carries the claim of the job's next row in the same
  round trip (QueueStore.write_then_claim).

The write starts the moment the answer is in, so the window in which a crash leaves a delivered row to be
sent again is as wide as it was.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import DatabaseError

from ..config import DeliveryConfig
from ..phorge.herald import RequestRow
from ..phorge.outcomes import Outcome, readable_properties
from .parts import QueueStore
from .source import Settlement
from .store import WrittenOutcome

AHEAD_MAX_AGE_SEC = 0.25  # what a call's timeout may lose to the wait for the call before it
AHEAD_JOBS = 2  # the Overlapped strategy while at most this many jobs run: beyond, the CPU is the limit


@dataclass
class Claimed:
    """A row under a claim of ours: the version won and when, and its properties as decoded (None: the
    poison rule applies, `problem` says why)."""

    row: RequestRow
    version: int
    at: float
    properties: dict[str, Any] | None
    problem: str
    done: Callable[[], None] = lambda: None  # called once the row is finished (a large row's slot freed)
    large: bool = False  # read on its own for its size: its write is made before the job goes on


@dataclass(frozen=True)
class Lost:
    """A row whose claim was lost: another worker, PHP or a newer snapshot had it."""

    row: RequestRow


@dataclass(frozen=True)
class Finish:
    """The decision for a claimed row: the outcome, and the properties text written with it (None: the
    row's properties are left as stored)."""

    outcome: Outcome
    properties: str | None

    def written(self) -> WrittenOutcome:
        return (self.outcome.status, self.outcome.result, self.outcome.attempted, self.properties)


ClaimNow = Callable[[RequestRow], Claimed | Lost]  # the job's own claim of a row, on its thread
Write = Callable[..., int | None]  # Results.write(row, version, claimed_at, outcome, first=...)
Settle = Callable[[RequestRow, Outcome, int | None], None]  # what a written (or given up) result means


class Pipeline(Protocol):
    def next(self, pending: deque[RequestRow]) -> Claimed | Lost | None:
        """The next row under a claim (taken off `pending`), Lost, or None when the job has no more."""

    def before_call(self, pending: deque[RequestRow]) -> None:
        """Just before a claimed row's call."""

    def finish(self, claimed: Claimed, finish: Finish, pending: deque[RequestRow]) -> None:
        """Start writing the row's result; the job goes on to `pending` unless the outcome failed."""

    def close(self) -> None:
        """Every claim no call was made under taken back (or left to its lease), every write settled."""


class _Writes:
    """A job's result writes: at most one in flight, settled in order."""

    def __init__(self, executor: ThreadPoolExecutor, settle: Settle) -> None:
        self._executor = executor
        self._settle = settle
        self._pending: tuple[RequestRow, Outcome, Future[int | None]] | None = None

    def start(self, row: RequestRow, outcome: Outcome, write: Callable[[], int | None], *, here: bool) -> None:
        self.settle()  # the one before: a job never has two writes in flight
        if here:
            self._settle(row, outcome, write())
            return
        self._pending = (row, outcome, self._executor.submit(write))

    def settle(self) -> None:
        if self._pending is None:
            return
        row, outcome, future = self._pending
        self._pending = None
        self._settle(row, outcome, future.result())


class _Ahead:
    """A claim of the job's next row made off the job's thread (Overlapped) or in the round trip of the write
    before (Inline): its future gives the version won (None: lost) and when."""

    def __init__(self, row: RequestRow, future: Future[tuple[int | None, float]]) -> None:
        self.row = row
        self.future = future

    @classmethod
    def made(cls, row: RequestRow, version: int | None, at: float) -> _Ahead:
        done: Future[tuple[int | None, float]] = Future()
        done.set_result((version, at))
        return cls(row, done)

    def claimed(self) -> Claimed | Lost:
        version, at = self.future.result()  # a database error is the job's, as for a claim on its thread
        if version is None:
            return Lost(self.row)
        return Claimed(self.row, version, at, *readable_properties(self.row.properties))

    def release(self, store: QueueStore, settlement: Settlement | None) -> bool:
        """Take the claim back (won, and no call made under it): True when the row is as it was. With
        `settlement`, the window learns what became of the row: as it was, or under a claim until the lease
        ends when it could not be taken back."""
        try:
            version, _ = self.future.result()
        except DatabaseError:
            return False  # not known whether it was won: a later claim finds out
        if version is None:
            return False
        try:
            released = store.release_claim(self.row.id, version, previous=self.row.date_modified)
        except DatabaseError:
            released = False
        if settlement is not None:
            if released:
                settlement.fresh.append(dataclasses.replace(self.row, properties=None))
            else:
                settlement.claimed.append(self.row.id)
        return released


@dataclass(frozen=True)
class JobSteps:
    """What both strategies are given by the job: its store, its own claim of a row, whether a row may be
    claimed beside its steps (and the lock that claim checks), the result's write, what a written result
    means, the count of claims taken back, and what the window learns of its rows."""

    store: QueueStore
    claim_now: ClaimNow
    claim_lock: Callable[[RequestRow], tuple[bool, tuple[str, int] | None]]
    write: Write
    settle: Settle
    released: Callable[[], None]
    settlement: Settlement

    def take_back(self, ahead: _Ahead | None, *, tell_window: bool) -> bool:
        """A claim made ahead taken back (counted), True when the row is as it was."""
        if ahead is None:
            return False
        released = ahead.release(self.store, self.settlement if tell_window else None)
        if released:
            self.released()
        return released


class Overlapped:
    """Few jobs running: writes and the next claim on helper threads, beside the job's call."""

    def __init__(
        self,
        steps: JobSteps,
        *,
        executor: ThreadPoolExecutor,
        store_claim: Callable[[RequestRow, tuple[str, int] | None], int | None],
    ) -> None:
        self._steps = steps
        self._executor = executor
        self._store_claim = store_claim
        self._writes = _Writes(executor, steps.settle)
        self._ahead: _Ahead | None = None
        self._answered = False

    def next(self, pending: deque[RequestRow]) -> Claimed | Lost | None:
        while self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            claimed = ahead.claimed()
            if isinstance(claimed, Lost) or time.monotonic() - claimed.at <= AHEAD_MAX_AGE_SEC:
                return claimed
            # The call before took long: this one's deadline would be short. Claimed again, below.
            if self._steps.take_back(ahead, tell_window=False):
                pending.appendleft(ahead.row)
            else:
                self._steps.settlement.claimed.append(ahead.row.id)  # it waits out its claim
        return self._steps.claim_now(pending.popleft()) if pending else None

    def before_call(self, pending: deque[RequestRow]) -> None:
        """Once the hook has answered, its next row is claimed while this call runs."""
        if self._answered and pending and pending[0].properties is not None:
            may, lock = self._steps.claim_lock(pending[0])
            if may:
                row = pending.popleft()
                self._ahead = _Ahead(row, self._executor.submit(self._claim, row, lock))

    def _claim(self, row: RequestRow, lock: tuple[str, int] | None) -> tuple[int | None, float]:
        return self._store_claim(row, lock), time.monotonic()

    def finish(self, claimed: Claimed, finish: Finish, pending: deque[RequestRow]) -> None:
        row, version, at, written = claimed.row, claimed.version, claimed.at, finish.written()
        write = lambda: self._steps.write(row, version, at, written)  # noqa: E731
        self._writes.start(row, finish.outcome, write, here=claimed.large)
        self._answered = self._answered or finish.outcome.result == "okay"

    def close(self) -> None:
        ahead, self._ahead = self._ahead, None
        try:
            self._steps.take_back(ahead, tell_window=True)
        finally:
            self._writes.settle()


class Inline:
    """Many jobs running: everything on the job's thread, the next row's claim in the round trip of the
    result's write."""

    def __init__(self, steps: JobSteps, *, config: DeliveryConfig, retry_wait: Callable[[RequestRow], int]) -> None:
        self._steps = steps
        self._config = config
        self._retry_wait = retry_wait  # the backoff a row waits (none under an operator's Retry now)
        self._ahead: _Ahead | None = None

    def next(self, pending: deque[RequestRow]) -> Claimed | Lost | None:
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            return ahead.claimed()
        return self._steps.claim_now(pending.popleft()) if pending else None

    def before_call(self, pending: deque[RequestRow]) -> None:
        pass

    def finish(self, claimed: Claimed, finish: Finish, pending: deque[RequestRow]) -> None:
        steps = self._steps
        row, version, at, written = claimed.row, claimed.version, claimed.at, finish.written()
        following = self._following(finish.outcome, pending)
        if following is None:
            steps.settle(row, finish.outcome, steps.write(row, version, at, written))
            return
        next_row, lock = following
        made: list[tuple[int | None, float]] = []

        def write_then_claim(written_row: RequestRow, written_version: int, outcome: WrittenOutcome) -> int | None:
            result, won, known = steps.store.write_then_claim(
                (written_row.id, written_version),
                outcome,
                next_row,
                lease=self._config.claim_lease_sec,
                retry_backoff=self._retry_wait(next_row),
                lock=lock,
            )
            if known:
                made.append((won, time.monotonic()))
            return result

        steps.settle(row, finish.outcome, steps.write(row, version, at, written, first=write_then_claim))
        if made:
            self._ahead = _Ahead.made(next_row, *made[0])
        else:
            pending.appendleft(next_row)  # the claim's fate is not known: its own claim finds out

    def _following(
        self, outcome: Outcome, pending: deque[RequestRow]
    ) -> tuple[RequestRow, tuple[str, int] | None] | None:
        """The row whose claim goes with this write, taken off `pending`, and the lock it checks."""
        if outcome.result == "fail" or not pending or pending[0].properties is None:
            return None
        may, lock = self._steps.claim_lock(pending[0])
        return (pending.popleft(), lock) if may else None

    def close(self) -> None:
        ahead, self._ahead = self._ahead, None  # made with the last write, and the job ended before its call
        self._steps.take_back(ahead, tell_window=True)
