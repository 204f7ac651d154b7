"""Whether Phorge's own PHP daemon still runs `HeraldWebhookWorker` tasks: the handover guard.

Read-only, from Phorge's `<namespace>_worker` tables through databases.py; without the grant, or when
the worker application is on another master of a partitioned Phorge, the state is "unknown", never "idle".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from ..state import PhpDelivery, PhpState
from .columns import in_filter
from .databases import (
    CACHE_SEC,
    UNREADABLE_RECHECK_SEC,
    ConnectionSource,
    Masters,
    MasterUnavailable,
    NoAccessError,
    herald_connection,
    qualified,
    select,
)
from .herald import text

WEBHOOK_TASK_CLASS = "HeraldWebhookWorker"
ARCHIVE_RESULT_CANCELLED = 2  # PhabricatorWorkerArchiveTask::RESULT_CANCELLED (bin/worker cancel)
RECENT_ARCHIVE_SEC = 15 * 60
ACTIVE_ARCHIVE_SEC = 60


class PhpWorkerGuard:
    """Whether Phorge's PHP daemon is (still) delivering webhooks: the handover check.

    "active": HeraldWebhookWorker tasks are queued or leased in Phorge (phd will run them), or phd
    finished one in the last minute. "recent": phd finished one in the last 15 minutes (`last_delivery`
    says when; tasks cancelled with `bin/worker cancel` do not count). "idle": neither. "unknown": the
    worker tables cannot be read (never reported as idle).

    `live_tasks()` names the requests that still have such a task: those are PHP's to deliver. `watch()`
    (the worker's poll loop) refreshes `latest()`, which delivery threads read.
    """

    def __init__(
        self,
        namespace: str,
        *,
        connection: ConnectionSource | None = None,
        ttl: float = CACHE_SEC,
        recent_sec: int = RECENT_ARCHIVE_SEC,
        clock: Callable[[], float] = time.monotonic,
        masters: Masters | None = None,
    ) -> None:
        self.active_table = qualified(namespace, "worker", "worker_activetask")
        self.archive_table = qualified(namespace, "worker", "worker_archivetask")
        self.recent_sec = recent_sec
        self.masters = masters or Masters.single(namespace, connection or herald_connection)
        self.partitions = self.masters.partitions
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, PhpDelivery] | None = None
        self._unreadable_until = 0.0

    def active_sql(self) -> str:
        # key `taskClass`; "leased" = claimed by a phd worker whose lease has not run out.
        return (
            "SELECT COUNT(*) AS active, "
            "COALESCE(SUM(leaseOwner IS NOT NULL AND leaseExpires > UNIX_TIMESTAMP()), 0) AS leased, "
            f"UNIX_TIMESTAMP() AS now FROM {self.active_table} WHERE taskClass = %(task_class)s"
        )

    def archive_sql(self) -> str:
        # key `key_modified`: archiving inserts the row, so dateModified is the time phd finished it.
        return (
            f"SELECT COUNT(*) AS archived, MAX(dateModified) AS latest FROM {self.archive_table} "
            "WHERE dateModified >= UNIX_TIMESTAMP() - %(recent)s AND taskClass = %(task_class)s "
            "AND result <> %(cancelled)s"
        )

    def current(self) -> PhpDelivery:
        """The state now, cached a few seconds."""
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self._ttl:
                return self._cached[1]
            state = self._read()
            self._cached = (now, state)
            return state

    def _read(self) -> PhpDelivery:
        route = self.masters.route("worker")
        if (connection := route.source) is None:
            return PhpDelivery.unknown(
                f"Phorge's worker application is on another master ({route.master}) than herald's, which this "
                f"service cannot reach: its {self.active_table} here is an empty copy, so PHP delivery cannot be seen"
            )
        try:
            (counted,) = select(connection, self.active_sql(), {"task_class": WEBHOOK_TASK_CLASS})
        except MasterUnavailable as exc:
            return PhpDelivery.unknown(f"{exc}: PHP delivery cannot be seen")
        except NoAccessError:
            return PhpDelivery.unknown(f"cannot read {self.active_table} (no SELECT grant, or not Phorge's database)")
        active, leased, db_now = int(counted["active"]), int(counted["leased"]), int(counted["now"])
        try:
            (archived,) = select(
                connection,
                self.archive_sql(),
                {"recent": self.recent_sec, "task_class": WEBHOOK_TASK_CLASS, "cancelled": ARCHIVE_RESULT_CANCELLED},
            )
            recent: int | None = int(archived["archived"])
            last: int | None = None if archived["latest"] is None else int(archived["latest"])
        except (NoAccessError, MasterUnavailable):
            recent = last = None
        minutes = self.recent_sec // 60
        parts = [f"{active} HeraldWebhookWorker task(s) queued in Phorge ({leased} leased by phd)"]
        if recent is None:
            parts.append(f"cannot read {self.archive_table}")
        else:
            parts.append(f"{recent} run by phd in the last {minutes} min")
        state: PhpState
        if active or (last is not None and last >= db_now - ACTIVE_ARCHIVE_SEC):
            state = "active"
        elif last is not None:
            state = "recent"
        elif recent is None:
            state = "unknown"
        else:
            state = "idle"
        return PhpDelivery(state, active, leased, recent, last, "; ".join(parts))

    def live_tasks(self, request_phids: Iterable[str]) -> set[str] | None:
        """The requests among these that have a queued or leased HeraldWebhookWorker task (key_object);
        None when the worker tables cannot be read."""
        phids = list(request_phids)
        if self._unreadable_until > self._clock():
            return None
        if not phids:
            return set()
        if (connection := self.masters.route("worker").source) is None:
            return None
        listed, params = in_filter("objectPHID", phids, "request")
        sql = f"SELECT objectPHID FROM {self.active_table} WHERE {listed} AND taskClass = %(task_class)s"
        try:
            rows = select(connection, sql, {"task_class": WEBHOOK_TASK_CLASS, **params})
        except MasterUnavailable:
            return None
        except NoAccessError:
            self._unreadable_until = self._clock() + UNREADABLE_RECHECK_SEC
            return None
        return {text(row["objectPHID"]) for row in rows}
