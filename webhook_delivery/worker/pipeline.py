"""How a job's claims and writes overlap its calls: one of two strategies, chosen when the job starts
(parts.Pipelining, given where the worker is put together).

Both give the job's row loop (job.py) the same four steps: `ahead` (the row claimed beside the job's steps,
if any), `before_call`, `finish` (write a claimed row's result: every row ends there, a poisoned one too)
and `close` (take back a claim no call was made under, and wait for the write in flight). `finish` and
`close` give back the results they settled, as `Written` values, in order. Both keep the promises the
hook's lock and the claims make: one call at a time for the hook, at most one write in flight for the job,
each settled before the next starts and all before the lock goes, a result written only under its claim.

* `Overlapped`, while few jobs run: the write goes to a helper thread while the job claims and sends its
  next row, and once the hook has answered in this job, its next row is claimed on a helper thread while
  the current call runs. A claim changes nothing but dateModified, so one no call was made under is taken
  back exactly (`release_claim`), and one that cannot be taken back waits out its lease as after a crash;
  the next call's deadline counts from its claim, so a claim older than AHEAD_MAX_AGE_SEC is taken back and
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

from ..phorge.herald import RequestResult, RequestRow
from ..phorge.outcomes import readable_properties
from .results import ClaimMade, Finish, NextClaim, Results, Written
from .source import Settlement

AHEAD_MAX_AGE_SEC = 0.25  # what a call's timeout may lose to the wait for the call before it


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


Beside = Callable[[RequestRow], NextClaim | None]  # whether the row may be claimed beside the job's steps now, and how


def claim_of(row: RequestRow, made: ClaimMade) -> Claimed | Lost:
    """A claim made beside the job's steps, as the row loop takes it."""
    if made.version is None:
        return Lost(row)
    return Claimed(row, made.version, made.at, *readable_properties(row.properties))


class Pipeline(Protocol):
    def ahead(self, pending: deque[RequestRow]) -> Claimed | Lost | None:
        """The row claimed beside the job's steps (Lost: that claim lost), or None: the job claims its next
        row itself."""

    def before_call(self, pending: deque[RequestRow]) -> None:
        """Just before a claimed row's call."""

    def finish(self, claimed: Claimed, finish: Finish, pending: deque[RequestRow]) -> list[Written]:
        """Write the row's result (or start to); the results settled now, in order."""

    def close(self) -> list[Written]:
        """Every claim no call was made under taken back (or left to its lease); the last results settled."""


class _Strategy:
    """What both strategies share: the result's write, and a claim made beside the job's steps taken back."""

    def __init__(self, results: Results, settlement: Settlement, beside: Beside) -> None:
        self._results = results
        self._settlement = settlement
        self._beside = beside

    def _beside_front(self, pending: deque[RequestRow]) -> NextClaim | None:
        """How the front row of `pending` is claimed beside the job's steps now; None: it is not. A row
        without its properties (a large one) is claimed by the job itself, when it reads them."""
        if not pending or pending[0].properties is None:
            return None
        return self._beside(pending[0])

    def _take_back(self, row: RequestRow, version: int) -> bool:
        """A claim no call was made under, taken back (counted): True when the row is as it was."""
        try:
            released = self._results.store.release_claim(row.id, version, previous=row.date_modified)
        except DatabaseError:
            released = False
        if released:
            self._results.counters.record("claims_released")
        return released

    def _take_back_at_close(self, row: RequestRow, version: int) -> None:
        """At the job's end: the window learns the row is as it was, or under a claim until its lease ends."""
        if self._take_back(row, version):
            self._settlement.fresh.append(dataclasses.replace(row, properties=None))
        else:
            self._settlement.claimed.append(row.id)


@dataclass(frozen=True)
class _Ahead:
    """The claim of the job's next row, made on a helper thread while the job's call runs."""

    row: RequestRow
    made: Future[ClaimMade]

    def version(self) -> int | None:
        """The version won; None when lost, or not known (a database error: a later claim finds out)."""
        try:
            return self.made.result().version
        except DatabaseError:
            return None


