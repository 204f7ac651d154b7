"""One refresh of the tally (reads/tally.py): in one consistent snapshot of Phorge's request table, read what
may have changed since the last refresh, and only that, then write the result to Django's database.

What can change a request's counts, and how each is found (tally_sql.py reads):

* a queued request settles (a worker or PHP writes its result): the queued runs are read again;
* a new request: ids above the frontier, at most `budget` of them per refresh (the first count of a large
  history takes several refreshes: `complete` is False until the frontier reaches the newest id);
* an id allocated before the frontier but committed after it was read: holes in the ids near the top are
  remembered and read again for HOLE_SETTLE_SEC, as the worker's queue window does;
* a failed request put back in the queue: through key_status where Phorge has it (every queued id that is
  in no run), else through the requeue notices this service leaves (records/notices.py); the chunks they fall
  in are counted again;
* Phorge's garbage collector deletes the oldest requests: when the smallest id or dateCreated moves, the
  chunks wholly below are dropped and the ones it may have reached are counted again;
* anything else (a hand-made change): one chunk is counted again every SWEEP_SEC, round the history.

Each refresh reads in proportion to the queued requests, the new ones and a fixed number of chunks; the
history itself is read once, in budget-sized steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .tally import (
    CHUNK,
    Chunk,
    Group,
    Run,
    Settled,
    Waiting,
    add_chunk,
    chunk_range,
    chunks_of,
    clip,
    minus,
    normalized,
    settled_of,
    union,
)
from .tally_sql import Bounds, TallyReader

BUDGET_IDS = 20_000  # new ids counted per refresh at most
SWEEP_SEC = 60  # one chunk counted again this often
HOLE_WINDOW = 10_000  # holes are looked for among the newest ids only
HOLE_SETTLE_SEC = 120
HOLES_KEPT = 512
REFUSALS_KEPT = 50
RECENT_SEC = 86_400  # the refusals kept for the dashboard's recent failures: the last day's
KEY_STATUS_SEC = 600  # how often Phorge's table is looked at again for key_status


@dataclass
class State:
    """The refresher's bookkeeping, kept in the tally's row between refreshes."""

    frontier: int = 0  # every id up to here has been read once
    anchor: str = ""  # the PHID at the frontier: another table behind the same name starts the count again
    low: int = 0  # the smallest id and dateCreated at the last refresh
    low_created: int = 0
    queued: list[Run] = field(default_factory=list)
    holes: list[tuple[int, int, int]] = field(default_factory=list)  # (low, high, first seen on the db clock)
    notices: int = -1  # the last requeue notice read; -1: none read yet
    sweep: int = -1  # the chunk counted again last
    swept_at: int = 0
    refusals: list[tuple[int, int, str]] = field(default_factory=list)  # (dateModified, id, hook), newest first
    oldest: dict[int, int] = field(default_factory=dict)  # chunk: its smallest dateCreated
    key_status: bool = False  # whether Phorge's table had key_status when last looked at
    key_status_at: int = 0
    counted: bool = False  # a whole refresh has run since the start (or the last reset)
    idle: int = 0  # refreshes in a row that found nothing could have changed

    def to_json(self) -> dict[str, Any]:
        return {
            "frontier": self.frontier,
            "anchor": self.anchor,
            "low": self.low,
            "low_created": self.low_created,
            "queued": [list(run) for run in self.queued],
            "holes": [list(hole) for hole in self.holes],
            "notices": self.notices,
            "sweep": self.sweep,
            "swept_at": self.swept_at,
            "refusals": [list(one) for one in self.refusals],
            "oldest": {str(number): created for number, created in sorted(self.oldest.items())},
            "key_status": self.key_status,
            "key_status_at": self.key_status_at,
            "counted": self.counted,
            "idle": self.idle,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> State:
        if not value:
            return cls()
        return cls(
            frontier=int(value["frontier"]),
            anchor=str(value["anchor"]),
            low=int(value["low"]),
            low_created=int(value["low_created"]),
            queued=[(int(a), int(b)) for a, b in value["queued"]],
            holes=[(int(a), int(b), int(c)) for a, b, c in value["holes"]],
            notices=int(value["notices"]),
            sweep=int(value["sweep"]),
            swept_at=int(value["swept_at"]),
            refusals=[(int(a), int(b), str(c)) for a, b, c in value["refusals"]],
            oldest={int(number): int(created) for number, created in value["oldest"].items()},
            key_status=bool(value.get("key_status", False)),
            key_status_at=int(value.get("key_status_at", 0)),
            counted=bool(value.get("counted", False)),
            idle=int(value.get("idle", 0)),
        )

    def unchanged(self, bounds: Bounds, notices: Sequence[tuple[int, str, int]]) -> bool:
        """Whether nothing can have changed since the last refresh, as far as `bounds` (read outside any
        snapshot) tell: no new id, none collected, nothing queued or in a hole to read again, no requeue
        notice, no sweep and no look for key_status due. Then the counts stand, as of `bounds.now`."""
        return bool(
            self.counted
            and (bounds.max_id, bounds.min_id, bounds.min_created) == (self.frontier, self.low, self.low_created)
            and not self.queued
            and not self.holes
            and not any(notice > self.notices for notice, _hook, _low in notices)
            and bounds.now - self.swept_at < SWEEP_SEC
            and bounds.now - self.key_status_at < KEY_STATUS_SEC
            and not self.key_status  # with it, the queued requests are looked for at every refresh
        )


class Chunks:
    """The chunks a refresh touches, loaded when first needed, and the totals kept in step with them."""

    def __init__(self, loader: Any, totals: dict[str, Settled]) -> None:
        self._loader = loader  # numbers -> {number: Chunk}; None: every chunk
        self.totals = totals
        self.loaded: dict[int, Chunk] = {}
        self.changed: set[int] = set()
        self.dropped: set[int] = set()
        self.unsure: set[str] = set()  # hooks whose newest refusal must be found again

    def get(self, number: int) -> Chunk:
        if number not in self.loaded:
            self.loaded.update(self._loader([number]))
            self.loaded.setdefault(number, Chunk(number))
        return self.loaded[number]

    def add(self, group: Group) -> None:
        counts = settled_of(group)
        if counts.empty:
            return
        self.get(group.chunk).hooks.setdefault(group.hook, Settled()).add(counts)
        self.totals.setdefault(group.hook, Settled()).add(counts)
        self.changed.add(group.chunk)

    def replace(self, number: int, groups: Sequence[Group]) -> None:
        self.unsure |= add_chunk(self.totals, self.get(number), -1)
        fresh = Chunk(number)
        for group in groups:
            fresh.add(group)
        add_chunk(self.totals, fresh, 1)
        self.loaded[number] = fresh
        self.changed.add(number)
        self.dropped.discard(number)

    def drop(self, number: int) -> None:
        self.unsure |= add_chunk(self.totals, self.get(number), -1)
        self.loaded[number] = Chunk(number)
        self.changed.discard(number)
        self.dropped.add(number)

    def settle_refusals(self) -> None:
        """The newest refusal of each unsure hook, from every chunk there is."""
        if not self.unsure:
            return
        every = self._loader(None)
        every.update({n: c for n, c in self.loaded.items() if n in self.changed})
        for number in self.dropped:
            every.pop(number, None)
        for hook in self.unsure:
            newest = max((c.hooks[hook].refused_at for c in every.values() if hook in c.hooks), default=0)
            if hook in self.totals:
                self.totals[hook].refused_at = newest


@dataclass
class Outcome:
    now: int
    complete: bool
    state: State
    waiting: dict[str, Waiting]
    chunks: Chunks
    reset: bool
    key_status: bool
    ids_read: int = 0
    progress: tuple[int, int] = (0, 0)  # (ids counted, ids retained), from the oldest: how far the count has come


class Refresh:
    def __init__(
        self,
        reader: TallyReader,
        state: State,
        chunks: Chunks,
        notices: Sequence[tuple[int, str, int]],
        *,
        budget: int = BUDGET_IDS,
    ) -> None:
        self.reader = reader
        self.state = state
        self.chunks = chunks
        self.notices = notices  # (notice id, hook, lowest requeued id), oldest first
        self.budget = budget
        self.waiting: dict[str, Waiting] = {}
        self.ids_read = 0
        self.now = 0

    def run(self) -> Outcome:
        bounds = self.reader.bounds()
        self.now = now = bounds.now
        state = self.state
        reset = self._is_other_table(bounds.max_id)
        if reset:
            self.state = state = State()
            self.chunks.totals.clear()
            self.chunks.loaded.clear()
        if not state.frontier and not state.oldest:
            state.frontier = max(0, bounds.min_id - 1)
            state.swept_at = now  # a first count needs no healing
        if state.notices < 0 or reset:
            state.notices = max((notice for notice, _hook, _low in self.notices), default=max(state.notices, 0))
            notices: Sequence[tuple[int, str, int]] = ()
        else:
            notices = [n for n in self.notices if n[0] > state.notices]
            state.notices = max((n[0] for n in notices), default=state.notices)
        dirty = self._front(bounds.min_id, bounds.min_created)
        if now - state.key_status_at >= KEY_STATUS_SEC:
            state.key_status, state.key_status_at = self.reader.has_key_status(), now
        key_status = state.key_status
        dirty |= self._put_back(key_status, notices)
        if state.frontier >= bounds.max_id:  # not while the first count goes on
            dirty |= self._sweep(now)
        dirty = {n for n in dirty if n * CHUNK <= state.frontier and n not in self.chunks.dropped}
        for number in sorted(dirty):
            self._recount(number)
        recounted = [chunk_range(n) for n in dirty]
        top = min(bounds.max_id, state.frontier + self.budget)
        if top >= bounds.max_id:  # a first count reads the queued requests again once, at its last step
            self._queued(minus(state.queued, normalized(recounted)))
        if top > state.frontier:
            self._new(state.frontier + 1, top, bounds.max_id)
            state.frontier = top
            state.anchor = self.reader.phid_at(top) or ""
        self._holes(recounted)
        state.refusals = sorted(
            {one[1]: one for one in state.refusals if one[0] >= now - RECENT_SEC}.values(), reverse=True
        )[:REFUSALS_KEPT]
        self.chunks.settle_refusals()
        state.counted, state.idle = True, 0
        base = max(0, bounds.min_id - 1)
        return Outcome(
            now=now,
            complete=state.frontier >= bounds.max_id,
            state=state,
            waiting=self.waiting,
            chunks=self.chunks,
            reset=reset,
            key_status=key_status,
            ids_read=self.ids_read,
            progress=(max(0, min(state.frontier, bounds.max_id) - base), max(0, bounds.max_id - base)),
        )

    def _is_other_table(self, max_id: int) -> bool:
        """The table was emptied, or replaced: what was counted is not of it."""
        state = self.state
        if not state.frontier and not state.oldest:
            return False
        if max_id < state.frontier:
            return True
        found = self.reader.phid_at(state.frontier) if state.anchor else None
        return found is not None and found != state.anchor

    def _front(self, min_id: int, min_created: int) -> set[int]:
        """Phorge's garbage collector deleted the oldest requests: drop what is gone, recount what it reached."""
        state = self.state
        dirty: set[int] = set()
        if (min_id, min_created) != (state.low, state.low_created) and state.oldest:
            for number, created in list(state.oldest.items()):
                if not min_id or chunk_range(number)[1] < min_id:
                    self.chunks.drop(number)
                    del state.oldest[number]
                elif created <= min_created or number == min_id // CHUNK:
                    dirty.add(number)
        state.low, state.low_created = min_id, min_created
        floor = min_id or state.frontier + 1
        state.queued = clip(state.queued, floor, state.frontier)
        state.holes = [(max(a, floor), b, seen) for a, b, seen in state.holes if b >= floor]
        state.refusals = [one for one in state.refusals if one[1] >= floor]
        return dirty

    def _put_back(self, key_status: bool, notices: Sequence[tuple[int, str, int]]) -> set[int]:
        """The chunks of requests put back in the queue since the last refresh."""
        state = self.state
        if key_status:
            found = self.reader.all_queued_runs(state.frontier)
        else:
            ids: list[Run] = []
            for _notice, hook, lowest in notices:
                ids += [(one, one) for one in self.reader.untried_queued(hook, lowest, state.frontier)]
            found = normalized(ids)
        back = minus(minus(found, state.queued), normalized((a, b) for a, b, _seen in state.holes))
        return chunks_of(back)

    def _sweep(self, now: int) -> set[int]:
        state = self.state
        if not state.oldest or now - state.swept_at < SWEEP_SEC:
            return set()
        numbers = sorted(state.oldest)
        following = [n for n in numbers if n > state.sweep]
        state.sweep = following[0] if following else numbers[0]
        state.swept_at = now
        return {state.sweep}

    def _take(self, groups: Sequence[Group], *, into_chunks: bool = True) -> None:
        """Queued groups to the waiting counts, settled ones to their chunks; each chunk's oldest request."""
        oldest = self.state.oldest
        for group in groups:
            self.ids_read += group.requests
            if group.queued:
                self.waiting.setdefault(group.hook, Waiting()).add(group)
            elif into_chunks:
                self.chunks.add(group)
            oldest[group.chunk] = min(oldest.get(group.chunk, group.oldest), group.oldest)
        self._refusals(groups)

    def _refusals(self, groups: Sequence[Group]) -> None:
        since = self.now - RECENT_SEC
        recent = {(g.chunk, g.hook) for g in groups if not g.queued and g.refused_at >= since and g.refused_at}
        for chunk, hook in sorted(recent):
            self.state.refusals += self.reader.refusals(chunk, hook, since)

    def _recount(self, number: int) -> None:
        state = self.state
        low, high = chunk_range(number)
        low, high = max(low, state.low), min(high, state.frontier)
        groups = self.reader.groups([(low, high)], self.now)
        state.refusals = [one for one in state.refusals if not low <= one[1] <= high]
        state.oldest.pop(number, None)
        self.chunks.replace(number, [g for g in groups if not g.queued])
        self._take(groups, into_chunks=False)
        if number not in state.oldest:
            self.chunks.drop(number)
        state.queued = union(minus(state.queued, [(low, high)]), self.reader.queued_runs([(low, high)]))
        holes = normalized((max(a, low), min(b, high)) for a, b, _seen in state.holes if b >= low and a <= high)
        if holes:  # what the recount read of a hole is counted now: no longer a hole
            self._fill_holes(self.reader.existing_runs(holes))

    def _queued(self, runs: list[Run]) -> None:
        """The queued requests of the last refresh: those settled since go to their chunks."""
        if not runs:
            return
        self._take(self.reader.groups(runs, self.now))
        still = self.reader.queued_runs(runs)
        self.state.queued = union(minus(self.state.queued, runs), still)

    def _new(self, low: int, high: int, newest: int) -> None:
        groups = self.reader.groups([(low, high)], self.now)
        self._take(groups)
        self.state.queued = union(self.state.queued, self.reader.queued_runs([(low, high)]))
        near_top = (max(low, newest - HOLE_WINDOW), high)
        if near_top[0] <= near_top[1] and sum(g.requests for g in groups) < high - low + 1:
            holes = minus([near_top], self.reader.existing_runs([near_top]))
            self.state.holes = (self.state.holes + [(a, b, self.now) for a, b in holes])[-HOLES_KEPT:]

    def _holes(self, recounted: Sequence[Run]) -> None:
        """Holes still young are read again; what appeared in them is counted, the rest stays a hole."""
        state = self.state
        state.holes = [hole for hole in state.holes if hole[2] >= self.now - HOLE_SETTLE_SEC]
        runs = minus(normalized((a, b) for a, b, _seen in state.holes), normalized(recounted))
        if not runs:
            return
        appeared = self.reader.existing_runs(runs)
        if appeared:
            self._take(self.reader.groups(appeared, self.now))
            state.queued = union(state.queued, self.reader.queued_runs(appeared))
            self._fill_holes(appeared)

    def _fill_holes(self, appeared: Sequence[Run]) -> None:
        kept: list[tuple[int, int, int]] = []
        for low, high, seen in self.state.holes:
            kept += [(a, b, seen) for a, b in minus([(low, high)], appeared)]
        self.state.holes = kept
