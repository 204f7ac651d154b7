"""Prometheus metrics of the web process: the queue as Phorge's tables show it, computed at scrape time.

The worker's own counters live in metrics.py and are served by `deliver_webhooks --metrics-port`; these
gauges use a registry of their own so the two never mix. No per-hook labels, no URIs, no keys.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from ..reads import alert_state, phorge_status, queue
from ..reads.health import QueueHealth
from ..records import heartbeat
from ..version import VERSION

logger = logging.getLogger(__name__)


CACHE_SEC = 5.0


class QueueCollector:
    """Reads Phorge's tables at most once per CACHE_SEC, however often /metrics is scraped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] >= CACHE_SEC:
                self._cached = (time.monotonic(), [build_info(), *self._read()])
            return iter(self._cached[1])

    def forget(self) -> None:
        with self._lock:
            self._cached = None

    @staticmethod
    def _counts(health: QueueHealth) -> Iterator[Metric]:
        """The tally's counts, as of its last refresh (none when they cannot be read), and how old they are."""
        if not health.counts_known:
            return
        yield GaugeMetricFamily(
            "gorge_webhook_queue_counts_age_seconds",
            "How long ago the counts below were taken (Phorge's database clock): they are exact as of then.",
            value=health.counted_ago or 0,
        )
        depth = GaugeMetricFamily(
            "gorge_webhook_queue_requests", "Webhook requests retained by Phorge, by status.", labels=["status"]
        )
        for status, count in (("queued", health.queued), ("sent", health.sent), ("failed", health.failed)):
            depth.add_metric([status], count)
        yield depth
        yield GaugeMetricFamily(
            "gorge_webhook_queue_due_requests",
            "Queued requests due for delivery (as of the counts).",
            value=health.due_now,
        )
        yield GaugeMetricFamily(
            "gorge_webhook_queue_held_requests",
            "Due requests held back on purpose: their hook is in error backoff or has no HMAC key.",
            value=health.due_held,
        )
        yield GaugeMetricFamily(
            "gorge_webhook_queue_oldest_due_age_seconds",
            "How long the oldest deliverable due request has waited (0 when none is due).",
            value=health.oldest_due_age or 0,
        )

    def _read(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("gorge_webhook_queue_up", "1 when this scrape could read Phorge's herald tables.")
        try:
            health = queue.queue_health(settings.GORGE_WEBHOOK)
        except DatabaseError as exc:
            logger.warning(
                "metrics scrape: Phorge's herald database unavailable",
                extra={"event": "metrics.phorge_unavailable", "error": type(exc).__name__},
            )
            up.add_metric([], 0)
            yield up
        else:
            up.add_metric([], 1)
            yield up
            yield from self._counts(health)
            yield GaugeMetricFamily(
                "gorge_webhook_queue_hooks_in_backoff",
                "Hooks in Phorge's error backoff (too many failed attempts in the window).",
                value=health.hooks_in_backoff,
            )
            yield GaugeMetricFamily(
                "gorge_webhook_queue_hooks_misconfigured",
                "Hooks with an empty HMAC key: their requests stay queued.",
                value=health.hooks_misconfigured,
            )
        try:
            alive = sum(1 for worker in heartbeat.workers() if worker.alive)
        except DatabaseError:
            pass
        else:
            yield GaugeMetricFamily(
                "gorge_webhook_workers_alive",
                f"deliver_webhooks processes with a heartbeat in the last {heartbeat.WORKER_ALIVE_SEC} s.",
                value=alive,
            )
        php = GaugeMetricFamily(
            "gorge_webhook_php_delivery",
            "1 for the current state of Phorge's own PHP webhook worker (active means two deliverers).",
            labels=["state"],
        )
        current = phorge_status.php_delivery_state().state
        for state in ("idle", "active", "recent", "unknown"):
            php.add_metric([state], 1 if state == current else 0)
        yield php
        try:
            yield from list(alert_state.condition_families())
        except DatabaseError:
            logger.warning(
                "metrics scrape: Django's database unavailable for the alert metrics",
                extra={"event": "metrics.site_unavailable"},
            )


def build_info() -> Metric:
    """The web process's version, as the worker's own endpoint gives the worker's (Prometheus's convention)."""
    info = GaugeMetricFamily(
        "gorge_webhook_build_info", "This process's version, in the label; always 1.", labels=["version"]
    )
    info.add_metric([VERSION], 1)
    return info


REGISTRY = CollectorRegistry(auto_describe=False)
COLLECTOR = QueueCollector()
REGISTRY.register(COLLECTOR)