class Overlapped(_Strategy):
    """Few jobs running: writes and the next claim on helper threads, beside the job's call."""

    def __init__(
        self, results: Results, settlement: Settlement, beside: Beside, *, executor: ThreadPoolExecutor
    ) -> None:
        super().__init__(results, settlement, beside)
        self._executor = executor
        self._writing: Future[Written] | None = None
        self._ahead: _Ahead | None = None
        self._answered = False

    def ahead(self, pending: deque[RequestRow]) -> Claimed | Lost | None:
        if self._ahead is None:
            return None
        ahead, self._ahead = self._ahead, None
        made = claim_of(ahead.row, ahead.made.result())  # a database error is the job's, as for its own claim
        if isinstance(made, Lost) or time.monotonic() - made.at <= AHEAD_MAX_AGE_SEC:
            return made
        # The call before took long: this one's deadline would be short. The job claims it again.
        if self._take_back(made.row, made.version):
            pending.appendleft(made.row)
        else:
            self._settlement.claimed.append(made.row.id)  # it waits out its claim
        return None

    def before_call(self, pending: deque[RequestRow]) -> None:
        """Once the hook has answered, its next row is claimed while this call runs."""
        if not self._answered:
            return
        then = self._beside_front(pending)
        if then is not None:
            pending.popleft()
            self._ahead = _Ahead(then.row, self._executor.submit(self._claim, then))

    def _claim(self, then: NextClaim) -> ClaimMade:
        lease = self._results.config.claim_lease_sec
        version = self._results.store.claim(then.row, lease=lease, retry_backoff=then.retry_backoff, lock=then.lock)
        return ClaimMade(version, time.monotonic())

    def finish(self, claimed: Claimed, finish: Finish, pending: deque[RequestRow]) -> list[Written]:
        settled = self._settle()  # the write before: a job never has two in flight
        row, version, at = claimed.row, claimed.version, claimed.at
        if claimed.large:
            settled.append(self._results.write(row, version, at, finish))  # its text goes before the job goes on
        else:
            self._writing = self._executor.submit(self._results.write, row, version, at, finish)
        self._answered = self._answered or finish.outcome.result == RequestResult.OKAY
        return settled

    def _settle(self) -> list[Written]:
        writing, self._writing = self._writing, None
        return [] if writing is None else [writing.result()]

    def close(self) -> list[Written]:
        ahead, self._ahead = self._ahead, None
        try:
            version = None if ahead is None else ahead.version()
            if ahead is not None and version is not None:
                self._take_back_at_close(ahead.row, version)
        finally:
            settled = self._settle()
        return settled


class Inline(_Strategy):
    """Many jobs running: everything on the job's thread, the next row's claim in the round trip of the
    result's write."""

    def __init__(self, results: Results, settlement: Settlement, beside: Beside) -> None:
        super().__init__(results, settlement, beside)
        self._next: Claimed | Lost | None = None  # claimed with the last write

    def ahead(self, pending: deque[RequestRow]) -> Claimed | Lost | None:
        made, self._next = self._next, None
        return made

    def before_call(self, pending: deque[RequestRow]) -> None:
        pass

    def finish(self, claimed: Claimed, finish: Finish, pending: deque[RequestRow]) -> list[Written]:
        then = None if finish.outcome.result == RequestResult.FAIL else self._beside_front(pending)
        written = self._results.write(claimed.row, claimed.version, claimed.at, finish, then)
        if then is not None and written.next_claim is not None:
            pending.popleft()  # its claim's fate is known; otherwise its own claim finds out
            self._next = claim_of(then.row, written.next_claim)
        return [written]

    def close(self) -> list[Written]:
        made, self._next = self._next, None  # made with the last write, and the job ended before its call
        if isinstance(made, Claimed):
            self._take_back_at_close(made.row, made.version)
        return []
