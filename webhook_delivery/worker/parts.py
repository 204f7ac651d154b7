"""What a worker is made of, and the one place it is put together (the composition root).

`Parts` names each collaborator of worker.loop.Worker by what it does (the protocols below); `build_parts`
makes the real ones, over Phorge's and Django's databases, and registers what each opens with one
ExitStack that the worker closes when it stops. twins.py makes in-memory ones, so that the job, the
scheduler and the loop run without a database server (the unit lane).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Protocol

from django.db import connections

from ..config import PHORGE_ALIAS, DeliveryConfig, IPNetwork
from ..phorge.config import PhorgeConfig, PhorgeSettings
from ..phorge.databases import Masters, PartitionMap, Placement
from ..phorge.herald import Hook, RequestRow
from ..phorge.objects import PhorgeObjects
from ..phorge.php_guard import PhpWorkerGuard
from ..records.heartbeat import Heartbeat
from ..records.holds import HeldHooks
from ..records.notices import RequeueNotices
from ..records.retries import RetryOrders
from ..state import WorkerState
from .actions import OperatorActions
from .attempts import AttemptLog
from .dispatcher import Dispatcher
from .php_watch import PhpWatch
from .requeue import Requeue
from .sessions import LockSession, MasterPools, SessionPool, close_quietly, lock_alias
from .source import QueueSource
from .store import Store, WrittenOutcome


class QueueStore(QueueSource, Protocol):
    """What the loop and the job read and write of Phorge's request table, beyond what the window reads
    (store.Store; the in-memory twin is twins.MemoryStore). Every time is the database's clock; a claim is a
    compare-and-set on the row's version (dateModified), and a result is written only under the claim that
    was won."""

    def hooks(self) -> dict[str, Hook]: ...
    def fetch(self, ids: list[int]) -> tuple[list[RequestRow], int | None]: ...
    def large_properties(self, row_id: int) -> tuple[int, str | None] | None: ...
    def claim(
        self, row: RequestRow, *, lease: int, retry_backoff: int, lock: tuple[str, int] | None = None
    ) -> int | None: ...
    def release_claim(self, row_id: int, version: int, *, previous: int) -> bool: ...
    def write_outcome(
        self, row_id: int, version: int, *, status: str, result: str, attempted: bool, properties: str | None
    ) -> int | None: ...
    def write_then_claim(
        self,
        written: tuple[int, int],
        outcome: WrittenOutcome,
        claim: RequestRow,
        *,
        lease: int,
        retry_backoff: int,
        lock: tuple[str, int] | None = None,
    ) -> tuple[int | None, int | None, bool]: ...
    def recent_failures(self, hook_phid: str, *, window: int, limit: int) -> list[int]: ...
    def recycle_connection(self) -> None: ...
    def drop_connection(self) -> None: ...


class HookLocks(Protocol):
    """Phorge's named per-hook locks for the whole process (sessions.LockSession)."""

    alias: str
    beside_claims: bool
    on_lost: Callable[[], None] | None  # called once each time a session that held locks is lost

    def acquire(self, name: str) -> int | None: ...
    def release(self, name: str, token: int) -> None: ...
    def holds(self, name: str, token: int) -> bool: ...
    def for_claim(self, name: str, token: int) -> tuple[bool, tuple[str, int] | None]: ...
    def check(self) -> None: ...


@dataclass(frozen=True)
class Pipelining:
    """How a job's claims and writes overlap its calls (pipeline.py), chosen once when the job starts from
    the jobs running then, itself counted: `Overlapped` while at most `overlapped_up_to` run, `Inline`
    beyond, where the process is bound by its CPU and the other hooks' calls fill the waits."""

    overlapped_up_to: int = 2

    def overlapped(self, running: int) -> bool:
        return running <= self.overlapped_up_to


class Settings(Protocol):
    """Phorge's switches in force (phorge.config.PhorgeSettings)."""

    def current(self) -> PhorgeConfig: ...
    def silent(self) -> bool | None: ...
    def blacklist(self) -> tuple[IPNetwork, ...]: ...


