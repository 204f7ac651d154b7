"""What becomes of a call's result: its write, retried through a database outage while the claim can still
hold, and once settled, its counters and log line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import DatabaseError

from ..config import DeliveryConfig
from ..phorge.herald import RequestResult, RequestRow, RequestStatus
from ..phorge.outcomes import HOOK_ERROR, SILENT, Outcome
from .metrics import Counters, Event
from .parts import QueueStore
from .store import WrittenOutcome

logger = logging.getLogger(__name__)

WRITE_MARGIN_SEC = 2.0
# What the poison rule writes: failed/none/0, the properties left as stored (errorType and errorCode with them).
UNREADABLE = Outcome(RequestStatus.FAILED, RequestResult.NONE, "hook", "unreadable", attempted=False)


class Results:
    def __init__(self, store: QueueStore, config: DeliveryConfig, counters: Counters) -> None:
        self.store = store
        self.config = config
        self.counters = counters

    def write(
        self,
        row: RequestRow,
        version: int,
        claimed_at: float,
        outcome: WrittenOutcome,
        first: Callable[[RequestRow, int, WrittenOutcome], int | None] | None = None,
    ) -> int | None:
        """Write the outcome (status, result, attempted, properties), retrying through a database outage while
        our claim can still hold; `first`, when given, makes the first try."""
        give_up = claimed_at + self.config.claim_lease_sec - WRITE_MARGIN_SEC
        delay = 0.2
        status, result, attempted, properties = outcome
        while True:
            try:
                if first is not None:
                    attempt, first = first, None
                    written = attempt(row, version, outcome)
                else:
                    written = self.store.write_outcome(
                        row.id, version, status=status, result=result, attempted=attempted, properties=properties
                    )
                if written is None:
                    self.counters.record("degraded.claim_lost_before_write")
                    logger.warning(
                        "claim expired before the result was written",
                        extra={"event": "result.claim_expired", "request": row.phid},
                    )
                return written
            except DatabaseError:
                self.counters.record("degraded.result_write_retry")
                if time.monotonic() + delay > give_up:
                    logger.error(
                        "result could not be written before the lease ran out; the request will be retried",
                        extra={"event": "result.unwritten", "request": row.phid},
                    )
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def record(self, row: RequestRow, outcome: Outcome, written: int | None) -> None:
        if outcome is UNREADABLE:  # said when it was decided, at ERROR
            self.counters.record("deliveries.unreadable")
            return
        event: Event = (
            "deliveries.sent"
            if outcome.status == RequestStatus.SENT
            else "deliveries.retry"
            if outcome.retried
            else "deliveries.failed"
        )
        self.counters.record(event, error_type=outcome.error_type)
        extra = {
            "request": row.phid,
            "hook": row.webhook_phid,
            "status": outcome.status,
            "error_type": outcome.error_type,
            "error_code": outcome.error_code,
        }
        if written is None:
            return
        if outcome.status == RequestStatus.SENT:
            logger.debug("webhook delivered", extra={"event": "delivery.sent", **extra})
        elif outcome.error_type == HOOK_ERROR and outcome.error_code == SILENT:
            # A maintenance window fails the whole backlog: said once by the loop, each request at DEBUG.
            logger.debug(
                "webhook request failed: Phorge is in silent mode", extra={"event": "delivery.silent", **extra}
            )
        else:
            logger.warning("webhook request failed", extra={"event": "delivery.failed", **extra})
