"""Prometheus metrics of the delivery worker (exported by `deliver_webhooks --metrics-port`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
CLAIMS = Counter("gorge_webhook_claims", "Claim compare-and-set results.", ["result"])
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
ATTEMPT_LOG_LOST = Counter(
    "gorge_webhook_attempt_log_lost",
    "Attempts not recorded in the attempt log (Django's database unavailable, or the queue full).",
)
