"""The queue window: the due requests a worker holds, bounded whatever the backlog.

Phorge keeps a week of requests and upstream has no index on `status`. The window never reads that
retained history on a poll, and never holds the whole queue:

* New rows are read by primary-key range above a frontier (the highest id seen).
* Per hook at most PER_HOOK rows are held, and at most TOTAL in all. A hook with more queued rows than it
  holds is refilled as it drains, through key_ratelimit, from two cursors: its never-attempted rows in id
  order, and its failed rows in the order they become due. Rows still in their retry backoff are not
  held, only the time the next one becomes due.
* Holes in the ids (an insert not yet committed, a raised AUTO_INCREMENT) are remembered as ranges and
  re-read for a while, whatever their size.
* At start-up the hooks come from herald_webhook and each hook's backlog is read lazily, so delivery starts
  at once. Every SWEEP_INTERVAL_SEC the cursors start again from the beginning and the request table's own
  hooks are listed by a loose index scan (requests whose hook row is gone): no queued row is forgotten.
* An operator's Retry now (`retry_now`, records/retries.py) makes a hook's failures up to a moment wait no
  backoff (phorge.herald.retry_wait): its held rows so covered are due at once, and its refill reads its
  failed rows up to that moment.

The window only proposes candidates: the job re-reads them and the claim re-checks everything in SQL.

What holds between any two calls (`check_invariants()` checks it; the property tests call it after every
operation). The queue side (the held rows, window_held.py; the holes, window_gaps.py):

1. `held_count` is the number of rows held, at most `total`; no hook holds more than `per_hook`.
2. A held row is its hook's and was queued when read; it is in exactly one place: handed out to a job
   (`take`, until `settle`), due (`ready`, ids ascending, no repeats), or waiting for its due time (an
   entry of the hook's heap, which may also hold stale entries of rows since dropped or placed).
3. Every hook with due rows is in the set `candidates()` looks at, and every hook with waiting rows in the
   set `promote()` looks at (either set may name hooks that no longer have any).
4. Every hole in the ids is within 1 .. `frontier`, its low end at most its high end.
5. Every hook whose never-attempted rows are not all read (`untried_done` false) is in the set
   `_refill_untried()` looks at.

The retry side:

6. Every hook with a retry due time (`retry_due_at`) has an entry of that time in the retry heap, which
   `_refill_retries()` pops once the time has passed: no hook's failed rows wait for the next sweep unless
   none is known to come due (`retry_due_at` None). The heap keeps heapq's order, names only hooks the window
   has, and may hold stale entries (times since replaced). A hook's retry cursor is at or after (0, 0).
7. Every Retry now order in force names a hook the window has.
8. No queued row a cursor has passed is forgotten. Of the rows at or below the frontier and in no hole, every
   queued one that was never attempted, at or below its hook's `untried_after` or of a hook whose
   `untried_done`, and every queued one that failed, at or behind its hook's `retry_cursor` in
   (lastRequestEpoch, id) order, is held. (Checked when the queue is given, as the property tests give it.)
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Mapping

from ..phorge.herald import RequestResult, RequestRow, RequestStatus, next_due, retry_wait
from .source import QueueSource, Settlement
from .window_gaps import GAP_ROWS_PER_POLL, GAP_SETTLE_SEC, Gap, remember, unsettled, without
from .window_held import Candidate, HeldRows, HookShare
from .window_invariants import WindowInvariantError, check_invariants, check_nothing_forgotten

__all__ = ["GAP_SETTLE_SEC", "Candidate", "Gap", "QueueSource", "QueueWindow", "Settlement", "WindowInvariantError"]

PER_HOOK = 64
TOTAL = 32_768
SCAN_BATCH = 1000
HOOKS_PER_QUERY = 32
QUERIES_PER_POLL = 4
STARTUP_GAP_WINDOW = 100
SWEEP_INTERVAL_SEC = 600.0
SWEEP_HOOKS_PER_POLL = 1000
_END = 2**32  # above any id: a cursor (epoch, _END) has read everything of that epoch


def _untried(row: RequestRow) -> bool:
    return row.last_result == RequestResult.NONE and row.last_epoch == 0


class QueueWindow:
    def __init__(
        self,
        source: QueueSource,
        *,
        lease: int,
        retry_backoff: int,
        per_hook: int = PER_HOOK,
        total: int = TOTAL,
        hooks_per_query: int = HOOKS_PER_QUERY,
        queries_per_poll: int = QUERIES_PER_POLL,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.lease = lease
        self.retry_backoff = retry_backoff
        self.per_hook = per_hook
        self.total = total
        self.hooks_per_query = hooks_per_query
        self.queries_per_poll = queries_per_poll
        self._clock = clock
        self._monotonic = monotonic
        self.clock_offset = 0.0
        self.started = False
        self.frontier = 0
        self.held = HeldRows(per_hook, total, lambda row: next_due(row, self.lease, self.retry_wait(row)))
        self.gaps: list[Gap] = []
        self._untried_pending: set[str] = set()
        self._retry_heap: list[tuple[int, str]] = []  # (due at, hook): see invariant 6
        self._last_sweep = 0.0
        self._listing: str | None = None  # where the loose scan of request hooks goes on, None: done
        self._retry_before: dict[str, int] = {}  # Retry now: {hook: failures up to this moment wait no backoff}

    @property
    def held_count(self) -> int:
        return self.held.count

    # -- clock ---------------------------------------------------------------------------------------

    def estimated_now(self) -> int:
        return int(self._clock() + self.clock_offset)

    def _saw_clock(self, db_now: int | None) -> None:
        if db_now is not None:  # a query that returns no row carries no clock reading: keep the last one
            self.clock_offset = db_now - self._clock()

    # -- the hooks and their cursors -----------------------------------------------------------------

    def _hook(self, phid: str, *, known_empty: bool = False) -> HookShare:
        hook = self.held.hooks.get(phid)
        if hook is None:
            hook = self.held.hooks[phid] = HookShare(phid)
            if known_empty:  # a hook first seen in new rows has no older ones
                hook.untried_done = True
                hook.retry_due_at = None
            else:
                self._untried_pending.add(phid)
                heapq.heappush(self._retry_heap, (0, phid))
        return hook

    def retry_wait(self, row: RequestRow) -> int:
        """The backoff this row waits: none when a Retry now of its hook covers its failed attempt."""
        return retry_wait(row, self.retry_backoff, self._retry_before.get(row.webhook_phid, 0))

    def retry_now(self, orders: Mapping[str, int]) -> None:
        """The Retry now orders in force, {hook PHID: failed up to}: a new or raised one makes the hook's held
        rows it covers due at once and its failed rows up to that moment read at the next refill."""
        for phid in [phid for phid in self._retry_before if phid not in orders]:
            del self._retry_before[phid]
        now = self.estimated_now()
        for phid, up_to in orders.items():
            if self._retry_before.get(phid, 0) >= up_to:
                continue
            self._retry_before[phid] = up_to
            hook = self._hook(phid)
            for row_id, row in hook.held.items():
                if row_id not in hook.out and row_id not in hook.ready and self.retry_wait(row) == 0:
                    self.held.place(hook, row_id, now)
            self._retry_at(hook, now)

    def _retry_at(self, hook: HookShare, due: int) -> None:
        """Look for the hook's failed rows at `due`, unless it is to look sooner."""
        if hook.retry_due_at is None or due < hook.retry_due_at:
            hook.retry_due_at = due
            heapq.heappush(self._retry_heap, (due, hook.phid))

    def _retry_again(self, hook: HookShare, due: int) -> None:
        """Look for the hook's failed rows at `due`, whatever time it was to look before."""
        hook.retry_due_at = None
        self._retry_at(hook, due)

    def _failure_not_held(self, hook: HookShare, row_id: int, epoch: int, due: int) -> None:
        """A queued row that failed at `epoch`, not held: the retry cursor goes back below it if it had passed
        it, and the hook looks for its failed rows by `due`."""
        if (epoch, row_id) <= hook.retry_cursor:
            hook.retry_cursor = (epoch, row_id - 1)
        self._retry_at(hook, due)

    def _see(self, row: RequestRow, now: int) -> None:
        """A row read by id (a new row, or one found in a hole): hold it, or make sure a cursor reaches it."""
        hook = self.held.hooks.get(row.webhook_phid)
        if row.status != RequestStatus.QUEUED:
            if hook is not None:
                self.held.drop(hook, row.id)
            return
        hook = hook or self._hook(row.webhook_phid, known_empty=True)
        if row.id in hook.held:
            self.held.hold(hook, row, now)
        elif _untried(row):
            if hook.untried_done or row.id <= hook.untried_after:
                if self.held.hold(hook, row, now):
                    hook.untried_after = max(hook.untried_after, row.id)
                    return
                hook.untried_after = min(hook.untried_after, row.id - 1)
                hook.untried_done = False
                self._untried_pending.add(hook.phid)
        elif row.last_result == RequestResult.FAIL:
            due = next_due(row, self.lease, self.retry_wait(row))
            if not (due <= now and self.held.hold(hook, row, now)):
                self._failure_not_held(hook, row.id, row.last_epoch, due)
        else:
            self.held.hold(hook, row, now)  # a queued row in no index range of ours: only ever seen by id

    # -- reading -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.frontier, db_now = self.source.max_request_id()
        self._saw_clock(db_now)
        if self.frontier > 1:  # inserts still uncommitted now sit in holes just below the frontier
            low = max(1, self.frontier - STARTUP_GAP_WINDOW)
            remember(self.gaps, Gap(low, self.frontier - 1, self._monotonic()))
        self._sweep()
        self.started = True

    def _sweep(self) -> None:
        """Start every hook's cursors again from the beginning, and list the request table's hooks."""
        for phid in self.source.hook_phids():
            self._hook(phid)
        now = self.estimated_now()
        for hook in self.held.hooks.values():
            hook.untried_after = 0
            hook.untried_done = False
            self._untried_pending.add(hook.phid)
            hook.retry_cursor = (0, 0)
            self._retry_again(hook, now)
        self._listing = ""
        self._last_sweep = self._monotonic()

    def rewind(self, hook_phid: str, lowest_id: int) -> None:
        """Never-attempted rows of the hook may now exist from `lowest_id` on (failed requests put back in
        the queue): its cursor goes back there, and the next refill reads them."""
        hook = self._hook(hook_phid)
        hook.untried_after = min(hook.untried_after, lowest_id - 1)
        hook.untried_done = False
        self._untried_pending.add(hook_phid)

    def _list_request_hooks(self) -> None:
        if self._listing is None:
            return
        found = self.source.request_hooks_after(self._listing, SWEEP_HOOKS_PER_POLL)
        for phid in found:
            self._hook(phid)
        self._listing = found[-1] if len(found) == SWEEP_HOOKS_PER_POLL else None

    def _scan_new(self) -> bool:
        rows, db_now = self.source.scan_after(self.frontier, SCAN_BATCH)
        self._saw_clock(db_now)
        now = self.estimated_now()
        expected = self.frontier + 1
        for row in rows:
            if row.id > expected:
                remember(self.gaps, Gap(expected, row.id - 1, self._monotonic()))
            expected = row.id + 1
            self._see(row, now)
        if rows:
            self.frontier = rows[-1].id
        return len(rows) == SCAN_BATCH

    def _recheck_gaps(self) -> None:
        self.gaps = unsettled(self.gaps, self._monotonic())
        if not self.gaps:
            return
        rows, db_now = self.source.in_ranges([(gap.low, gap.high) for gap in self.gaps], GAP_ROWS_PER_POLL)
        self._saw_clock(db_now)
        now = self.estimated_now()
        for row in rows:
            self._see(row, now)
        if rows:
            self.gaps = without(self.gaps, [row.id for row in rows])

    def _refill_untried(self, budget: int) -> tuple[int, bool]:
        """Read the never-attempted rows of hooks that hold little; (queries used, more left to read)."""
        hooks = self.held.hooks
        wanted = sorted(
            (hooks[phid].untried_after, phid)
            for phid in self._untried_pending
            if len(hooks[phid].held) < self.per_hook // 2
        )
        used = 0
        while wanted and used < budget and self.held.count < self.total:
            batch = [phid for _after, phid in wanted[: self.hooks_per_query]]
            wanted = wanted[self.hooks_per_query :]
            limit = self.per_hook
            rows, db_now = self.source.untried([(phid, hooks[phid].untried_after) for phid in batch], limit)
            used += 1
            self._saw_clock(db_now)
            now = self.estimated_now()
            by_hook: dict[str, list[RequestRow]] = {phid: [] for phid in batch}
            for row in rows:
                by_hook[row.webhook_phid].append(row)
            for phid, hook_rows in by_hook.items():
                hook = hooks[phid]
                complete = len(hook_rows) < limit
                for row in hook_rows:
                    if not self.held.hold(hook, row, now):
                        complete = False
                        break
                    hook.untried_after = max(hook.untried_after, row.id)
                if complete:
                    hook.untried_done = True
                    self._untried_pending.discard(phid)
        return used, bool(wanted) and self.held.count < self.total

    def _refill_retries(self, budget: int) -> tuple[int, bool]:
        """Read the failed rows whose retry backoff has passed (or that a Retry now covers), for hooks whose
        next one is due now; (queries used, more left to read)."""
        now = self.estimated_now()
        due = self._retries_due(now)
        used = 0
        while due and used < budget:
            batch, due = due[: self.hooks_per_query], due[self.hooks_per_query :]
            used += self._refill_retry_batch(batch, now)
        for phid in due:  # over budget: next poll
            self._retry_again(self.held.hooks[phid], now)
        return used, bool(due)

    def _retries_due(self, now: int) -> list[str]:
        """The hooks whose retry due time has passed, each once, taken off the retry heap (stale entries too)."""
        due: dict[str, None] = {}
        while self._retry_heap and self._retry_heap[0][0] <= now:
            at, phid = heapq.heappop(self._retry_heap)
            if self.held.hooks[phid].retry_due_at == at:
                due[phid] = None
        return list(due)

    def _refill_retry_batch(self, batch: list[str], now: int) -> int:
        """Read the failed rows of these due hooks; the queries it took."""
        by_cutoff: dict[int, list[str]] = {}  # one query per moment read up to: the backoff's, each Retry now's
        for phid in batch:
            hook = self.held.hooks[phid]
            if self.held.room(hook) <= 0:  # full of due rows already: look again once some are delivered
                self._retry_again(hook, now + 1)
            else:
                cutoff = max(now - self.retry_backoff, self._retry_before.get(phid, 0))
                by_cutoff.setdefault(cutoff, []).append(phid)
        return sum(self._read_retries(group, cutoff, now) for cutoff, group in sorted(by_cutoff.items()))

    def _read_retries(self, batch: list[str], cutoff: int, now: int) -> int:
        """One read of these hooks' failed rows up to `cutoff`, after each one's cursor; the queries it took."""
        limit = self.per_hook
        cursors = [(phid, *self.held.hooks[phid].retry_cursor) for phid in batch]
        rows, db_now = self.source.retries(cursors, cutoff, limit)
        self._saw_clock(db_now)
        by_hook: dict[str, list[RequestRow]] = {phid: [] for phid in batch}
        for row in rows:
            by_hook[row.webhook_phid].append(row)
        caught_up = []
        for phid, hook_rows in by_hook.items():
            hook = self.held.hooks[phid]
            hook.retry_due_at = None
            complete = len(hook_rows) < limit
            for row in hook_rows:
                if not self.held.hold(hook, row, now):
                    complete = False
                    break
                hook.retry_cursor = (row.last_epoch, row.id)
            if complete:
                # Everything that failed up to the cutoff is read. Failures written from now on carry
                # a later epoch, unless the backoff is under two seconds of our clock's precision.
                hook.retry_cursor = max(hook.retry_cursor, (min(cutoff, now - 2), _END))
                caught_up.append(phid)
            else:
                self._retry_at(hook, now)
        return 1 + (self._look_ahead(caught_up) if caught_up else 0)

    def _look_ahead(self, caught_up: list[str]) -> int:
        """When the next failed row of these hooks, all read up to their cursors, comes due; the queries it took."""
        after = min(self.held.hooks[phid].retry_cursor[0] for phid in caught_up)
        upcoming = self.source.next_failures(caught_up, after)
        for phid in caught_up:
            hook = self.held.hooks[phid]
            epoch = upcoming.get(phid)
            if epoch is not None:
                wait = 0 if epoch <= self._retry_before.get(phid, 0) else self.retry_backoff
                self._retry_at(hook, max(epoch, hook.retry_cursor[0] + 1) + wait)
        return 1

    def poll(self) -> bool:
        """Read what is new and refill what drained; True when more is waiting to be read right now."""
        if not self.started:
            self.start()
        more = self._scan_new()
        self._recheck_gaps()
        if self._monotonic() - self._last_sweep > SWEEP_INTERVAL_SEC:
            self._sweep()
        self._list_request_hooks()
        used, more_untried = self._refill_untried(self.queries_per_poll)
        _used, more_retries = self._refill_retries(max(1, self.queries_per_poll - used))
        self.held.promote(self.estimated_now())
        return more or more_untried or more_retries or self._listing is not None

    # -- handing out ---------------------------------------------------------------------------------

    def candidates(self, schedulable: Callable[[str], bool] = lambda hook: True) -> list[Candidate]:
        """Every schedulable hook that holds due rows, with its oldest due id, oldest first."""
        return self.held.candidates(schedulable)

    def last_result(self, phid: str, row_id: int) -> str:
        """The lastRequestResult of a row the window holds for `phid` (a candidate's oldest, say)."""
        return self.held.hooks[phid].held[row_id].last_result

    def take(self, phid: str, limit: int) -> list[RequestRow]:
        """Up to `limit` due rows of the hook, oldest first, handed out until `settle`."""
        return self.held.take(phid, limit)

    def settle(self, settlement: Settlement) -> None:
        """Take back the rows `take` handed out to one job, as the Settlement says became of them."""
        phid = settlement.hook_phid
        hook = self.held.hooks[phid]
        now = self.estimated_now()
        claimed = ((row_id, now + self.lease) for row_id in settlement.claimed)
        for row_id, until in [*claimed, *settlement.deferred]:
            if row_id in hook.out:
                hook.out.discard(row_id)
                self.held.wait(hook, row_id, until)
        for row_id in settlement.done:
            self.held.drop(hook, row_id)
        for row_id, epoch in settlement.retried:
            self.held.drop(hook, row_id)
            self._failure_not_held(hook, row_id, epoch, epoch + self.retry_backoff)
        newer = {row.id: row for row in settlement.fresh}
        for row in settlement.rows:
            if row.id not in hook.out:
                continue
            hook.out.discard(row.id)
            current = newer.get(row.id)
            if current is not None and current.status != RequestStatus.QUEUED:
                self.held.drop(hook, row.id)
            elif current is not None:
                self.held.hold(hook, current, now)
            else:
                self.held.place(hook, row.id, now)
        if len(hook.held) < self.per_hook // 2 and not hook.untried_done:
            self._untried_pending.add(phid)

    # -- invariants ----------------------------------------------------------------------------------

    def check_invariants(self, queue: Iterable[RequestRow] | None = None) -> None:
        """Raise WindowInvariantError unless every invariant of the module's docstring holds; the eighth only
        when the `queue` (every row the source holds) is given."""
        check_invariants(
            self.held,
            untried_pending=self._untried_pending,
            retry=(self._retry_heap, self._retry_before),
            gaps=(self.gaps, self.frontier),
        )
        if queue is not None:
            check_nothing_forgotten(self.held, queue, gaps=(self.gaps, self.frontier))
