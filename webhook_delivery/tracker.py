"""Finds due requests without scanning Phorge's retained history on every poll.

Upstream Phorge has no index on `status`, so `WHERE status = 'queued' ORDER BY id` reads every retained
row (a week of a busy site is a million). Instead:

* new rows are read by primary-key range above a frontier (the highest id seen);
* queued rows below the frontier are remembered with the database time they become due, and re-read by
  primary key only then;
* an id the range read skipped (an insert not yet committed) is re-read until it appears or settles;
* a full scan runs at start-up and rarely afterwards, as a safety net.

The tracker only proposes candidates: the claim in store.Store re-checks everything in SQL.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from .store import RequestRow, Store, is_due, next_due

SCAN_BATCH = 1000
FETCH_BATCH = 500
GAP_SETTLE_SEC = 120.0
STARTUP_GAP_WINDOW = 100
SWEEP_INTERVAL_SEC = 600.0
PROPERTIES_CACHE_ROWS = 4096


class QueueTracker:
    def __init__(self, store: Store, *, lease: int, retry_backoff: int) -> None:
        self.store = store
        self.lease = lease
        self.retry_backoff = retry_backoff
        self.frontier = 0
        self.known: dict[int, RequestRow] = {}
        self.due_at: dict[int, int] = {}
        self.gaps: dict[int, float] = {}
        self.in_flight: set[int] = set()
        self.clock_offset = 0.0
        self._cached_properties = 0
        self._last_sweep = 0.0
        self.started = False
        # Rows not yet due wait in a heap by due time; due rows sit in per-hook lists sorted by id, so a
        # poll touches only what it hands out, however long the backlog. Both are cleaned lazily.
        self._waiting: list[tuple[int, int]] = []
        self._ready: dict[str, list[int]] = {}
        self._in_ready: set[int] = set()

    def estimated_now(self) -> int:
        return int(time.time() + self.clock_offset)

    def _saw_clock(self, db_now: int | None) -> None:
        if db_now is not None:  # queries that return no row carry no clock reading: keep the last one
            self.clock_offset = db_now - time.time()

    def start(self) -> None:
        self.frontier, db_now = self.store.max_request_id()
        self._saw_clock(db_now)
        # Inserts still uncommitted right now sit in holes just below the frontier: watch those ids.
        present = set(self.store.ids_between(self.frontier - STARTUP_GAP_WINDOW, self.frontier))
        for missing in range(max(1, self.frontier - STARTUP_GAP_WINDOW + 1), self.frontier):
            if missing not in present:
                self.gaps[missing] = time.monotonic()
        self._sweep()
        self.started = True

    def _sweep(self) -> None:
        rows, now = self.store.queued_up_to(self.frontier)
        self._saw_clock(now)
        for row in rows:
            if row.id not in self.known:
                self._track(row)
        self._last_sweep = time.monotonic()

    def _track(self, row: RequestRow) -> None:
        if row.status != "queued":
            self.forget(row.id)
            return
        previous = self.known.get(row.id)
        if previous is not None and previous.properties is not None:
            self._cached_properties -= 1
        if row.properties is not None:
            if self._cached_properties >= PROPERTIES_CACHE_ROWS:
                row = replace(row, properties=None)
            else:
                self._cached_properties += 1
        self.known[row.id] = row
        due = next_due(row, self.lease, self.retry_backoff)
        self.due_at[row.id] = due
        heapq.heappush(self._waiting, (due, row.id))

    def forget(self, row_id: int) -> None:
        row = self.known.pop(row_id, None)
        if row is not None and row.properties is not None:
            self._cached_properties -= 1
        self.due_at.pop(row_id, None)

    def refresh(self, rows: Iterable[RequestRow], db_now: int | None = None) -> None:
        """Take newer snapshots (after our own claims and writes, or a re-read)."""
        if db_now is not None:
            self._saw_clock(db_now)
        for row in rows:
            self._track(row)

    def recheck_soon(self, row_id: int) -> None:
        if row_id in self.due_at:
            self.due_at[row_id] = 0
            heapq.heappush(self._waiting, (0, row_id))
            row = self.known[row_id]
            if row.properties is not None:
                self._cached_properties -= 1
                self.known[row_id] = replace(row, properties=None)

    def _scan_new(self) -> bool:
        rows, now = self.store.scan_after(self.frontier, SCAN_BATCH)
        self._saw_clock(now)
        expected = self.frontier + 1
        for row in rows:
            for missing in range(expected, row.id):
                self.gaps.setdefault(missing, time.monotonic())
            expected = row.id + 1
            self._track(row)
        if rows:
            self.frontier = rows[-1].id
        return len(rows) == SCAN_BATCH

    def _recheck_gaps(self) -> None:
        if not self.gaps:
            return
        ids = sorted(self.gaps, reverse=True)[:FETCH_BATCH]  # the newest holes are the likely late commits
        rows, now = self.store.fetch(ids)
        self._saw_clock(now)
        for row in rows:
            self.gaps.pop(row.id, None)
            self._track(row)
        settled = time.monotonic() - GAP_SETTLE_SEC
        for gap_id in [i for i, seen in self.gaps.items() if seen < settled]:
            del self.gaps[gap_id]

    def _promote(self, now: int) -> None:
        while self._waiting and self._waiting[0][0] <= now:
            due, row_id = heapq.heappop(self._waiting)
            if self.due_at.get(row_id) != due or row_id in self._in_ready:
                continue  # stale entry: forgotten, re-tracked, or already ready
            self._in_ready.add(row_id)
            bisect.insort(self._ready.setdefault(self.known[row_id].webhook_phid, []), row_id)

    def _usable(self, row_id: int, now: int) -> bool:
        """Whether a ready entry still stands for a due row; drops it from the ready set if not."""
        row = self.known.get(row_id)
        if row is not None and self.due_at[row_id] <= now and is_due(row, now, self.lease, self.retry_backoff):
            return True
        self._in_ready.discard(row_id)
        return False

    def _hook_rows(self, hook: str, now: int, limit: int) -> list[int]:
        """Up to `limit` due ids of `hook`, oldest first; stale entries met on the way are dropped."""
        ids = self._ready.get(hook, [])
        picked: list[int] = []
        keep: list[int] = []
        position = 0
        while position < len(ids) and len(picked) < limit:
            row_id = ids[position]
            position += 1
            if row_id in self.in_flight:
                keep.append(row_id)
            elif self._usable(row_id, now):
                picked.append(row_id)
                keep.append(row_id)
        keep.extend(ids[position:])
        if keep:
            self._ready[hook] = keep
        else:
            self._ready.pop(hook, None)
        return picked

    def poll(
        self, schedulable: Callable[[str], bool] = lambda hook: True, *, hooks: int = 1_000_000, rows: int = 32
    ) -> tuple[list[list[RequestRow]], bool]:
        """Due rows of up to `hooks` schedulable hooks, oldest hook first, up to `rows` each (oldest first),
        and whether more new rows wait to be read."""
        if not self.started:
            self.start()
        more = self._scan_new()
        self._recheck_gaps()
        if time.monotonic() - self._last_sweep > SWEEP_INTERVAL_SEC:
            self._sweep()
        self._promote(self.estimated_now())
        oldest = sorted((ids[0], hook) for hook, ids in self._ready.items() if ids and schedulable(hook))
        batches: list[list[int]] = []
        for _first, hook in oldest:
            if len(batches) >= hooks:
                break
            picked = self._hook_rows(hook, self.estimated_now(), rows)
            if picked:
                batches.append(picked)
        missing = [row_id for batch in batches for row_id in batch if self.known[row_id].properties is None]
        if missing:
            fetched, db_now = self.store.fetch(missing)
            self._saw_clock(db_now)
            found = {row.id for row in fetched}
            for row_id in missing:
                if row_id not in found:
                    self.forget(row_id)
            self.refresh(fetched)
        now = self.estimated_now()
        result = []
        for batch in batches:
            rows_due = [
                self.known[row_id]
                for row_id in batch
                if row_id in self.known
                and self.known[row_id].properties is not None
                and is_due(self.known[row_id], now, self.lease, self.retry_backoff)
            ]
            if rows_due:
                result.append(rows_due)
        return result, more

    @property
    def queued_count(self) -> int:
        return len(self.known)