class Partitions(Protocol):
    def current(self) -> Placement: ...


class HeartbeatSink(Protocol):
    worker_id: str

    def publish(self, state: WorkerState) -> None: ...
    def retire(self, state: WorkerState, *, clean: bool) -> None: ...


class Holds(Protocol):
    def refresh(self) -> frozenset[str]: ...


class Notices(Protocol):
    def take(self) -> Mapping[str, int]: ...


class Retries(Protocol):
    """The operators' Retry now orders in force (records/retries.RetryOrders): {hook PHID: failed up to}."""

    def refresh(self) -> Mapping[str, int]: ...


class Actions(Protocol):
    """The operators' pending actions (actions.OperatorActions): carried out, and whether any was."""

    def carry_out(self) -> bool: ...


@dataclass
class Parts:
    """A worker's collaborators. `closing` holds what they opened: the worker closes it when it stops."""

    reader: QueueStore  # the main thread's reads: the queue window, the hooks
    store: QueueStore  # the delivery threads': claims, result writes, the breaker's failures
    locks: HookLocks
    settings: Settings
    partitions: Partitions
    dispatcher: Dispatcher
    php: PhpWatch
    heartbeat: HeartbeatSink
    holds: Holds
    notices: Notices
    attempts: AttemptLog | None
    connections: int  # to Phorge's database, however many deliveries are in flight
    closing: ExitStack = field(default_factory=ExitStack)
    actions: Actions | None = None  # the dashboard's holds, releases and requeues; None: not carried out here
    retries: Retries | None = None  # Retry now orders; None: none are read (each backoff is waited out)
    pipelining: Pipelining = Pipelining()


def build_parts(config: DeliveryConfig, *, alias: str = PHORGE_ALIAS, dispatcher: Dispatcher | None = None) -> Parts:
    """The real parts: the main thread's own connection, the lock session and the session pool that the
    delivery threads borrow from one statement at a time (`db_pool_size + 2` connections in all)."""
    closing = ExitStack()
    closing.callback(close_quietly, connections[alias])  # closed last: ExitStack unwinds in reverse
    pool = SessionPool(alias, config.db_pool_size)
    cluster = config.cluster
    locks_at = lock_alias(alias, None if cluster is None else cluster.elsewhere("repository"))
    locks = LockSession(locks_at, beside_claims=locks_at == alias)
    # One reader of Phorge's partition map, and one set of connections to the other masters, for the
    # settings, the object lookups and the PHP guard.
    partitions = PartitionMap(config.namespace, connection=pool.connection, configured=cluster)
    other_masters = MasterPools()
    closing.callback(other_masters.close)
    closing.callback(pool.close)
    closing.callback(locks.close)
    masters = Masters(partitions, pool.connection, others=other_masters.source)
    settings = PhorgeSettings(config, masters=masters)
    objects = PhorgeObjects(config.namespace, masters=masters)
    heartbeat = Heartbeat()
    pooled = Store(alias, pool=pool)
    attempts = AttemptLog(config, heartbeat.worker_id) if config.attempt_log else None
    if attempts is not None:
        closing.callback(attempts.close)  # first: its last records reach Django's database
    return Parts(
        reader=Store(alias),
        store=pooled,
        locks=locks,
        settings=settings,
        partitions=partitions,
        dispatcher=dispatcher
        or Dispatcher(
            config,
            silent=settings.silent,
            blacklist=settings.blacklist,
            ca_bundle=settings.ca_bundle,
            objects=objects,
        ),
        php=PhpWatch(PhpWorkerGuard(config.namespace, masters=masters), lambda: settings.current().delegation),
        heartbeat=heartbeat,
        holds=HeldHooks(),
        notices=RequeueNotices(),
        attempts=attempts,
        connections=config.db_pool_size + 2,
        closing=closing,
        actions=OperatorActions(
            heartbeat.worker_id,
            pooled,
            lambda: Requeue(pooled, settings.current().retention.value, objects),
            config=config,
        ),
        retries=RetryOrders(),
        pipelining=Pipelining(),
    )
