"""The worker's eye on Phorge's PHP delivery: the guard read once per poll, the value delivery threads
read, the gauge, and a log line when the state changes."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from django.db import DatabaseError

from ..state import PhpDelivery
from . import metrics

logger = logging.getLogger(__name__)

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
                    "Phorge's PHP worker is also delivering webhooks: stop PHP delivery (see README handover)",
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
