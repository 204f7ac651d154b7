"""Prometheus metrics of the alert watcher, on prometheus_client's default REGISTRY (served by
`watch_webhooks --metrics-port`, or by `deliver_webhooks --metrics-port` when the watcher runs inside it).
For the web process's own registry, active_condition_families() reads the same gauge from the database."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import GaugeMetricFamily

KINDS = ("receiver", "collection", "no_worker", "php_delivery", "stalled", "database")

CONDITIONS_ACTIVE = Gauge(
    "gorge_webhook_alert_conditions_active",
    "Alert conditions active now, by kind (as this watcher last saw).",
    ["kind"],
)
NOTIFICATIONS_SENT = Counter(
    "gorge_webhook_alert_notifications_sent", "Alert digests sent, by channel (email, chat).", ["channel"]
)
NOTIFICATIONS_FAILED = Counter(
    "gorge_webhook_alert_notifications_failed",
    "Alert digests that could not be sent (retried at the next pass), by channel.",
    ["channel"],
)
REQUESTS_LOST = Counter(
    "gorge_webhook_requests_lost_to_collection",
    "Queued requests Phorge's garbage collection deleted before they were delivered (counted once).",
)


def active_condition_families() -> Iterator[GaugeMetricFamily]:
    """gorge_webhook_alert_conditions_active{kind} read from Django's database, for a collector of its own
    registry (the web /metrics); raises DatabaseError when that database is unavailable."""
    from .selectors import active_counts

    family = GaugeMetricFamily(
        "gorge_webhook_alert_conditions_active", "Alert conditions active now, by kind.", labels=["kind"]
    )
    counts = active_counts()
    for kind in KINDS:
        family.add_metric([kind], counts.get(kind, 0))
    yield family
