"""In-memory twins of a worker's parts (parts.py), so that the job, the scheduler and the whole loop run
without a database server: `memory_parts(config)` gives a worker whose Phorge is a MemoryStore and whose
Django database is a few dictionaries. Deliveries are real (the dispatcher and its HTTP transport are the
production ones); only storage is twinned.

MemoryStore keeps store.Store's semantics: the due rule (phorge.herald.is_due), the claim as a
compare-and-set on the version that also moves it to the database's clock, a result written only under the
claim that was won, properties above INLINE_PROPERTIES read alone, a failed request requeued only as it was
read. tests/support/store_contract.py runs one contract against it and against store.Store in each of its
ways to write (writes.py).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from ..config import DeliveryConfig, IPNetwork
from ..phorge.config import PhorgeConfig, resolve
from ..phorge.databases import Placement
from ..phorge.herald import Hook, RequestRow, RequestStatus, counts_toward_breaker, is_due
from ..state import PhpDelivery, WorkerState
from .dispatcher import Dispatcher
from .parts import Parts
from .php_watch import PhpWatch
from .store import INLINE_PROPERTIES, WrittenOutcome


class MemoryStore:
    """Phorge's two herald tables in memory, with the database's clock as `now` (set it to move time)."""

    def __init__(self, now: int = 1_700_000_000) -> None:
        self.now = now
        self.rows: dict[int, RequestRow] = {}
        self.hook_rows: dict[str, Hook] = {}
        self.lock = threading.Lock()
        self.claims = 0
        self.writes = 0

    # -- what Phorge (or a test) writes --

    def add_hook(self, phid: str, *, uri: str, key: str = "k3y", status: str = "enabled", name: str = "hook") -> str:
        self.hook_rows[phid] = Hook(phid, name, status, uri, key)
        return phid

    def add_request(
        self,
        hook_phid: str,
        properties: str = '{"retry":"never","transactionPHIDs":[],"triggerPHIDs":[]}',
        *,
        created: int | None = None,
        object_phid: str = "PHID-TASK-memorymemorymemory00",
        **changes: Any,
    ) -> int:
        with self.lock:
            row_id = max(self.rows, default=0) + 1
            when = self.now if created is None else created
            row = RequestRow(
                row_id,
                f"PHID-HWBR-{row_id:020d}",
                hook_phid,
                object_phid,
                RequestStatus.QUEUED,
                "none",
                0,
                when,
                when,
                properties,
            )
            self.rows[row_id] = dataclasses.replace(row, **changes)
            return row_id

    # -- the window's reads (rows without properties; the database clock when there were rows) --

    def _bare(self, rows: Iterable[RequestRow]) -> tuple[list[RequestRow], int | None]:
        found = [dataclasses.replace(row, properties=None) for row in rows]
        return found, (self.now if found else None)

    def max_request_id(self) -> tuple[int, int]:
        return max(self.rows, default=0), self.now

    def scan_after(self, after_id: int, limit: int) -> tuple[list[RequestRow], int | None]:
        return self._bare(self.rows[i] for i in sorted(i for i in self.rows if i > after_id)[:limit])

    def in_ranges(self, ranges: Sequence[tuple[int, int]], limit: int) -> tuple[list[RequestRow], int | None]:
        ids = sorted(i for i in self.rows if any(low <= i <= high for low, high in ranges))[:limit]
        return self._bare(self.rows[i] for i in ids)

    def untried(self, cursors: Sequence[tuple[str, int]], limit: int) -> tuple[list[RequestRow], int | None]:
        found: list[RequestRow] = []
        for hook, after in cursors:
            rows = [
                row
                for _id, row in sorted(self.rows.items())
                if row.webhook_phid == hook
                and row.last_result == "none"
                and row.last_epoch == 0
                and row.id > after
                and row.status == RequestStatus.QUEUED
            ]
            found += rows[:limit]
        return self._bare(found)

    def retries(
        self, cursors: Sequence[tuple[str, int, int]], cutoff: int, limit: int
    ) -> tuple[list[RequestRow], int | None]:
        found: list[RequestRow] = []
        for hook, epoch, after in cursors:
            rows = sorted(
                (
                    row
                    for row in self.rows.values()
                    if row.webhook_phid == hook
                    and row.last_result == "fail"
                    and row.last_epoch <= cutoff
                    and (row.last_epoch, row.id) > (epoch, after)
                    and row.status == RequestStatus.QUEUED
                ),
                key=lambda row: (row.last_epoch, row.id),
            )
            found += rows[:limit]
        return self._bare(found)

    def next_failures(self, hooks: Sequence[str], after_epoch: int) -> dict[str, int]:
        found: dict[str, int] = {}
        for row in self.rows.values():
            if row.webhook_phid in hooks and row.last_result == "fail" and row.last_epoch > after_epoch:
                found[row.webhook_phid] = min(found.get(row.webhook_phid, row.last_epoch), row.last_epoch)
        return found

    def hook_phids(self) -> list[str]:
        return list(self.hook_rows)

    def request_hooks_after(self, after: str, limit: int) -> list[str]:
        return sorted({row.webhook_phid for row in self.rows.values() if row.webhook_phid > after})[:limit]

    def hooks(self) -> dict[str, Hook]:
        return dict(self.hook_rows)

    # -- the job's reads and writes --

    def fetch(self, ids: list[int]) -> tuple[list[RequestRow], int | None]:
        found = []
        for row_id in ids:
            row = self.rows.get(row_id)
            if row is None:
                continue
            inline = row.status == RequestStatus.QUEUED and len((row.properties or "").encode()) <= INLINE_PROPERTIES
            found.append(row if inline else dataclasses.replace(row, properties=None))
        return found, (self.now if found else None)

    def large_properties(self, row_id: int) -> tuple[int, str | None] | None:
        row = self.rows.get(row_id)
        if row is None or row.status != RequestStatus.QUEUED:
            return None
        text = row.properties or ""
        return len(text.encode()), text

    def claim(
        self, row: RequestRow, *, lease: int, retry_backoff: int, lock: tuple[str, int] | None = None
    ) -> int | None:
        with self.lock:
            stored = self.rows.get(row.id)
            if stored is None or stored.date_modified != row.date_modified:
                return None
            if not is_due(stored, self.now, lease, retry_backoff):
                return None
            version = max(stored.date_modified + 1, self.now)
            self.rows[row.id] = dataclasses.replace(stored, date_modified=version)
            self.claims += 1
            return version

    def release_claim(self, row_id: int, version: int, *, previous: int) -> bool:
        with self.lock:
            stored = self.rows.get(row_id)
            if stored is None or stored.status != RequestStatus.QUEUED or stored.date_modified != version:
                return False
            self.rows[row_id] = dataclasses.replace(stored, date_modified=previous)
            return True

    def write_outcome(
        self, row_id: int, version: int, *, status: str, result: str, attempted: bool, properties: str | None
    ) -> int | None:
        with self.lock:
            stored = self.rows.get(row_id)
            if stored is None or stored.status != RequestStatus.QUEUED or stored.date_modified != version:
                return None
            self.rows[row_id] = dataclasses.replace(
                stored,
                status=status,
                last_result=result,
                last_epoch=self.now if attempted else 0,
                date_modified=self.now,
                properties=stored.properties if properties is None else properties,
            )
            self.writes += 1
            return self.now

    def write_then_claim(
        self,
        written: tuple[int, int],
        outcome: WrittenOutcome,
        claim: RequestRow,
        *,
        lease: int,
        retry_backoff: int,
        lock: tuple[str, int] | None = None,
    ) -> tuple[int | None, int | None, bool]:
        status, result, attempted, properties = outcome
        done = self.write_outcome(*written, status=status, result=result, attempted=attempted, properties=properties)
        return done, self.claim(claim, lease=lease, retry_backoff=retry_backoff, lock=lock), True

    def requeue(self, row: RequestRow) -> bool:
        with self.lock:
            stored = self.rows.get(row.id)
            as_read = (RequestStatus.FAILED, row.last_result, row.last_epoch, row.date_modified)
            if (
                stored is None
                or (stored.status, stored.last_result, stored.last_epoch, stored.date_modified) != as_read
            ):
                return False
            self.rows[row.id] = dataclasses.replace(
                stored, status=RequestStatus.QUEUED, last_result="none", last_epoch=0, date_modified=stored.date_created
            )
            return True

    def recent_failures(self, hook_phid: str, *, window: int, limit: int) -> list[int]:
        epochs = [
            row.last_epoch
            for row in self.rows.values()
            if row.webhook_phid == hook_phid
            and counts_toward_breaker(row.last_result, row.last_epoch, self.now - window)
        ]
        return sorted(epochs, reverse=True)[:limit]

    def recycle_connection(self) -> None:
        return None

    def drop_connection(self) -> None:
        return None


class MemoryLocks:
    """Phorge's per-hook locks within this process; `taken` are held by someone else (a PHP task)."""

    alias = "memory"
    beside_claims = True

    def __init__(self) -> None:
        self.on_lost: Callable[[], None] | None = None
        self._mutex = threading.Lock()
        self.held: set[str] = set()
        self.taken: set[str] = set()
        self.generation = 0

    def acquire(self, name: str) -> int | None:
        with self._mutex:
            if name in self.held or name in self.taken:
                return None
            self.held.add(name)
            return self.generation

    def release(self, name: str, token: int) -> None:
        with self._mutex:
            if token == self.generation:
                self.held.discard(name)

    def holds(self, name: str, token: int) -> bool:
        with self._mutex:
            return token == self.generation and name in self.held

    def for_claim(self, name: str, token: int) -> tuple[bool, tuple[str, int] | None]:
        return self.holds(name, token), None

    def check(self) -> None:
        return None

    def lose(self) -> None:
        """The session that held every lock is gone."""
        with self._mutex:
            lost = bool(self.held)
            self.held.clear()
            self.generation += 1
        if lost and self.on_lost is not None:
            self.on_lost()


