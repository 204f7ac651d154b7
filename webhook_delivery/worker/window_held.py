"""The rows the queue window holds, hook by hook: each one due, waiting for its due time or handed out to a
job, within the window's caps (invariants 1 to 3 of window.py's docstring). Which rows to hold, and when to
read them, is the window's business."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..phorge.herald import RequestRow


class Candidate(NamedTuple):
    """A hook that holds due rows, as `QueueWindow.candidates()` proposes it (candidates sort oldest first)."""

    first_id: int  # the hook's oldest due row
    hook: str


@dataclass
class HookShare:
    """One hook's part of the window: the rows it holds, and where its two cursors have read to."""

    phid: str
    held: dict[int, RequestRow] = field(default_factory=dict)
    ready: list[int] = field(default_factory=list)  # held ids due now, ascending
    waiting: list[tuple[int, int]] = field(default_factory=list)  # heap of (due at, id), checked lazily
    out: set[int] = field(default_factory=set)  # held ids handed to a job
    untried_after: int = 0  # never-attempted rows are read after this id
    untried_done: bool = False  # ... and all are read, until a row is seen that could not be held
    retry_cursor: tuple[int, int] = (0, 0)  # failed rows are read after this (lastRequestEpoch, id)
    retry_due_at: int | None = 0  # when the next failed row comes due; None: none known before the sweep


class HeldRows:
    """The held rows of every hook: at most `per_hook` a hook and `total` in all, each placed by `due` (the
    database time its row becomes due)."""

    def __init__(self, per_hook: int, total: int, due: Callable[[RequestRow], int]) -> None:
        self.per_hook = per_hook
        self.total = total
        self._due = due
        self.hooks: dict[str, HookShare] = {}
        self.count = 0
        self.ready_hooks: set[str] = set()  # every hook with due rows (and maybe some without)
        self.waiting_hooks: set[str] = set()  # every hook with waiting rows (and maybe some without)

    def room(self, hook: HookShare) -> int:
        return self.per_hook - len(hook.held)

    def place(self, hook: HookShare, row_id: int, now: int) -> None:
        """Make a held row that is not handed out due, or waiting for the time it becomes due."""
        due = self._due(hook.held[row_id])
        if due <= now:
            if row_id not in hook.ready:
                bisect.insort(hook.ready, row_id)
            self.ready_hooks.add(hook.phid)
        else:
            self.wait(hook, row_id, due)

    def wait(self, hook: HookShare, row_id: int, until: int) -> None:
        heapq.heappush(hook.waiting, (until, row_id))
        self.waiting_hooks.add(hook.phid)

    def hold(self, hook: HookShare, row: RequestRow, now: int) -> bool:
        """Hold `row` (a queued row of `hook`), or refuse when the hook's or the window's share is full."""
        if row.id in hook.held:
            hook.held[row.id] = row
            if row.id in hook.ready:
                hook.ready.remove(row.id)
            if row.id not in hook.out:
                self.place(hook, row.id, now)
            return True
        if len(hook.held) >= self.per_hook or self.count >= self.total:
            return False
        hook.held[row.id] = row
        self.count += 1
        self.place(hook, row.id, now)
        return True

    def drop(self, hook: HookShare, row_id: int) -> None:
        if hook.held.pop(row_id, None) is not None:
            self.count -= 1
        hook.out.discard(row_id)
        if row_id in hook.ready:
            hook.ready.remove(row_id)
        if not hook.ready:
            self.ready_hooks.discard(hook.phid)

    def promote(self, now: int) -> None:
        """Make the waiting rows whose time has come due (stale heap entries are skipped)."""
        for phid in list(self.waiting_hooks):
            hook = self.hooks[phid]
            while hook.waiting and hook.waiting[0][0] <= now:
                _due, row_id = heapq.heappop(hook.waiting)
                if row_id in hook.held and row_id not in hook.out:
                    self.place(hook, row_id, now)
            if not hook.waiting:
                self.waiting_hooks.discard(phid)

    def candidates(self, schedulable: Callable[[str], bool]) -> list[Candidate]:
        return sorted(
            Candidate(self.hooks[phid].ready[0], phid)
            for phid in self.ready_hooks
            if self.hooks[phid].ready and schedulable(phid)
        )

    def take(self, phid: str, limit: int) -> list[RequestRow]:
        hook = self.hooks[phid]
        ids, hook.ready = hook.ready[:limit], hook.ready[limit:]
        if not hook.ready:
            self.ready_hooks.discard(phid)
        hook.out.update(ids)
        return [hook.held[row_id] for row_id in ids]
