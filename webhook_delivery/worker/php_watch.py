"""The worker's eye on Phorge's PHP delivery: the guard read once per poll, the value delivery threads
read, the gauge, and a log line when the state changes; and, while Phorge's settings say delivery is
delegated to this service, any new request that still gets a PHP task (Phorge's side of the handover is
missing or not in force)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from django.db import DatabaseError

from ..phorge.delegation import Delegation
from ..phorge.herald import RequestRow
from ..state import PhpDelivery, TaskWhileDelegated
from . import metrics
from .metrics import Event

logger = logging.getLogger(__name__)

PHP_TASK_RECHECK_SEC = 15  # PHP's own worker yields a busy hook for 15 s
PHP_YOUNG_SEC = 3
# PHP requests (and phd, until it restarts) that read Phorge's settings before the option was written still
# schedule a task: only a request created this long after delegation was first seen proves the patch missing.
DELEGATION_SETTLE_SEC = 60

_GAUGE_VALUE = {"active": 1, "recent": 0, "idle": 0, "unknown": -1}


class PhpGuard(Protocol):
    """What Phorge's worker tables say (phorge.php_guard.PhpWorkerGuard)."""

    def current(self) -> PhpDelivery: ...
    def live_tasks(self, request_phids: Iterable[str]) -> set[str] | None: ...


class PhpWatch:
    def __init__(self, guard: PhpGuard, delegation: Callable[[], Delegation | None] = lambda: None) -> None:
        self.guard = guard
        self.delegation = delegation  # Phorge's settings in force (phorge.config.PhorgeConfig.delegation)
        self._latest = PhpDelivery.unknown("")
        self._reported: str | None = None
        self._delegated_since: int | None = None  # Phorge's clock when this process first saw "delegated"
        self._task_while_delegated: TaskWhileDelegated | None = None
        self._said_lock = threading.Lock()
        self._said_task_while_delegated = False

    def latest(self) -> PhpDelivery:
        """What the last watch() found (unknown before the first): for delivery threads, no query."""
        return self._latest  # one reference, replaced whole by watch(): no lock needed to read it

    def live_tasks(self, request_phids: Iterable[str]) -> set[str] | None:
        """PhpWorkerGuard.live_tasks: the requests that are PHP's to deliver."""
        return self.guard.live_tasks(request_phids)

    def split(
        self, rows: list[RequestRow], now: int
    ) -> tuple[list[RequestRow] | None, list[tuple[RequestRow, int, Event]]]:
        """While Phorge's own worker still delivers, a request with a live HeraldWebhookWorker task is
        PHP's, and so is one too young for its task to be visible yet (queueCall() saves the row a moment
        before it schedules the task). PHP checks `status` before it takes the hook lock and not again
        inside it, so taking such a row could send it twice. Returns the rows that are ours and those left
        (row, until, the event saying why); ours None without the grant (then every row is ours, as before)."""
        live = self.live_tasks(row.phid for row in rows)
        if live is None:
            return None, []
        self._check_delegated(rows, live, now)
        mine: list[RequestRow] = []
        deferred: list[tuple[RequestRow, int, Event]] = []
        for row in rows:
            if row.phid in live:
                deferred.append((row, now + PHP_TASK_RECHECK_SEC, "left_to_php.task"))
            elif self.latest().delivering and row.date_created > now - PHP_YOUNG_SEC:
                deferred.append((row, row.date_created + PHP_YOUNG_SEC, "left_to_php.young"))
            else:
                mine.append(row)
        return mine, deferred

    def task_while_delegated(self) -> TaskWhileDelegated | None:
        """The last request created while delivery was delegated that was seen with a PHP task."""
        return self._task_while_delegated

    def _check_delegated(self, rows: list[RequestRow], live: set[str], now: int) -> None:
        since = self._delegated_since
        if since is None or not live:
            return
        for row in rows:
            if row.phid in live and row.date_created > since + DELEGATION_SETTLE_SEC:
                self._task_while_delegated = TaskWhileDelegated(row.phid, row.date_created, now)
                with self._said_lock:
                    said, self._said_task_while_delegated = self._said_task_while_delegated, True
                if not said:
                    logger.warning(
                        f"request {row.phid} got a HeraldWebhookWorker task although Phorge's settings say webhook "
                        "delivery is delegated to this service: Phorge's side of the handover is missing or not "
                        "in force (Phorge's PHP worker delivers the requests it has a task for; this service "
                        "leaves them to it). Apply contrib/phorge/gorge-webhook.patch to Phorge, then restart PHP "
                        "and phd (docs/operate/handover.md)",
                        extra={"event": "php.task_while_delegated", "request": row.phid},
                    )
                return

    def _follow_delegation(self, now: int) -> None:
        try:
            delegation = self.delegation()
        except DatabaseError:
            return  # an outage changes nothing Phorge was told
        if delegation is None or delegation.state != "delegated":
            self._delegated_since = None
        elif self._delegated_since is None:
            self._delegated_since = now

    def watch(self, now: int | None = None) -> PhpDelivery:
        """For the poll loop: refresh (the guard caches) what latest() returns, set the gauge, log when the
        state changes; with `now` (Phorge's clock), follow whether Phorge's settings say delegated.

        A database error here reads as "unknown" instead of raising: the loop's own queries notice
        outages and handle them.
        """
        try:
            state = self.guard.current()
        except DatabaseError:
            state = PhpDelivery.unknown("database error while reading Phorge's worker tables")
        if now is not None:
            self._follow_delegation(now)
        delegated = self._delegated_since is not None and self._task_while_delegated is None
        ran = state
        if delegated:  # the tasks phd ran only handed their requests over: no PHP delivery
            state = state.handed_over()
        self._latest = state
        metrics.PHP_WORKER_ACTIVE.set(_GAUGE_VALUE[state.state])
        if state.state != self._reported:
            self._reported = state.state
            extra = {
                "active_tasks": state.active_tasks,
                "leased_tasks": state.leased_tasks,
                "recently_archived": state.recently_archived,
            }
            if state is not ran:
                logger.info(
                    "Phorge's phd ran HeraldWebhookWorker tasks lately although its settings say delivery is "
                    "delegated: with Phorge's side of the handover in force, each only left its request to this "
                    "service, which is no PHP delivery",
                    extra={"event": "php.ran_while_delegated", **extra},
                )
            elif state.state == "active" and delegated:
                logger.warning(
                    "Phorge still runs HeraldWebhookWorker tasks although its settings say delivery is delegated "
                    "to this service: until each task runs or is cancelled its request is left to it; cancel them "
                    "(docs/operate/handover.md, step 3)",
                    extra={"event": "php.seen_delivering", **extra},
                )
            elif state.state == "active":
                logger.warning(
                    "Phorge's PHP worker is also delivering webhooks: stop PHP delivery (docs/operate/handover.md)",
                    extra={"event": "php.seen_delivering", **extra},
                )
            elif state.state == "recent":
                logger.info(
                    "Phorge's PHP worker delivered webhooks in the last 15 minutes, none is queued for it now",
                    extra={"event": "php.delivered_recently", **extra, "last_delivery": state.last_delivery},
                )
            elif state.state == "idle":
                logger.info("Phorge's PHP worker is not delivering webhooks", extra={"event": "php.idle", **extra})
            else:
                logger.info(
                    f"cannot tell whether Phorge's PHP worker delivers webhooks: {state.detail}",
                    extra={"event": "php.unknown", **extra},
                )
        return state
