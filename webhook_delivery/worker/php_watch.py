"""The worker's eye on Phorge's PHP delivery: the guard read once per poll, the value delivery threads
read, the gauge, and a log line when the state changes."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from django.db import DatabaseError

from ..phorge.herald import RequestRow
from ..state import PhpDelivery
from . import metrics
from .metrics import Event

logger = logging.getLogger(__name__)

PHP_TASK_RECHECK_SEC = 15  # PHP's own worker yields a busy hook for 15 s
PHP_YOUNG_SEC = 3

_GAUGE_VALUE = {"active": 1, "recent": 0, "idle": 0, "unknown": -1}


class PhpGuard(Protocol):
    """What Phorge's worker tables say (phorge.php_guard.PhpWorkerGuard)."""

    def current(self) -> PhpDelivery: ...
    def live_tasks(self, request_phids: Iterable[str]) -> set[str] | None: ...


class PhpWatch:
    def __init__(self, guard: PhpGuard) -> None:
        self.guard = guard
        self._latest = PhpDelivery.unknown("")
        self._reported: str | None = None

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

    def watch(self) -> PhpDelivery:
        """For the poll loop: refresh (the guard caches) what latest() returns, set the gauge, log when the
        state changes.

        A database error here reads as "unknown" instead of raising: the loop's own queries notice
        outages and handle them.
        """
        try:
            state = self.guard.current()
        except DatabaseError:
            state = PhpDelivery.unknown("database error while reading Phorge's worker tables")
        self._latest = state
        metrics.PHP_WORKER_ACTIVE.set(_GAUGE_VALUE[state.state])
        if state.state != self._reported:
            self._reported = state.state
            extra = {
                "active_tasks": state.active_tasks,
                "leased_tasks": state.leased_tasks,
                "recently_archived": state.recently_archived,
            }
            if state.state == "active":
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