class FixedSettings:
    """Phorge's settings as the variables declare them (no local file, no config database)."""

    def __init__(self, config: DeliveryConfig) -> None:
        self.resolved = resolve(config, None, None, "memory")

    def current(self) -> PhorgeConfig:
        return self.resolved

    def silent(self) -> bool | None:
        return self.resolved.silent.value

    def blacklist(self) -> tuple[IPNetwork, ...]:
        return self.resolved.blacklist.value


class OnePlace:
    """An install that is not partitioned: every application beside herald."""

    def current(self) -> Placement:
        return Placement()


class QuietGuard:
    """Phorge's PHP worker, not delivering."""

    def current(self) -> PhpDelivery:
        return PhpDelivery("idle", 0, 0, 0, None, "memory")

    def live_tasks(self, request_phids: Iterable[str]) -> set[str] | None:
        return set()


class MemoryHeartbeat:
    worker_id = "memory:1:000000"

    def __init__(self) -> None:
        self.beats: list[WorkerState] = []
        self.stopped: str | None = None

    def publish(self, state: WorkerState) -> None:
        self.beats.append(state)

    def retire(self, state: WorkerState, *, clean: bool) -> None:
        self.beats.append(state)
        self.stopped = "clean" if clean else "error"


class MemoryHolds:
    def __init__(self, held: Iterable[str] = ()) -> None:
        self.held = frozenset(held)

    def refresh(self) -> frozenset[str]:
        return self.held


class MemoryRetries:
    def __init__(self) -> None:
        self.orders: dict[str, int] = {}

    def refresh(self) -> Mapping[str, int]:
        return dict(self.orders)


class MemoryNotices:
    def __init__(self) -> None:
        self.pending: dict[str, int] = {}

    def take(self) -> Mapping[str, int]:
        taken, self.pending = self.pending, {}
        return taken


def memory_parts(
    config: DeliveryConfig, store: MemoryStore | None = None, *, dispatcher: Dispatcher | None = None
) -> Parts:
    """A worker's parts with Phorge and Django's database in memory; the deliveries are real HTTP calls."""
    store = store or MemoryStore()
    settings = FixedSettings(config)
    return Parts(
        reader=store,
        store=store,
        locks=MemoryLocks(),
        settings=settings,
        partitions=OnePlace(),
        dispatcher=dispatcher or Dispatcher(config, silent=settings.silent, blacklist=settings.blacklist),
        php=PhpWatch(QuietGuard()),
        heartbeat=MemoryHeartbeat(),
        holds=MemoryHolds(),
        notices=MemoryNotices(),
        retries=MemoryRetries(),
        attempts=None,
        connections=0,
        closing=ExitStack(),
    )
