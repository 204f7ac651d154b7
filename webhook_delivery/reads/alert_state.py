"""Reads of the alert state (Django's database) for the dashboard, /api/webhook/health, the metrics and the
watcher's gauges: the pages read it here, never through the watcher."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..alerts.models import KINDS, AlertCondition, AlertNotification, HookLoss


@dataclass(frozen=True)
class ActiveAlert:
    key: str
    kind: str
    hook_phid: str
    hook_name: str
    since: datetime
    entered_at: datetime
    summary: str
    notified_at: datetime | None  # when the first channel carried the "entered" message; None: not yet
    pending_channels: tuple[str, ...]  # channels that still owe the "entered" message

    def as_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "kind": self.kind,
            "hookPHID": self.hook_phid or None,
            "hookName": self.hook_name or None,
            "since": int(self.since.timestamp()),
            "enteredAt": int(self.entered_at.timestamp()),
            "summary": self.summary,
            "notifiedAt": None if self.notified_at is None else int(self.notified_at.timestamp()),
            "pendingChannels": list(self.pending_channels),
        }


def active_alerts() -> list[ActiveAlert]:
    """Every condition active now, oldest first, with when its start was notified (two queries)."""
    rows = list(AlertCondition.objects.filter(active=True).order_by("since", "key")[:500])
    if not rows:
        return []
    sent: dict[tuple[str, int], datetime] = {}
    pending: dict[tuple[str, int], list[str]] = {}
    for note in AlertNotification.objects.filter(key__in=[row.key for row in rows], transition="entered").values(
        "key", "episode", "channel", "sent_at"
    ):
        slot = (note["key"], note["episode"])
        if note["sent_at"] is None:
            pending.setdefault(slot, []).append(note["channel"])
        elif slot not in sent or note["sent_at"] < sent[slot]:
            sent[slot] = note["sent_at"]
    return [
        ActiveAlert(
            key=row.key,
            kind=row.kind,
            hook_phid=row.hook_phid,
            hook_name=row.hook_name,
            since=row.since,
            entered_at=row.entered_at,
            summary=row.summary,
            notified_at=sent.get((row.key, row.episode)),
            pending_channels=tuple(sorted(pending.get((row.key, row.episode), []))),
        )
        for row in rows
    ]


def active_counts() -> dict[str, int]:
    """Active conditions by kind."""
    return {
        str(row["kind"]): int(row["n"])
        for row in AlertCondition.objects.filter(active=True).values("kind").annotate(n=Count("id"))
    }


def lost_totals() -> dict[str, int]:
    """Requests per hook PHID that Phorge's collection deleted undelivered, in all (hooks with none omitted)."""
    return {row.hook_phid: row.lost_total for row in HookLoss.objects.filter(lost_total__gt=0)}


def lost_total(hook_phid: str) -> int:
    row = HookLoss.objects.filter(hook_phid=hook_phid).first()
    return 0 if row is None else row.lost_total


def oldest_unsent() -> datetime | None:
    """When the oldest notification still waiting for its channel was made (a channel is down)."""
    value = AlertNotification.objects.filter(sent_at__isnull=True).aggregate(oldest=Min("created_at"))["oldest"]
    return value if isinstance(value, datetime) else None


def condition_families() -> Iterator[Metric]:
    """For the web process's own registry, from Django's database (raises DatabaseError when it is
    unavailable): conditions active by kind, queued requests near Phorge's collection per hook (as the
    watcher last counted them), and requests lost to it per hook, in all."""
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
