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
operation):

1. `held_count` is the number of rows held, at most `total`; no hook holds more than `per_hook`.
2. A held row is its hook's and was queued when read; it is in exactly one place: handed out to a job
   (`take`, until `settle`), due (`ready`, ids ascending, no repeats), or waiting for its due time (an
   entry of the hook's heap, which may also hold stale entries of rows since dropped or placed).
3. Every hook with due rows is in the set `candidates()` looks at, and every hook with waiting rows in the
   set `_promote()` looks at (either set may name hooks that no longer have any).
4. Every hole in the ids is within 1 .. `frontier`, its low end at most its high end.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..phorge.herald import RequestResult, RequestRow, RequestStatus, next_due, retry_wait
from .source import QueueSource, Settlement
from .window_invariants import WindowInvariantError, check_invariants

__all__ = ["QueueSource", "QueueWindow", "Settlement", "WindowInvariantError"]

PER_HOOK = 64
TOTAL = 32_768
SCAN_BATCH = 1000
HOOKS_PER_QUERY = 32
QUERIES_PER_POLL = 4
GAP_SETTLE_SEC = 120.0
GAP_RANGES = 512
GAP_ROWS_PER_POLL = 1000
STARTUP_GAP_WINDOW = 100
SWEEP_INTERVAL_SEC = 600.0
SWEEP_HOOKS_PER_POLL = 1000
_END = 2**32  # above any id: a cursor (epoch, _END) has read everything of that epoch


def _untried(row: RequestRow) -> bool:
    return row.last_result == RequestResult.NONE and row.last_epoch == 0


@dataclass
class _Hook:
    phid: str
    held: dict[int, RequestRow] = field(default_factory=dict)
    ready: list[int] = field(default_factory=list)  # held ids due now, ascending
    waiting: list[tuple[int, int]] = field(default_factory=list)  # heap of (due at, id), checked lazily
    out: set[int] = field(default_factory=set)  # held ids handed to a job
    untried_after: int = 0
    untried_done: bool = False
    retry_cursor: tuple[int, int] = (0, 0)
    retry_due_at: int | None = 0


class QueueWindow:
    def __init__(
        self,
        source: QueueSource,
        *,
        lease: int,
        retry_backoff: int,
        per_hook: int = PER_HOOK,
        total: int = TOTAL,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.lease = lease
        self.retry_backoff = retry_backoff
        self.per_hook = per_hook
        self.total = total
        self._clock = clock
        self._monotonic = monotonic
        self.clock_offset = 0.0
        self.started = False
        self.frontier = 0
        self.held_count = 0
        self._hooks: dict[str, _Hook] = {}
        self.gaps: list[list[float]] = []  # [low, high, first seen]
        self._ready_hooks: set[str] = set()
        self._waiting_hooks: set[str] = set()
        self._untried_pending: set[str] = set()
        self._retry_heap: list[tuple[int, str]] = []
        self._last_sweep = 0.0
        self._listing: str | None = None  # where the loose scan of request hooks goes on, None: done
        self._retry_before: dict[str, int] = {}  # Retry now: {hook: failures up to this moment wait no backoff}

    # -- clock ---------------------------------------------------------------------------------------

    def estimated_now(self) -> int:
        return int(self._clock() + self.clock_offset)

    def _saw_clock(self, db_now: int | None) -> None:
        if db_now is not None:  # a query that returns no row carries no clock reading: keep the last one
            self.clock_offset = db_now - self._clock()

    # -- holding rows --------------------------------------------------------------------------------

    def _hook(self, phid: str, *, known_empty: bool = False) -> _Hook:
        hook = self._hooks.get(phid)
        if hook is None:
            hook = self._hooks[phid] = _Hook(phid)
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
                    self._place(hook, row_id, now)
            self._retry_at(hook, now)

    def _place(self, hook: _Hook, row_id: int, now: int) -> None:
        row = hook.held[row_id]
        due = next_due(row, self.lease, self.retry_wait(row))
        if due <= now:
            if row_id not in hook.ready:
                bisect.insort(hook.ready, row_id)
            self._ready_hooks.add(hook.phid)
        else:
            heapq.heappush(hook.waiting, (due, row_id))
            self._waiting_hooks.add(hook.phid)

    def _hold(self, hook: _Hook, row: RequestRow, now: int) -> bool:
        """Hold `row` (a queued row of `hook`), or refuse when the hook's or the window's share is full."""
        if row.id in hook.held:
            hook.held[row.id] = row
            if row.id in hook.ready:
                hook.ready.remove(row.id)
            if row.id not in hook.out:
                self._place(hook, row.id, now)
            return True
        if len(hook.held) >= self.per_hook or self.held_count >= self.total:
            return False
        hook.held[row.id] = row
        self.held_count += 1
        self._place(hook, row.id, now)
        return True

    def _drop(self, hook: _Hook, row_id: int) -> None:
        if hook.held.pop(row_id, None) is not None:
            self.held_count -= 1
        hook.out.discard(row_id)
        if row_id in hook.ready:
            hook.ready.remove(row_id)
        if not hook.ready:
            self._ready_hooks.discard(hook.phid)

    def _retry_at(self, hook: _Hook, due: int) -> None:
        if hook.retry_due_at is None or due < hook.retry_due_at:
            hook.retry_due_at = due
            heapq.heappush(self._retry_heap, (due, hook.phid))

    def _see(self, row: RequestRow, now: int) -> None:
        """A row read by id (a new row, or one found in a hole): hold it, or make sure a cursor reaches it."""
        hook = self._hooks.get(row.webhook_phid)
        if row.status != RequestStatus.QUEUED:
            if hook is not None:
                self._drop(hook, row.id)
            return
        hook = hook or self._hook(row.webhook_phid, known_empty=True)
        if row.id in hook.held:
            self._hold(hook, row, now)
        elif _untried(row):
            if hook.untried_done or row.id <= hook.untried_after:
                if self._hold(hook, row, now):
                    hook.untried_after = max(hook.untried_after, row.id)
                    return
                hook.untried_after = min(hook.untried_after, row.id - 1)
                hook.untried_done = False
                self._untried_pending.add(hook.phid)
        elif row.last_result == RequestResult.FAIL:
            due = next_due(row, self.lease, self.retry_wait(row))
            if due <= now and self._hold(hook, row, now):
                return
            if (row.last_epoch, row.id) <= hook.retry_cursor:
                hook.retry_cursor = (row.last_epoch, row.id - 1)
            self._retry_at(hook, due)
        else:
            self._hold(hook, row, now)  # a queued row in no index range of ours: only ever seen by id

    # -- reading -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.frontier, db_now = self.source.max_request_id()
        self._saw_clock(db_now)
        if self.frontier > 1:  # inserts still uncommitted now sit in holes just below the frontier
            self.gaps.append([max(1, self.frontier - STARTUP_GAP_WINDOW), self.frontier - 1, self._monotonic()])
        self._sweep()
        self.started = True

    def _sweep(self) -> None:
        """Start every hook's cursors again from the beginning, and list the request table's hooks."""
        for phid in self.source.hook_phids():
            self._hook(phid)
        now = self.estimated_now()
        for hook in self._hooks.values():
            hook.untried_after = 0
            hook.untried_done = False
            self._untried_pending.add(hook.phid)
            hook.retry_cursor = (0, 0)
            hook.retry_due_at = None
            self._retry_at(hook, now)
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
                self._add_gap(expected, row.id - 1)
            expected = row.id + 1
            self._see(row, now)
        if rows:
            self.frontier = rows[-1].id
        return len(rows) == SCAN_BATCH

    def _add_gap(self, low: int, high: int) -> None:
        self.gaps.append([low, high, self._monotonic()])
        if len(self.gaps) > GAP_RANGES:
            self.gaps.pop(0)  # the oldest hole: the next sweep covers whatever it still hides

    def _recheck_gaps(self) -> None:
        settled = self._monotonic() - GAP_SETTLE_SEC
        self.gaps = [gap for gap in self.gaps if gap[2] >= settled]
        if not self.gaps:
            return
        ranges = [(int(low), int(high)) for low, high, _seen in self.gaps]
        rows, db_now = self.source.in_ranges(ranges, GAP_ROWS_PER_POLL)
        self._saw_clock(db_now)
        now = self.estimated_now()
        for row in rows:
            self._see(row, now)
        if not rows:
            return
        found = [row.id for row in rows]
        split: list[list[float]] = []
        for low, high, seen in self.gaps:  # what was read is no hole: keep only the ids around it
            start = int(low)
            for row_id in found[bisect.bisect_left(found, low) : bisect.bisect_right(found, high)]:
                if row_id > start:
                    split.append([start, row_id - 1, seen])
                start = row_id + 1
            if start <= int(high):
                split.append([start, int(high), seen])
        self.gaps = split

    def _refill_untried(self, budget: int) -> tuple[int, bool]:
        """Read the never-attempted rows of hooks that hold little; (queries used, more left to read)."""
        wanted = sorted(
            (self._hooks[phid].untried_after, phid)
            for phid in self._untried_pending
            if len(self._hooks[phid].held) < self.per_hook // 2
        )
        used = 0
        while wanted and used < budget and self.held_count < self.total:
            batch = [phid for _after, phid in wanted[:HOOKS_PER_QUERY]]
            wanted = wanted[HOOKS_PER_QUERY:]
            limit = self.per_hook
            rows, db_now = self.source.untried([(phid, self._hooks[phid].untried_after) for phid in batch], limit)
            used += 1
            self._saw_clock(db_now)
            now = self.estimated_now()
            by_hook: dict[str, list[RequestRow]] = {phid: [] for phid in batch}
            for row in rows:
                by_hook[row.webhook_phid].append(row)
            for phid, hook_rows in by_hook.items():
                hook = self._hooks[phid]
                complete = len(hook_rows) < limit
                for row in hook_rows:
                    if not self._hold(hook, row, now):
                        complete = False
                        break
                    hook.untried_after = max(hook.untried_after, row.id)
                if complete:
                    hook.untried_done = True
                    self._untried_pending.discard(phid)
        return used, bool(wanted) and self.held_count < self.total

    def _refill_retries(self, budget: int) -> tuple[int, bool]:
        """Read the failed rows whose retry backoff has passed (or that a Retry now covers), for hooks whose
        next one is due now."""
        now = self.estimated_now()
        due: list[str] = []
        while self._retry_heap and self._retry_heap[0][0] <= now:
            at, phid = heapq.heappop(self._retry_heap)
            hook = self._hooks.get(phid)
            if hook is not None and hook.retry_due_at == at and phid not in due:
                due.append(phid)
        used = 0
        while due and used < budget:
            batch, due = due[:HOOKS_PER_QUERY], due[HOOKS_PER_QUERY:]
            room = {phid: self.per_hook - len(self._hooks[phid].held) for phid in batch}
            blocked = [phid for phid in batch if room[phid] <= 0]
            batch = [phid for phid in batch if room[phid] > 0]
            for phid in blocked:  # full of due rows already: look again once some are delivered
                self._hooks[phid].retry_due_at = None
                self._retry_at(self._hooks[phid], now + 1)
            # One query per moment read up to: the backoff's, and each Retry now's of its own.
            by_cutoff: dict[int, list[str]] = {}
            for phid in batch:
                by_cutoff.setdefault(max(now - self.retry_backoff, self._retry_before.get(phid, 0)), []).append(phid)
            for cutoff, group in sorted(by_cutoff.items()):
                used += self._read_retries(group, cutoff, now)
        for phid in due:  # over budget: next poll
            self._retry_at(self._hooks[phid], now)
        return used, bool(due)

    def _read_retries(self, batch: list[str], cutoff: int, now: int) -> int:
        """One read of these hooks' failed rows up to `cutoff`, after each one's cursor; the queries it took."""
        limit = self.per_hook
        cursors = [(phid, *self._hooks[phid].retry_cursor) for phid in batch]
        rows, db_now = self.source.retries(cursors, cutoff, limit)
        used = 1
        self._saw_clock(db_now)
        by_hook: dict[str, list[RequestRow]] = {phid: [] for phid in batch}
        for row in rows:
            by_hook[row.webhook_phid].append(row)
        caught_up = []
        for phid, hook_rows in by_hook.items():
            hook = self._hooks[phid]
            hook.retry_due_at = None
            complete = len(hook_rows) < limit
            for row in hook_rows:
                if not self._hold(hook, row, now):
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
        if caught_up:
            after = min(self._hooks[phid].retry_cursor[0] for phid in caught_up)
            upcoming = self.source.next_failures(caught_up, after)
            used += 1
            for phid in caught_up:
                hook = self._hooks[phid]
                epoch = upcoming.get(phid)
                if epoch is not None:
                    wait = 0 if epoch <= self._retry_before.get(phid, 0) else self.retry_backoff
                    self._retry_at(hook, max(epoch, hook.retry_cursor[0] + 1) + wait)
        return used

    def _promote(self, now: int) -> None:
        for phid in list(self._waiting_hooks):
            hook = self._hooks[phid]
            while hook.waiting and hook.waiting[0][0] <= now:
                _due, row_id = heapq.heappop(hook.waiting)
                if row_id in hook.held and row_id not in hook.out:
                    self._place(hook, row_id, now)
            if not hook.waiting:
                self._waiting_hooks.discard(phid)

    def poll(self) -> bool:
        """Read what is new and refill what drained; True when more is waiting to be read right now."""
        if not self.started:
            self.start()
        more = self._scan_new()
        self._recheck_gaps()
        if self._monotonic() - self._last_sweep > SWEEP_INTERVAL_SEC:
            self._sweep()
        self._list_request_hooks()
        used, more_untried = self._refill_untried(QUERIES_PER_POLL)
        _used, more_retries = self._refill_retries(max(1, QUERIES_PER_POLL - used))
        self._promote(self.estimated_now())
        return more or more_untried or more_retries or self._listing is not None

    # -- handing out ---------------------------------------------------------------------------------

    def candidates(self, schedulable: Callable[[str], bool] = lambda hook: True) -> list[tuple[int, str]]:
        """(oldest due id, hook) of every schedulable hook that holds due rows, oldest first."""
        return sorted(
            (self._hooks[phid].ready[0], phid)
            for phid in self._ready_hooks
            if self._hooks[phid].ready and schedulable(phid)
        )

    def last_result(self, phid: str, row_id: int) -> str:
        """The lastRequestResult of a row the window holds for `phid` (a candidate's oldest, say)."""
        return self._hooks[phid].held[row_id].last_result

    def take(self, phid: str, limit: int) -> list[RequestRow]:
        """Up to `limit` due rows of the hook, oldest first, handed out until `settle`."""
        hook = self._hooks[phid]
        ids, hook.ready = hook.ready[:limit], hook.ready[limit:]
        if not hook.ready:
            self._ready_hooks.discard(phid)
        hook.out.update(ids)
        return [hook.held[row_id] for row_id in ids]

    def settle(self, settlement: Settlement) -> None:
        """Take back the rows `take` handed out to one job, as the Settlement says became of them."""
        phid = settlement.hook_phid
        hook = self._hooks[phid]
        now = self.estimated_now()
        claimed = ((row_id, now + self.lease) for row_id in settlement.claimed)
        for row_id, until in [*claimed, *settlement.deferred]:
            if row_id in hook.out:
                hook.out.discard(row_id)
                heapq.heappush(hook.waiting, (until, row_id))
                self._waiting_hooks.add(phid)
        for row_id in settlement.done:
            self._drop(hook, row_id)
        for row_id, epoch in settlement.retried:
            self._drop(hook, row_id)
            self._retry_at(hook, epoch + self.retry_backoff)
        newer = {row.id: row for row in settlement.fresh}
        for row in settlement.rows:
            if row.id not in hook.out:
                continue
            hook.out.discard(row.id)
            current = newer.get(row.id)
            if current is not None and current.status != RequestStatus.QUEUED:
                self._drop(hook, row.id)
            elif current is not None:
                self._hold(hook, current, now)
            else:
                self._place(hook, row.id, now)
        if len(hook.held) < self.per_hook // 2 and not hook.untried_done:
            self._untried_pending.add(phid)

    # -- invariants ----------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise WindowInvariantError unless every invariant of the module's docstring holds."""
        check_invariants(
            self._hooks,
            held_count=self.held_count,
            limits=(self.total, self.per_hook),
            candidates=(self._ready_hooks, self._waiting_hooks),
            gaps=self.gaps,
            frontier=self.frontier,
        )
