"""Reads of the alert state (Django's database) for the dashboard, /api/webhook/health, the metrics and the
watcher's gauges: the pages read it here, never through the watcher."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..alerts.models import KINDS, AlertChannel, AlertCondition, AlertNotification, AlertTask, HookLoss
from ..wording import split_links


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
    task_monogram: str = ""  # the episode's task in Phorge (T123), once it is made
    task_uri: str = ""

    @property
    def summary_text(self) -> str:
        return split_links(self.summary)[0]

    @property
    def summary_parts(self) -> list[tuple[str, bool]]:
        """The summary's text in pieces, each with whether it is quoted (between backticks: Phorge's text,
        which holds none of its own, messages.plain), for a page to show the quoted ones as code."""
        text = self.summary_text
        if text.count("`") % 2:
            return [(text, False)]
        return [(piece, index % 2 == 1) for index, piece in enumerate(text.split("`")) if piece]

    @property
    def summary_links(self) -> list[str]:
        """The summary's links (this service's pages, Phorge's pages of the hook and the object): http(s) only."""
        return [link for link in split_links(self.summary)[1] if link.startswith(("https://", "http://"))]

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
            "task": {"monogram": self.task_monogram, "uri": self.task_uri} if self.task_monogram else None,
        }


def active_alerts() -> list[ActiveAlert]:
    """Every condition active now, oldest first, with when its start was notified and its Phorge task (three
    queries)."""
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
    tasks = {
        (task.key, task.episode): task
        for task in AlertTask.objects.filter(key__in=[row.key for row in rows]).exclude(task_id=None)
    }
    found = []
    for row in rows:
        task = tasks.get((row.key, row.episode))
        found.append(
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
                task_monogram=task.monogram if task is not None else "",
                task_uri=task.uri if task is not None and task.uri.startswith(("https://", "http://")) else "",
            )
        )
    return found


@dataclass(frozen=True)
class ChannelState:
    """An alert channel as the watchers last left it, by kind and host (never its URL or token)."""

    name: str
    kind: str  # email, chat, phorge, apprise
    host: str  # for apprise, the URL's scheme and host (json://127.0.0.1, slack://)
    last_sent_at: datetime | None
    last_failed_at: datetime | None
    failing_since: datetime | None
    last_error: str
    pending: int  # notifications waiting for it

    @property
    def shown(self) -> str:
        return {"email": "e-mail", "chat": "chat webhook", "phorge": "Phorge tasks"}.get(self.kind, self.host)

    def as_json(self) -> dict[str, object]:
        def epoch(value: datetime | None) -> int | None:
            return None if value is None else int(value.timestamp())

        return {
            "channel": self.name,
            "kind": self.kind,
            "host": self.host or None,
            "lastSentAt": epoch(self.last_sent_at),
            "lastFailedAt": epoch(self.last_failed_at),
            "failingSince": epoch(self.failing_since),
            "lastError": self.last_error or None,
            "pending": self.pending,
        }


def _kind_and_host(name: str) -> tuple[str, str]:
    if name.startswith("apprise:"):
        return "apprise", name.removeprefix("apprise:").rsplit("#", 1)[0]
    return name, ""


def channel_states() -> list[ChannelState]:
    """Every channel a watcher has sent on, by name (two queries)."""
    waiting = {
        str(row["channel"]): int(row["n"])
        for row in AlertNotification.objects.filter(sent_at__isnull=True).values("channel").annotate(n=Count("id"))
    }
    found = []
    for row in AlertChannel.objects.order_by("name")[:100]:
        kind, host = _kind_and_host(row.name)
        found.append(
            ChannelState(
                name=row.name,
                kind=kind,
                host=host,
                last_sent_at=row.last_sent_at,
                last_failed_at=row.last_failed_at,
                failing_since=row.failing_since,
                last_error=row.last_error,
                pending=waiting.get(row.name, 0),
            )
        )
    return found


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
