"""Reads of the attempt log (Django's own database) for the hook and request pages and the JSON health.

Latency percentiles are exact to the millisecond without reading every attempt: the database groups the
window's attempts by rounded duration, so a hook's answer is at most one row per distinct millisecond
(a few hundred in practice, at most the delivery timeout in ms), however many attempts the window holds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count, Q
from django.db.models.functions import Round

from ..phorge.herald import RequestResult, RequestRow, RequestStatus
from ..reads.attempt_digest import HOUR, DeliverySeries, Latency, delivery_series, latency, latency_by_hook
from ..records.models import BreakerEvent, DeliveryAttempt

__all__ = ["DeliverySeries", "Latency", "delivery_series", "latency", "latency_by_hook"]

DAY = timedelta(days=1)
RECENT_ATTEMPTS = 50
BREAKER_EVENTS = 20
TIMELINE = 200
MATCH_SEC = 2  # the worker's clock against the database clock that stamped Phorge's row


@dataclass(frozen=True)
class WindowStats:
    """What the receiver did over one window: HTTP attempts (answered or not), and requests settled
    without a call (a refused URI, a disabled hook...), which say nothing about the receiver."""

    seconds: int
    attempts: int
    succeeded: int
    without_call: int
    latency: Latency

    @property
    def success_rate(self) -> float | None:
        return None if not self.attempts else self.succeeded / self.attempts


@dataclass(frozen=True)
class OutcomeCount:
    result: str
    error_type: str
    error_code: str
    count: int


@dataclass(frozen=True)
class HookHistory:
    hour: WindowStats
    day: WindowStats
    outcomes: list[OutcomeCount]  # over the day, most frequent first
    recent: list[DeliveryAttempt]
    breaker: list[BreakerEvent]
    on_record: int  # attempts of this hook the log holds (retention: days, and a count per hook)
    oldest: datetime | None

    @property
    def windows(self) -> tuple[WindowStats, WindowStats]:
        return self.hour, self.day


def _window(rows: Sequence[tuple[str, float, int]], seconds: int) -> WindowStats:
    histogram: dict[int, int] = defaultdict(int)
    succeeded = without_call = 0
    for result, duration, count in rows:
        if result == RequestResult.NONE:
            without_call += count
            continue
        histogram[round(duration)] += count
        succeeded += count if result == RequestResult.OKAY else 0
    return WindowStats(seconds, sum(histogram.values()), succeeded, without_call, latency(histogram))


def hook_history(hook_phid: str, now: datetime | None = None) -> HookHistory:
    now = now or datetime.now(UTC)
    attempts = DeliveryAttempt.objects.filter(hook_phid=hook_phid)
    day = attempts.filter(started_at__gte=now - DAY)
    grouped = day.annotate(ms=Round("duration_ms")).values("result", "ms")
    counted = grouped.annotate(n=Count("id"), in_hour=Count("id", filter=Q(started_at__gte=now - HOUR)))
    by_duration = [(r["result"], float(r["ms"]), r["n"], r["in_hour"]) for r in counted.order_by()]
    outcomes = day.values("result", "error_type", "error_code").annotate(n=Count("id")).order_by("-n")
    span = attempts.order_by("started_at").values_list("started_at", flat=True)[:1]
    return HookHistory(
        hour=_window([(r, ms, hour) for r, ms, _n, hour in by_duration if hour], int(HOUR.total_seconds())),
        day=_window([(r, ms, n) for r, ms, n, _hour in by_duration], int(DAY.total_seconds())),
        outcomes=[OutcomeCount(o["result"], o["error_type"], o["error_code"], o["n"]) for o in outcomes[:20]],
        recent=list(attempts.order_by("-started_at", "-id")[:RECENT_ATTEMPTS]),
        breaker=list(BreakerEvent.objects.filter(hook_phid=hook_phid).order_by("-entered_at")[:BREAKER_EVENTS]),
        on_record=attempts.count(),
        oldest=next(iter(span), None),
    )


def request_attempts(request_phid: str) -> list[DeliveryAttempt]:
    """The request's attempts, oldest first (a timeline)."""
    return list(DeliveryAttempt.objects.filter(request_phid=request_phid).order_by("started_at", "id")[:TIMELINE])


# -- who wrote Phorge's last result -------------------------------------------------------------------


def last_result_is_ours(row: RequestRow) -> bool | None:
    """Whether an attempt of this service wrote the row's last result (status, result, errorType/Code);
    None when the row holds no result yet (never tried, under a claim, or requeued).

    An attempt with a call is ours when one of ours with the same result ended within MATCH_SEC of
    lastRequestEpoch. A failure without a call leaves lastRequestEpoch = 0 and dates itself in
    dateModified, which the claim and the write may each have pushed a second past the clock.
    """
    settled = row.status != RequestStatus.QUEUED
    if not settled and row.last_result != RequestResult.FAIL:
        return None
    at, early = (row.last_epoch, MATCH_SEC) if row.last_epoch else (row.date_modified, MATCH_SEC + 2)
    latest = datetime.fromtimestamp(at + MATCH_SEC, UTC)
    candidates = (
        DeliveryAttempt.objects.filter(request_phid=row.phid, result=row.last_result, started_at__lte=latest)
        .order_by("-started_at")
        .values_list("started_at", "duration_ms")[:20]
    )
    for started, duration_ms in candidates:
        ended = started.timestamp() + duration_ms / 1000
        if at - early <= ended <= at + MATCH_SEC:
            return True
    return False
