"""The alert conditions, as a table of small objects: what each observes in one pass, how long it must hold
before it is told (and be clear before its end is told), and what its end says. Their words are in
messages.py; the watcher records the transitions and sends them.

Adding a condition: a class here with `kind`, `observe()` and `ended()`, its entry in CONDITIONS, and its
words in messages.py.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.db import DatabaseError
from django.db.models import Min, Q

from ..config import DeliveryConfig
from ..phorge.config import REQUEST_RETENTION_SEC
from ..phorge.names import ObjectName
from ..reads import phorge_status, watching
from ..reads.health import HookHealth, QueueHealth
from ..reads.object_names import object_names
from ..records import heartbeat
from ..records.heartbeat import WorkerStatus
from ..records.models import DeliveryAttempt
from ..state import PhpDelivery
from . import messages
from .config import AlertConfig
from .messages import HookRef, Links, Message


@dataclass(frozen=True)
class Observation:
    """A condition that holds now. `sustain`: it only keeps an active condition active (hysteresis)."""

    key: str
    kind: str
    since: int
    message: Message
    hook_phid: str = ""
    hook_name: str = ""
    sustain: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Remembered:
    """An active condition as recorded: what its end is told from."""

    key: str
    hook_phid: str
    hook_name: str
    since: int
    detail: Mapping[str, Any]

    def hook(self, health: QueueHealth | None) -> HookHealth | None:
        if health is None:
            return None
        return next((hook for hook in health.hooks if hook.phid == self.hook_phid), None)

    def hook_ref(self, hook: HookHealth | None) -> HookRef:
        hook_id = hook.id if hook is not None else self.detail.get("hook_id")
        return HookRef(self.hook_phid, self.hook_name, hook_id if isinstance(hook_id, int) else 0)


class Pass:
    """What one watcher pass knows: Phorge's queue (None when herald does not answer) and, read once and only
    when a condition asks, the heartbeats, the PHP guard, Phorge's settings and the watcher's own reads. The
    conditions read through it alone, so that a test can hand them another (tests: a pass in memory)."""

    def __init__(
        self, now: int, health: QueueHealth | None, config: AlertConfig, delivery: DeliveryConfig, host_now: datetime
    ) -> None:
        self.now = now
        self.health = health
        self.config = config
        self.delivery = delivery
        self.host_now = host_now
        self.error = ""  # why herald did not answer

    @functools.cached_property
    def links(self) -> Links:
        return Links(self.config.site_url, (phorge_status.phorge_base_uri() or "").rstrip("/"))

    @functools.cached_property
    def workers(self) -> list[WorkerStatus]:
        return heartbeat.workers(self.host_now)

    @functools.cached_property
    def php(self) -> PhpDelivery:
        return phorge_status.php_delivery_state()

    @functools.cached_property
    def retention(self) -> int | None:
        """Seconds Phorge keeps requests (None: forever); its default while its settings cannot be read."""
        resolved = phorge_status.phorge_settings()
        return REQUEST_RETENTION_SEC if resolved is None else resolved.retention.value

    def incidents(self, last_success: Mapping[str, int]) -> dict[str, watching.Incident]:
        return watching.incidents(last_success)

    def last_errors(self, phids: Sequence[str]) -> dict[str, watching.LastError]:
        return watching.last_errors(phids)

    def near_collection(self, phids: Sequence[str], edge: int) -> list[watching.NearCollection]:
        return watching.near_collection(phids, edge)

    def object_names(self, phids: Iterable[str]) -> dict[str, ObjectName]:
        return object_names(phids)

    def first_logged_failures(self, hooks: Sequence[HookHealth]) -> dict[str, int]:
        """The first failed attempt after each hook's last success in this service's attempt log (it
        remembers each attempt; Phorge only each request's last); {} when it cannot be read."""
        logged = Q()
        for hook in hooks:
            logged |= Q(hook_phid=hook.phid, result="fail", started_at__gt=_dt(hook.last_success or 0))
        try:
            rows = DeliveryAttempt.objects.filter(logged).values("hook_phid").annotate(first=Min("started_at"))
            return {row["hook_phid"]: int(row["first"].timestamp()) for row in rows}
        except DatabaseError:
            return {}  # the attempt log is a help here, not a need

    def alive_workers(self) -> list[WorkerStatus]:
        threshold = timedelta(seconds=self.config.worker_dead_sec)
        return [
            worker
            for worker in self.workers
            if worker.beat.stopped is None
            and not worker.beat.stopping
            and self.host_now - worker.last_seen <= threshold
        ]


class Condition(Protocol):
    kind: str

    def hold_sec(self, config: AlertConfig) -> float:
        """How long it must hold before it is told, and be clear before its end is told (0: at once)."""
        ...

    def observe(self, now: Pass) -> list[Observation]: ...

    def ended(self, row: Remembered, now: Pass) -> Message: ...


class AtOnce:
    def hold_sec(self, config: AlertConfig) -> float:
        return 0.0


class TwoPasses:
    """Told once a second pass still sees it, and its end once a second pass no longer does."""

    def hold_sec(self, config: AlertConfig) -> float:
        return config.interval_sec


# -- receivers ---------------------------------------------------------------------------------------


class Receivers(AtOnce):
    """A hook in Phorge's breaker backoff (at once), or failing with no success for GORGE_ALERT_FAILING_MINUTES."""

    kind = "receiver"

    def observe(self, now: Pass) -> list[Observation]:
        health = now.health
        if health is None:
            return []
        troubled = [hook for hook in health.hooks if hook.state in ("failing", "backoff")]
        if not troubled:
            return []
        incidents = now.incidents({hook.phid: hook.last_success or 0 for hook in troubled})
        since = {phid: incident.first for phid, incident in incidents.items()}
        for phid, first in now.first_logged_failures(troubled).items():
            since[phid] = min(since.get(phid, first), first)
        last_errors = now.last_errors([hook.phid for hook in troubled])
        names = now.object_names(error.object_phid for error in last_errors.values())
        found = []
        for hook in troubled:
            start = since.get(hook.phid) or hook.last_failed_attempt or health.now
            incident = incidents.get(hook.phid)
            last = last_errors.get(hook.phid)
            named = names.get(last.object_phid) if last is not None else None
            facts = messages.Failing(
                hook=HookRef(hook.phid, hook.name, hook.id),
                now=health.now,
                since=start,
                last_success=hook.last_success,
                failed=incident.requests if incident else 0,
                errors=incident.errors if incident else (),
                last_error=None if last is None else (last.error_type, last.error_code),
                last_object=None if named is None else (named.name, now.links.phorge_page(named.path)),
                queued=hook.queued,
                due=hook.due,
                in_backoff=hook.in_backoff,
                window_failures=hook.window_failures,
                threshold=health.error_threshold,
                window_sec=health.error_window_sec,
            )
            found.append(
                Observation(
                    key=f"receiver:{hook.phid}",
                    kind=self.kind,
                    since=start,
                    message=messages.failing(facts, now.links),
                    hook_phid=hook.phid,
                    hook_name=hook.name,
                    sustain=not hook.in_backoff and health.now - start < now.config.failing_sec,
                    detail={
                        "hook_id": hook.id,
                        "failed": facts.failed,
                        "backoff": hook.in_backoff,
                        # the most frequent error, to tell a new kind from the same (phorge_tasks.material)
                        "error": f"{facts.errors[0][0]}/{facts.errors[0][1]}"[:80] if facts.errors else "",
                    },
                )
            )
        return found

    def ended(self, row: Remembered, now: Pass) -> Message:
        hook = row.hook(now.health)
        if hook is None:
            ended = "gone"
        elif hook.status == "disabled":
            ended = "disabled"
        elif hook.misconfigured:
            ended = "no key"
        elif hook.last_success and hook.last_success >= row.since:
            ended = "delivers"
        else:
            ended = "no failure"
        facts = messages.FailingOver(
            hook=row.hook_ref(hook),
            now=now.now,
            since=row.since,
            ended=ended,
            last_success=hook.last_success if hook else None,
            queued=hook.queued if hook else 0,
        )
        return messages.failing_over(facts, now.links)


def _dt(epoch: int | float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


# -- Phorge's collection -----------------------------------------------------------------------------


class Collection(AtOnce):
    """A hook's oldest queued request within GORGE_ALERT_GC_HOURS of Phorge's garbage collection."""

    kind = "collection"

    def observe(self, now: Pass) -> list[Observation]:
        health, retention = now.health, now.retention
        if health is None or retention is None:
            return []
        by_phid = {hook.phid: hook for hook in health.hooks if hook.queued}
        if not by_phid:
            return []
        edge = health.now - retention + int(now.config.gc_warning_sec)
        found = []
        for near in now.near_collection(list(by_phid), edge):
            hook = by_phid[near.hook_phid]
            facts = messages.NearCollection(
                HookRef(hook.phid, hook.name, hook.id), health.now, near.requests, near.oldest, retention
            )
            found.append(
                Observation(
                    key=f"collection:{hook.phid}",
                    kind=self.kind,
                    since=near.oldest + retention - int(now.config.gc_warning_sec),
                    message=messages.near_collection(facts, now.links),
                    hook_phid=hook.phid,
                    hook_name=hook.name,
                    detail={"count": near.requests, "deadline": near.oldest + retention, "hook_id": hook.id},
                )
            )
        return found

    def ended(self, row: Remembered, now: Pass) -> Message:
        return messages.near_collection_over(row.hook_ref(row.hook(now.health)), now.config.gc_warning_sec, now.links)


# -- workers -----------------------------------------------------------------------------------------


class NoWorker(AtOnce):
    """Requests due for GORGE_ALERT_WORKER_DEAD_SEC and no worker alive."""

    kind = "no_worker"

    def observe(self, now: Pass) -> list[Observation]:
        health = now.health
        if health is None:
            return []
        due = health.due_now - health.due_held
        oldest = min((h.oldest_due_since for h in health.hooks if not h.held and h.oldest_due_since), default=None)
        if due <= 0 or oldest is None or health.due_basis - oldest < now.config.worker_dead_sec:
            return []  # due for less than the heartbeat threshold: a starting worker has not reported yet
        if now.alive_workers():
            return []
        newest = max(now.workers, key=lambda beat: beat.last_seen, default=None)
        last = None if newest is None else messages.LastWorker(newest.worker_id, newest.last_heard, newest.beat.stopped)
        facts = messages.NoWorker(health.now, due, oldest, last, int(heartbeat.WORKERS_SHOWN_FOR.total_seconds()))
        since = max(oldest, last.heard) if last is not None else oldest
        return [Observation("no_worker", self.kind, since, messages.no_worker(facts, now.links), detail={"due": due})]

    def ended(self, row: Remembered, now: Pass) -> Message:
        alive = tuple(beat.worker_id for beat in now.alive_workers())
        facts = messages.NoWorkerOver(now.now, row.since, alive)
        return messages.no_worker_over(facts, now.links)


class PhpDelivering:
    """Phorge's own PHP worker delivering beside this service, held for GORGE_ALERT_PHP_HOLD_SEC: a lone task
    is not an alert, and neither is the minute after it."""

    kind = "php_delivery"

    def hold_sec(self, config: AlertConfig) -> float:
        return max(config.php_hold_sec, config.interval_sec)

    def observe(self, now: Pass) -> list[Observation]:
        state = now.php
        if state.state != "active":
            return []
        facts = messages.PhpDelivering(now.now, state.active_tasks, state.last_delivery)
        return [
            Observation(
                "php_delivery",
                self.kind,
                int(state.last_delivery or now.now),
                messages.php_delivering(facts, now.links),
                detail={"last_delivery": state.last_delivery},
            )
        ]

    def ended(self, row: Remembered, now: Pass) -> Message:
        last = now.php.last_delivery or row.detail.get("last_delivery")
        return messages.php_delivering_over(
            now.now, int(self.hold_sec(now.config)), last if isinstance(last, int) else None, now.links
        )


# -- the queue as a whole ----------------------------------------------------------------------------


class Stalled(TwoPasses):
    """The oldest due request has waited beyond the stalled threshold (health.lag_thresholds)."""

    kind = "stalled"

    def observe(self, now: Pass) -> list[Observation]:
        health = now.health
        if health is None or health.lag_state != "stalled":
            return []
        age = health.oldest_due_age or 0
        facts = messages.Stalled(health.now, age, health.thresholds.stalled_after, health.due_now - health.due_held)
        return [
            Observation("stalled", self.kind, health.now - age, messages.stalled(facts, now.links), detail={"age": age})
        ]

    def ended(self, row: Remembered, now: Pass) -> Message:
        age = None if now.health is None else now.health.oldest_due_age
        return messages.stalled_over(now.now, row.since, age, now.links)


class Database(TwoPasses):
    """Phorge's herald database does not answer the watcher."""

    kind = "database"

    def observe(self, now: Pass) -> list[Observation]:
        if now.health is not None:
            return []
        return [Observation("database", self.kind, now.now, messages.database_down(now.now, now.error, now.links))]

    def ended(self, row: Remembered, now: Pass) -> Message:
        return messages.database_up(now.now, row.since, now.links)


CONDITIONS: dict[str, Condition] = {
    condition.kind: condition
    for condition in (Database(), Receivers(), NoWorker(), PhpDelivering(), Stalled(), Collection())
}
