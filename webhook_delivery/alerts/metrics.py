"""Prometheus metrics of the alert watcher, on prometheus_client's default REGISTRY (served by
`watch_webhooks --metrics-port`, or by `deliver_webhooks --metrics-port` when the watcher runs inside it).
For the web process's own registry, reads/alert_state.condition_families() reads the same gauge from the
database."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

CONDITIONS_ACTIVE = Gauge(
    "gorge_webhook_alert_conditions_active",
    "Alert conditions active now, by kind (as this watcher last saw).",
    ["kind"],
)
NOTIFICATIONS_SENT = Counter(
    "gorge_webhook_alert_notifications_sent",
    "Alert digests sent (task operations, for phorge), by channel (email, chat, phorge, apprise:<scheme>://<host>#n).",
    ["channel"],
)
NOTIFICATIONS_FAILED = Counter(
    "gorge_webhook_alert_notifications_failed",
    "Alert digests that could not be sent (retried at the next pass), by channel.",
    ["channel"],
)
NOTIFICATIONS_GIVEN_UP = Counter(
    "gorge_webhook_alert_notifications_given_up",
    "Alert notifications a channel refused (HTTP 4xx, SMTP 5xx) on every try: dropped so that later ones go out.",
    ["channel"],
)
REQUESTS_LOST = Counter(
    "gorge_webhook_requests_lost_to_collection",
    "Queued requests Phorge's garbage collection deleted before they were delivered (counted once).",
)
CONDUIT_ERRORS = Counter(
    "gorge_webhook_alert_conduit_errors",
    "Conduit calls of the phorge channel that failed, by Phorge's error code (ERR-INVALID-AUTH, ...), or "
    "unreachable, http (an HTTP error status), not_conduit (an answer that is not Conduit's).",
    ["code"],
)
