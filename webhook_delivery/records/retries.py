"""Retry now (default database): an operator made a hook's queued requests that wait on their retry backoff
due at once, after an outage of its receiver.

Phorge's own worker keeps a failed attempt's wait outside the row (its task's lease, 300 s), and its rows
stay as the attempt wrote them: `queued`, `fail`, the attempt's time. Here the wait is read from the row
(phorge.herald.next_due), and any write that made the row due at once would move its failure out of the
breaker's window (lastRequestEpoch) or out of the breaker's count (lastRequestResult): the breaker would
close without a success. So Retry now writes nothing of Phorge's: it is an order kept here, which every
worker reads at its heartbeat, that failed attempts of the hook made at or before `failed_up_to` (Phorge's
clock) wait no backoff (phorge.herald.retry_wait). The breaker, the hook's lock (one call at a time), the
claim and the result writes are as always: a success writes `okay` over that row's failure, as Phorge's
does. An order lapses when Phorge's own rule would make those requests due anyway (`lapses_at`, the
moment plus the retry backoff); one row per hook, raised by each new order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from django.db import DatabaseError, IntegrityError, transaction

from .models import RetryOrder

logger = logging.getLogger(__name__)

CLOCK_SLACK_SEC = 60  # an order is read a minute past its lapse: hosts' clocks differ, and it then changes nothing


def order(hook_phid: str, *, failed_up_to: int, lapses_at: int, asked_by: str) -> RetryOrder:
    """The hook's order, made or raised to cover failures up to `failed_up_to`. Raises DatabaseError."""
    now = datetime.now(UTC)
    fields = {"failed_up_to": failed_up_to, "lapses_at": lapses_at, "asked_by": asked_by, "asked_at": now}
    try:
        with transaction.atomic(using="default"):
            row, created = RetryOrder.objects.select_for_update().get_or_create(hook_phid=hook_phid, defaults=fields)
            if not created:
                row.failed_up_to = max(row.failed_up_to, failed_up_to)
                row.lapses_at = max(row.lapses_at, lapses_at)
                row.asked_by, row.asked_at = asked_by, now
                row.save()
    except IntegrityError:  # made at the same moment by another worker: raise that one
        return order(hook_phid, failed_up_to=failed_up_to, lapses_at=lapses_at, asked_by=asked_by)
    return row


def in_force(now: float | None = None) -> dict[str, int]:
    """{hook PHID: failed up to} of the orders not lapsed: the workers' one cheap query. Raises DatabaseError."""
    now = time.time() if now is None else now
    found = RetryOrder.objects.filter(lapses_at__gte=int(now) - CLOCK_SLACK_SEC)
    return dict(found.values_list("hook_phid", "failed_up_to"))


class RetryOrders:
    """A worker's view of the orders, read at each heartbeat. When Django's database cannot be read, the last
    read stays in force (the orders lapse by themselves: the window compares each failure with its moment)."""

    def __init__(self) -> None:
        self.current: Mapping[str, int] = {}
        self._failing = False

    def refresh(self) -> Mapping[str, int]:
        try:
            self.current = in_force()
        except DatabaseError:
            if not self._failing:
                logger.warning(
                    "cannot read Retry now orders from Django's database (DATABASE_URL): keeping those last read",
                    extra={"event": "retry.read_failed"},
                )
            self._failing = True
            return self.current
        if self._failing:
            logger.info("Retry now orders read again", extra={"event": "retry.read_again"})
            self._failing = False
        return self.current
