"""Prometheus metrics of the alert watcher, on prometheus_client's default REGISTRY (served by
`watch_webhooks --metrics-port`, or by `deliver_webhooks --metrics-port` when the watcher runs inside it).
For the web process's own registry, active_condition_families() reads the same gauge from the database."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

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
NOTIFICATIONS_GIVEN_UP = Counter(
    "gorge_webhook_alert_notifications_given_up",
    "Alert notifications a channel refused (HTTP 4xx, SMTP 5xx) on every try: dropped so that later ones go out.",
    ["channel"],
)
REQUESTS_LOST = Counter(
    "gorge_webhook_requests_lost_to_collection",
    "Queued requests Phorge's garbage collection deleted before they were delivered (counted once).",
)


def active_condition_families() -> Iterator[Metric]:
    """For the web process's own registry, from Django's database (raises DatabaseError when it is
    unavailable): conditions active by kind, queued requests near Phorge's collection per hook (as the
    watcher last counted them), and requests lost to it per hook, in all."""
    from .models import AlertCondition
    from .selectors import active_counts, lost_totals

    family = GaugeMetricFamily(
        "gorge_webhook_alert_conditions_active", "Alert conditions active now, by kind.", labels=["kind"]
    )
    counts = active_counts()
    for kind in KINDS:
        family.add_metric([kind], counts.get(kind, 0))
    yield family
    near = GaugeMetricFamily(
        "gorge_webhook_requests_near_collection",
        "Queued requests within GORGE_ALERT_GC_HOURS of Phorge's garbage collection, by hook (watcher's count).",
        labels=["hook"],
    )
    for condition in AlertCondition.objects.filter(active=True, kind="collection").only("hook_phid", "detail"):
        count = condition.detail.get("count") if isinstance(condition.detail, dict) else None
        near.add_metric([condition.hook_phid], int(count) if isinstance(count, int) else 0)
    yield near
    lost = CounterMetricFamily(
        "gorge_webhook_requests_lost_to_collection",
        "Queued requests Phorge's garbage collection deleted before they were delivered, by hook.",
        labels=["hook"],
    )
    for hook_phid, total in lost_totals().items():
        lost.add_metric([hook_phid], total)
    yield lost
