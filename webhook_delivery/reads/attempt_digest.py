"""The attempt log's figures over every hook (Django's own database), kept with the counts (counts.py) so that
no view reads a window of every hook's attempts: the dashboard's chart (attempts per minute over the last
CHART_HOURS) and each hook's latency over the last hour (the health JSON). Both grow with the delivery rate,
not with a page's views.

The chart's minutes are counted once each: a refresh counts again only the minutes an attempt may still be
recorded in (SETTLE_SEC back, the attempt log's writer being up to a delivery behind), and the minutes
since. The latency is computed again at most every LATENCY_SEC.

Latency percentiles are exact to the millisecond without reading every attempt: the database groups the
window's attempts by rounded duration, so a hook's answer is at most one row per distinct millisecond.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import BigIntegerField, Count, Func
from django.db.models.functions import Round

from ..phorge.herald import RequestResult
from ..records.models import DeliveryAttempt

HOUR = timedelta(hours=1)
CHART_HOURS = 6
CHART_STEP_SEC = 60  # one bar per minute: EpochMinute below
LATENCY_SEC = 30
SETTLE_SEC = 120


@dataclass(frozen=True)
class Latency:
    """Nearest-rank percentiles of attempt durations (claim to written outcome), in milliseconds."""

    attempts: int
    p50: int | None = None
    p95: int | None = None
    p99: int | None = None


def latency(histogram: Mapping[int, int]) -> Latency:
    """Percentiles from {duration in ms: attempts}. Pure."""
    total = sum(histogram.values())
    if not total:
        return Latency(0)
    marks = {}
    for name, share in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
        rank, seen = max(1, math.ceil(share * total)), 0
        for value in sorted(histogram):
            seen += histogram[value]
            if seen >= rank:
                marks[name] = value
                break
    return Latency(total, **marks)


def latency_by_hook(
    hook_phids: Sequence[str] | None, now: datetime | None = None, window: timedelta = HOUR
) -> dict[str, Latency]:
    """Each hook's attempt latency over the window (the hooks named: those without attempts have zero; None:
    every hook with attempts)."""
    since = (now or datetime.now(UTC)) - window
    attempts = DeliveryAttempt.objects.filter(started_at__gte=since).exclude(result=RequestResult.NONE)
    if hook_phids is not None:
        attempts = attempts.filter(hook_phid__in=list(hook_phids))
    rows = attempts.annotate(ms=Round("duration_ms")).values_list("hook_phid", "ms").annotate(n=Count("id")).order_by()
    histograms: dict[str, dict[int, int]] = {phid: {} for phid in hook_phids or ()}
    for hook, ms, n in rows:
        histograms.setdefault(hook, {})[round(float(ms))] = n
    return {phid: latency(histogram) for phid, histogram in histograms.items()}


# -- the dashboard chart ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliverySeries:
    """This service's HTTP attempts per minute by result, from the attempt log: a retried request counts
    each attempt, so a failure stays drawn after the request is sent. Phorge's PHP worker is not in it."""

    start: int  # epoch of the first bucket
    step: int
    sent: tuple[int, ...]
    failed: tuple[int, ...]

    @property
    def hours(self) -> int:
        return len(self.sent) * self.step // 3600


class EpochMinute(Func):
    """Minutes since the epoch of a UTC datetime, computed by the database itself (Django's TruncMinute calls a
    Python function per row on SQLite, holding a worker's GIL)."""

    output_field = BigIntegerField()
    template = "TIMESTAMPDIFF(MINUTE, '1970-01-01 00:00:00', %(expressions)s)"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="(CAST(strftime('%%%%s', %(expressions)s) AS INTEGER) / 60)", **extra
        )

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="FLOOR(EXTRACT(EPOCH FROM %(expressions)s) / 60)::bigint", **extra
        )


def _minutes(since: int) -> dict[int, tuple[int, int]]:
    """{minute: (sent, failed)} of the attempts from `since` on: one grouped query on the (started_at,
    result) index, at most two rows per minute."""
    rows = (
        DeliveryAttempt.objects.filter(
            started_at__gte=datetime.fromtimestamp(since, UTC),
            result__in=[RequestResult.OKAY, RequestResult.FAIL],
        )
        .annotate(minute=EpochMinute("started_at"))
        .values_list("result", "minute")
        .annotate(n=Count("id"))
        .order_by()
    )
    found: dict[int, list[int]] = {}
    for result, minute, n in rows:
        counts = found.setdefault(int(minute), [0, 0])
        counts[0 if result == RequestResult.OKAY else 1] += n
    return {minute: (sent, failed) for minute, (sent, failed) in found.items()}


def series_of(minutes: Mapping[int, tuple[int, int]], now: int, *, hours: int = CHART_HOURS) -> DeliverySeries:
    buckets = hours * 3600 // CHART_STEP_SEC
    first = now // CHART_STEP_SEC - buckets + 1
    sent, failed = [0] * buckets, [0] * buckets
    for minute, (ok, fail) in minutes.items():
        if 0 <= minute - first < buckets:
            sent[minute - first], failed[minute - first] = ok, fail
    return DeliverySeries(first * CHART_STEP_SEC, CHART_STEP_SEC, tuple(sent), tuple(failed))


def delivery_series(now: int, *, hours: int = CHART_HOURS) -> DeliverySeries:
    """The chart read whole from the attempt log (the digest reads only its newest minutes)."""
    first = now // CHART_STEP_SEC - hours * 3600 // CHART_STEP_SEC + 1
    return series_of(_minutes(first * CHART_STEP_SEC), now, hours=hours)


# -- kept between refreshes ------------------------------------------------------------------------------


@dataclass
class Digest:
    now: int = 0  # the time of the last refresh (Phorge's database clock, as the counts')
    minutes: dict[int, tuple[int, int]] = field(default_factory=dict)
    latency_at: int = 0  # when the latency was computed
    latency: dict[str, Latency] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "minutes": {str(minute): list(counts) for minute, counts in sorted(self.minutes.items())},
            "latency_at": self.latency_at,
            "latency": {hook: [v.attempts, v.p50, v.p95, v.p99] for hook, v in sorted(self.latency.items())},
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Digest:
        if not value:
            return cls()
        return cls(
            now=int(value["now"]),
            minutes={int(minute): (int(a), int(b)) for minute, (a, b) in value["minutes"].items()},
            latency_at=int(value["latency_at"]),
            latency={hook: Latency(*figures) for hook, figures in value["latency"].items()},
        )

    @property
    def series(self) -> DeliverySeries:
        return series_of(self.minutes, self.now)


def refresh_digest(previous: Digest, now: int, *, latency_every: int = LATENCY_SEC) -> Digest:
    """The digest at `now`: the chart's minutes that may have changed counted again, the rest kept."""
    first = now // CHART_STEP_SEC - CHART_HOURS * 3600 // CHART_STEP_SEC + 1
    since = first if not previous.now else max(first, (previous.now - SETTLE_SEC) // CHART_STEP_SEC)
    kept = {minute: counts for minute, counts in previous.minutes.items() if first <= minute < since}
    minutes = {**kept, **_minutes(since * CHART_STEP_SEC)}
    digest = Digest(now, minutes, previous.latency_at, previous.latency)
    if now - previous.latency_at >= latency_every:
        digest.latency = latency_by_hook(None, datetime.fromtimestamp(now, UTC))
        digest.latency_at = now
    return digest
