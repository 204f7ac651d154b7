"""What a job hands to the runner's helper threads, so that a hook's calls wait on the database as little as
possible while still following each other one at a time.

* `Writes`: the result of a call is written while the job claims and sends its next row (while few jobs
  run; with many, on the job's own thread); at most one write in flight per job, waited for before the next
  is handed over and before the hook's lock goes.
* `Ahead`: once the hook has answered in this job, the next row is claimed while the current call runs
  (while few jobs run: with many, the process is bound by its CPU and the hand-over costs more than it wins).
  A claim changes nothing but dateModified, so a claim no call was made under is taken back exactly
  (`release`), and one that cannot be taken back waits out its lease as after a crash. The next call
  starts only after this one's answer, so the hook still has one call in flight; its deadline still
  counts from its claim, which is why a claim older than AHEAD_MAX_AGE_SEC is taken back and made again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError

from ..config import DeliveryConfig
from ..phorge.herald import RequestRow
from ..phorge.outcomes import Outcome, readable_properties
from .parts import QueueStore
from .store import WrittenOutcome
from .window import Settlement

AHEAD_MAX_AGE_SEC = 0.25  # what a call's timeout may lose to the wait for the call before it
AHEAD_JOBS = 2  # writes and claims ahead only while at most this many jobs run: beyond, the CPU is the limit


class Writes:
    """A job's result writes: at most one in flight, settled in order by `take` (the runner's)."""

    def __init__(self, executor: ThreadPoolExecutor, take: Callable[[RequestRow, Outcome, int | None], None]) -> None:
        self._executor = executor
        self._take = take
        self._pending: tuple[RequestRow, Outcome, Future[int | None]] | None = None

    def start(self, row: RequestRow, outcome: Outcome, write: Callable[[], int | None], *, here: bool = False) -> None:
        """Start the write of `row`'s result; `here`: on this thread, now (with many jobs running, the other
        jobs' calls fill the wait, and a hand-over to another thread would only cost CPU)."""
        self.settle()  # the one before: a job never has two writes in flight
        if here:
            self._take(row, outcome, write())
            return
        self._pending = (row, outcome, self._executor.submit(write))

    def settle(self) -> None:
        """Wait for the write in flight, if any, and take in what it says."""
        if self._pending is None:
            return
        row, outcome, future = self._pending
        self._pending = None
        self._take(row, outcome, future.result())


@dataclass
class Ahead:
    """The claim of a job's next row, made on a helper thread while the job's current call runs."""

    row: RequestRow  # the snapshot claimed from, with its properties
    properties: dict[str, Any] | None  # decoded on the job's thread; None: the poison rule applies
    problem: str
    future: Future[tuple[int | None, float]]  # (the version won or None, time.monotonic() once claimed)

    @classmethod
    def start(
        cls,
        executor: ThreadPoolExecutor,
        claim: Callable[[], int | None],
        row: RequestRow,
        readable: tuple[dict[str, Any] | None, str],
    ) -> Ahead:
        def run() -> tuple[int | None, float]:
            version = claim()
            return version, time.monotonic()

        return cls(row, readable[0], readable[1], executor.submit(run))

    def take(self) -> tuple[int | None, float]:
        """The claim's outcome; a database error is the job's, as for a claim on its own thread."""
        return self.future.result()

    @classmethod
    def made(cls, row: RequestRow, version: int | None, claimed_at: float) -> Ahead:
        """A claim already made (with the write before it)."""
        done: Future[tuple[int | None, float]] = Future()
        done.set_result((version, claimed_at))
        properties, problem = readable_properties(row.properties)
        return cls(row, properties, problem, done)

    @staticmethod
    def fresh(claimed_at: float) -> bool:
        return time.monotonic() - claimed_at <= AHEAD_MAX_AGE_SEC

    def release(self, store: QueueStore, settlement: Settlement | None) -> bool:
        """Take the claim back (it was won and no call was made under it): True when the row is as it was.
        With `settlement`, the window learns what became of the row: as it was (the snapshot claimed from)
        or, when it could not be taken back, under a claim until the lease ends."""
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


class ClaimWithWrite:
    """With many jobs running, the claim of a job's next row goes in the round trip that writes the current
    row's result (QueueStore.write_then_claim): one round trip where there were two, and no thread hand-over.
    The write is made when it was (the moment the answer is in), so the duplicate window is as wide as it was;
    the claim is made just before the call it is for."""

    def __init__(self, row: RequestRow, lock: tuple[str, int] | None, *, store: QueueStore, config: DeliveryConfig):
        self.row = row
        self.lock = lock
        self.store = store
        self.config = config
        self._made: tuple[int | None, float] | None = None

    def write_then_claim(self, written: RequestRow, version: int, outcome: WrittenOutcome) -> int | None:
        """The write (as QueueStore.write_outcome), the claim kept for `ahead`."""
        result, claimed, known = self.store.write_then_claim(
            (written.id, version),
            outcome,
            self.row,
            lease=self.config.claim_lease_sec,
            retry_backoff=self.config.retry_backoff_sec,
            lock=self.lock,
        )
        if known:
            self._made = (claimed, time.monotonic())
        return result

    def ahead(self) -> Ahead | None:
        """The claim made, for the job's next turn; None when it was not made or its outcome is not known."""
        return None if self._made is None else Ahead.made(self.row, *self._made)
