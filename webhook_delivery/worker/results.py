"""What becomes of a call's result: its write, retried through a database outage while the claim can still
hold, given back as a `Written`; once settled, its counters and log line."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Finish:
    """The decision for a claimed row: the outcome, and the properties text written with it (None: the
    row's properties are left as stored)."""

    outcome: Outcome
    properties: str | None

    def written(self) -> WrittenOutcome:
        return (self.outcome.status, self.outcome.result, self.outcome.attempted, self.properties)


@dataclass(frozen=True)
class NextClaim:
    """A claim of the job's next row made beside its own steps: the backoff the row waits (none under an
    operator's Retry now) and the lock the claim checks."""

    row: RequestRow
    retry_backoff: int
    lock: tuple[str, int] | None


@dataclass(frozen=True)
class ClaimMade:
    """What a claim made beside the job's steps won: the row's version (None: lost), and when (monotonic)."""

    version: int | None
    at: float


@dataclass(frozen=True)
class Written:
    """A row's result as recorded: the version written (None: not written, the row waits out its claim) and,
    when the job's next row was claimed in the same round trip, what that claim won (None: no claim went
    with the write, or its fate is not known)."""

    row: RequestRow
    outcome: Outcome
    version: int | None
    next_claim: ClaimMade | None = None


class Results:
    def __init__(self, store: QueueStore, config: DeliveryConfig, counters: Counters) -> None:
        self.store = store
        self.config = config
        self.counters = counters

    def write(
        self, row: RequestRow, version: int, claimed_at: float, finish: Finish, then: NextClaim | None = None
    ) -> Written:
        """Write the result under the claim won (`version`, at `claimed_at`), retrying through a database outage
        while the claim can still hold. With `then`, the first try claims the job's next row in the same
        round trip; a retry writes alone (the claim's fate unknown: the row's own claim finds out)."""
        give_up = claimed_at + self.config.claim_lease_sec - WRITE_MARGIN_SEC
        delay = 0.2
        while True:
            try:
                written = self._write_once(row, version, finish, then)
                break
            except DatabaseError:
                then = None
                self.counters.record("degraded.result_write_retry")
                if time.monotonic() + delay > give_up:
                    logger.error(
                        "result could not be written before the lease ran out; the request will be retried",
                        extra={"event": "result.unwritten", "request": row.phid},
                    )
                    return Written(row, finish.outcome, None)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        if written.version is None:
            self.counters.record("degraded.claim_lost_before_write")
            logger.warning(
                "claim expired before the result was written",
                extra={"event": "result.claim_expired", "request": row.phid},
            )
        return written

    def _write_once(self, row: RequestRow, version: int, finish: Finish, then: NextClaim | None) -> Written:
        if then is None:
            status, result, attempted, properties = finish.written()
            done = self.store.write_outcome(
                row.id, version, status=status, result=result, attempted=attempted, properties=properties
            )
            return Written(row, finish.outcome, done)
        done, won, known = self.store.write_then_claim(
            (row.id, version),
            finish.written(),
            then.row,
            lease=self.config.claim_lease_sec,
            retry_backoff=then.retry_backoff,
            lock=then.lock,
        )
        return Written(row, finish.outcome, done, ClaimMade(won, time.monotonic()) if known else None)

    def record(self, written: Written) -> None:
        """The settled result's counters and log line."""
        row, outcome = written.row, written.outcome
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
        if written.version is None:
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
