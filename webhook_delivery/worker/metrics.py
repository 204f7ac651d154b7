"""Prometheus metrics of the delivery worker (exported by `deliver_webhooks --metrics-port`), and its
events: each recorded once, into its Prometheus counter and the heartbeat's counts."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import Counter, Gauge, Histogram

from ..version import VERSION

DELIVERIES = Counter(
    "gorge_webhook_deliveries",
    "Processed webhook requests by written outcome (sent, retry, failed) and Phorge error type.",
    ["outcome", "error_type"],
)
ATTEMPT_SECONDS = Histogram(
    "gorge_webhook_attempt_seconds",
    "Duration of one HTTP attempt, redirects included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
)
CLAIMS = Counter(
    "gorge_webhook_claims",
    "Claim compare-and-set results (won, lost), and claims taken back before any call (released).",
    ["result"],
)
BREAKER_SKIPS = Counter("gorge_webhook_breaker_skips", "Hooks skipped for a poll because of the error breaker.")
LOCK_BUSY = Counter("gorge_webhook_lock_busy", "Hooks skipped because another process held Phorge's hook lock.")
HOOKS_IN_BACKOFF = Gauge("gorge_webhook_hooks_in_backoff", "Hooks this worker currently sees in error backoff.")
HOOKS_MISCONFIGURED = Gauge(
    "gorge_webhook_hooks_misconfigured", "Hooks with queued requests that cannot be signed (empty HMAC key)."
)
DEGRADED = Counter(
    "gorge_webhook_degraded_events",
    "Times the worker ran on less than it should (database errors, lost result writes).",
    ["reason"],
)
TRACKED_QUEUED = Gauge(
    "gorge_webhook_worker_tracked_queued", "Queued requests held in this worker's window (bounded, not the backlog)."
)
IN_FLIGHT = Gauge("gorge_webhook_worker_in_flight", "Deliveries this worker has in flight now (one per hook).")
LANE_IN_FLIGHT = Gauge(
    "gorge_webhook_worker_lane_in_flight",
    "Deliveries in flight by lane: hooks answering, new to this worker, or failing (capped share).",
    ["lane"],
)
LEFT_TO_PHP = Counter(
    "gorge_webhook_left_to_php",
    "Requests left to Phorge's own PHP worker (a live HeraldWebhookWorker task, or too young to tell).",
)
PHP_WORKER_ACTIVE = Gauge(
    "gorge_webhook_php_worker_active",
    "Phorge's PHP worker runs HeraldWebhookWorker tasks: 1 yes, 0 no (or only in the last 15 minutes), "
    "-1 unknown (no grant on <ns>_worker).",
)
# Prometheus's convention: always 1, the version in its label (`count by (version)` tells a rolling upgrade).
BUILD_INFO = Gauge("gorge_webhook_build_info", "This process's version, in the label; always 1.", ["version"])
BUILD_INFO.labels(VERSION).set(1)
ATTEMPT_LOG_LOST = Counter(
    "gorge_webhook_attempt_log_lost",
    "Attempts not recorded in the attempt log (Django's database unavailable, or the queue full).",
)

Event = Literal[
    "claims_won",
    "claims_lost",
    "claims_released",
    "deliveries.sent",
    "deliveries.retry",
    "deliveries.failed",
    "deliveries.unreadable",
    "left_to_php",
    "left_to_php.task",
    "left_to_php.young",
    "lock_busy",
    "breaker_skips",
    "degraded.database",
    "degraded.result_write_retry",
    "degraded.claim_lost_before_write",
    "degraded.lock_session_lost",
    "degraded.heartbeat_behind",
]


@dataclass(frozen=True)
class _Feeds:
    """Where one event is counted: a Prometheus counter (with its labels) and the heartbeat's counts."""

    metric: Any  # a prometheus_client Counter, or None: counted in the heartbeat only
    labels: tuple[str, ...]
    counts: tuple[str, ...]


# Each event of the worker, once: deliveries take their Phorge error type as the last label on top.
EVENTS: dict[Event, _Feeds] = {
    "claims_won": _Feeds(CLAIMS, ("won",), ("claims_won",)),
    "claims_lost": _Feeds(CLAIMS, ("lost",), ("claims_lost",)),
    "claims_released": _Feeds(CLAIMS, ("released",), ("claims_released",)),
    "deliveries.sent": _Feeds(DELIVERIES, ("sent",), ("deliveries.sent",)),
    "deliveries.retry": _Feeds(DELIVERIES, ("retry",), ("deliveries.retry",)),
    "deliveries.failed": _Feeds(DELIVERIES, ("failed",), ("deliveries.failed",)),
    "deliveries.unreadable": _Feeds(
        DELIVERIES, ("failed", "unreadable"), ("deliveries.failed", "deliveries.unreadable")
    ),
    "left_to_php": _Feeds(LEFT_TO_PHP, (), ("left_to_php",)),
    "left_to_php.task": _Feeds(None, (), ("left_to_php.task",)),
    "left_to_php.young": _Feeds(None, (), ("left_to_php.young",)),
    "lock_busy": _Feeds(LOCK_BUSY, (), ("lock_busy",)),
    "breaker_skips": _Feeds(BREAKER_SKIPS, (), ("breaker_skips",)),
    "degraded.database": _Feeds(DEGRADED, ("database",), ("degraded.database",)),
    "degraded.result_write_retry": _Feeds(DEGRADED, ("result_write_retry",), ("degraded.result_write_retry",)),
    "degraded.claim_lost_before_write": _Feeds(
        DEGRADED, ("claim_lost_before_write",), ("degraded.claim_lost_before_write",)
    ),
    "degraded.lock_session_lost": _Feeds(DEGRADED, ("lock_session_lost",), ("degraded.lock_session_lost",)),
    "degraded.heartbeat_behind": _Feeds(DEGRADED, ("heartbeat_behind",), ("degraded.heartbeat_behind",)),
}


class Counters:
    """The worker's event counts, shared by the job threads and the main thread (heartbeat, activity line).
    `record()` counts an event in Prometheus and here at once."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self._lock = threading.Lock()
        # labels() takes a lock and builds a key on every call: each counter child is looked up once.
        self._children: dict[tuple[Event, str | None], Any] = {}

    def record(self, event: Event, amount: int = 1, *, error_type: str | None = None) -> None:
        """Count `event` (`error_type`: the Phorge error type of a delivery, its metric's last label)."""
        feeds = EVENTS[event]
        if feeds.metric is not None:
            child = self._children.get((event, error_type))
            if child is None:
                labels = feeds.labels if error_type is None else (*feeds.labels, error_type)
                child = feeds.metric.labels(*labels) if labels else feeds.metric
                self._children[(event, error_type)] = child
            child.inc(amount)
        with self._lock:
            for key in feeds.counts:
                self.values[key] = self.values.get(key, 0) + amount

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.values)
