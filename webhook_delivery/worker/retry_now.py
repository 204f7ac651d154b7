"""Retry now, for the worker that carries out the dashboard's and for `requeue_webhooks --queued`: which of a
hook's queued requests wait on their retry backoff now, and the order that makes those due at once
(records/retries.py). Nothing of Phorge's is written: the workers read the order, and the window, the job and
the claim let the failures it covers go without their backoff (phorge.herald.retry_wait); the breaker is
left as it is."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DeliveryConfig
from ..phorge.herald import Hook, RequestRow, backoff_until, utc
from ..records import retries
from .store import Store

COUNTED = 10_001  # requests counted, at most, for what is said


@dataclass(frozen=True)
class Waiting:
    """A hook's requests in their retry backoff at `now` (oldest failure first, at most COUNTED), failed up to
    `now`, and when its breaker closes (None: it is closed)."""

    hook: Hook
    now: int
    rows: list[RequestRow]
    breaker_until: int | None


class RetryNow:
    def __init__(self, store: Store, config: DeliveryConfig) -> None:
        self.store = store
        self.config = config

    def waiting(self, hook: Hook, *, now: int, up_to: int | None = None) -> Waiting:
        config = self.config
        up_to = now if up_to is None else min(up_to, now)
        after = now - config.retry_backoff_sec
        rows = self.store.waiting_retries(hook.phid, after=after, up_to=up_to, limit=COUNTED)
        epochs = self.store.recent_failures(hook.phid, window=config.error_backoff_sec, limit=config.error_threshold)
        closes = backoff_until(epochs, config.error_threshold, config.error_backoff_sec)
        return Waiting(hook, up_to, rows, closes)

    def order(self, waiting: Waiting, *, asked_by: str) -> None:
        """The hook's failures up to `waiting.now` due at once, for every worker. Raises DatabaseError."""
        retries.order(
            waiting.hook.phid,
            failed_up_to=waiting.now,
            lapses_at=waiting.now + self.config.retry_backoff_sec,
            asked_by=asked_by,
        )


def said(waiting: Waiting, config: DeliveryConfig, *, name: str = "") -> str:
    """What a Retry now did, in words: how many, of what, and the breaker when it is open."""
    count = len(waiting.rows)
    counted = f"{count}" if count < COUNTED else f"{COUNTED - 1}+"
    text = (
        f"{counted} request{'' if count == 1 else 's'}{name} that failed up to {utc(waiting.now)} due at once: "
        "workers send them one at a time, oldest first"
    )
    if waiting.breaker_until is not None:
        text += (
            f"; the hook's breaker is open until {utc(waiting.breaker_until)} ({config.error_threshold} failed "
            f"attempts within {config.error_backoff_sec} s): they go then (Retry now does not close the breaker)"
        )
    return text
