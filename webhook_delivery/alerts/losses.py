"""Requests Phorge's garbage collection deleted before they were delivered: noticed, counted once however
many watchers run, and told as an event (LOST)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import F

from ..reads import watching
from ..reads.health import QueueHealth
from ..records.models import DeliveryAttempt
from . import messages, metrics
from .config import AlertConfig
from .messages import HookRef, Links, Message
from .models import HookLoss, WatchedRequest

logger = logging.getLogger("webhook_delivery.alerts.watcher")

WATCH_LIMIT = 10_000  # queued requests near collection remembered per pass
LOSS_TOLERANCE_SEC = 300  # Phorge's collector runs on its host's clock, ours on the database's

# (key, kind, episode, transition, message): how a loss is told, once per channel
Notify = Callable[[str, str, int, str, Message], None]


@dataclass(frozen=True)
class Loss:
    hook_phid: str
    hook_name: str
    request_phids: tuple[str, ...]
    first_id: int
    oldest: int
    newest: int


class Losses:
    def __init__(self, config: AlertConfig, owner: str) -> None:
        self.config = config
        self.owner = owner

    def observe(self, health: QueueHealth, retention: int) -> list[Loss]:
        """Remember queued requests close to collection; those gone since, undelivered, were collected.

        Reads: one range of key_ratelimit (the pending slice, dateCreated filtered there) and, for the
        remembered rows missing from it, one primary-key lookup per 500. Exact: a missing row counts only
        if it was queued at last sight, no attempt of ours sent it, and it was old enough to be collected;
        and only the watcher whose claim UPDATE marked it counts it.
        """
        names = {hook.phid: hook.name for hook in health.hooks}
        edge = health.now - retention + max(self.config.loss_margin_sec, int(10 * self.config.interval_sec))
        near = watching.queued_near_collection([hook.phid for hook in health.hooks if hook.queued], edge, WATCH_LIMIT)
        seen = {row.id for row in near}
        if near:
            WatchedRequest.objects.bulk_create(
                [
                    WatchedRequest(
                        request_id=row.id, request_phid=row.phid, hook_phid=row.hook_phid, date_created=row.date_created
                    )
                    for row in near
                ],
                ignore_conflicts=True,
                batch_size=500,
            )
        absent = list(WatchedRequest.objects.exclude(request_id__in=seen).filter(claimed_by="")[:WATCH_LIMIT])
        if not absent:
            return []
        still = watching.request_statuses([watch.request_id for watch in absent])
        settled = [w.pk for w in absent if w.request_id in still and still[w.request_id] != "queued"]
        missing = [w for w in absent if w.request_id not in still]
        delivered = (
            set(
                DeliveryAttempt.objects.filter(
                    request_phid__in=[w.request_phid for w in missing], status="sent"
                ).values_list("request_phid", flat=True)
            )
            if missing
            else set()
        )
        collectable = health.now - retention + LOSS_TOLERANCE_SEC
        lost = [w for w in missing if w.request_phid not in delivered and w.date_created <= collectable]
        other = [w for w in missing if w not in lost]
        if other:
            logger.info(
                "queued requests near collection disappeared, delivered or deleted by other means (not counted)",
                extra={"event": "alert.watched_gone", "count": len(other)},
            )
        WatchedRequest.objects.filter(pk__in=settled + [w.pk for w in other]).delete()
        if not lost:
            return []
        WatchedRequest.objects.filter(pk__in=[w.pk for w in lost], claimed_by="").update(claimed_by=self.owner)
        mine = list(WatchedRequest.objects.filter(claimed_by=self.owner).order_by("request_id"))
        WatchedRequest.objects.filter(pk__in=[w.pk for w in mine]).delete()
        by_hook: dict[str, list[WatchedRequest]] = {}
        for watch in mine:
            by_hook.setdefault(watch.hook_phid, []).append(watch)
        return [
            Loss(
                hook_phid=phid,
                hook_name=names.get(phid, ""),
                request_phids=tuple(w.request_phid for w in rows),
                first_id=rows[0].request_id,
                oldest=min(w.date_created for w in rows),
                newest=max(w.date_created for w in rows),
            )
            for phid, rows in by_hook.items()
        ]

    def record(self, losses: list[Loss], now: int, health: QueueHealth | None, links: Links, notify: Notify) -> int:
        """Count each loss once (HookLoss, the metric) and tell it; the number of requests counted."""
        counted = 0
        now_dt = datetime.now(UTC)
        for loss in losses:
            count = len(loss.request_phids)
            HookLoss.objects.get_or_create(hook_phid=loss.hook_phid, defaults={"hook_name": loss.hook_name})
            HookLoss.objects.filter(hook_phid=loss.hook_phid).update(
                lost_total=F("lost_total") + count, last_lost_at=now_dt, hook_name=loss.hook_name or F("hook_name")
            )
            total = HookLoss.objects.get(hook_phid=loss.hook_phid).lost_total
            metrics.REQUESTS_LOST.inc(count)
            counted += count
            hook_id = next((h.id for h in health.hooks if h.phid == loss.hook_phid), 0) if health else 0
            facts = messages.Lost(
                HookRef(loss.hook_phid, loss.hook_name, hook_id),
                now,
                loss.request_phids,
                loss.oldest,
                loss.newest,
                total,
            )
            said = messages.lost(facts, links)
            notify(f"lost:{loss.hook_phid}:{loss.first_id}", "lost", 0, "event", said)
            logger.error(
                "queued requests deleted by Phorge's garbage collection before delivery",
                extra={"event": "alert.lost", "hook": loss.hook_phid, "count": count, "lost_total": total},
            )
        return counted
