"""The alert watcher: reads Phorge's tables (read only, through webhook_delivery.web.selectors), decides which
conditions hold, records each start and end once in Django's database, and sends one digest per channel.

Runs as `manage.py watch_webhooks`, or as a daemon thread of `deliver_webhooks`:

    stop = threading.Event()
    threading.Thread(target=Watcher().run_forever, args=(stop,), name="alert-watcher", daemon=True).start()

Any number of watchers may run: a condition's start (and end) is won by one conditional UPDATE (or one
INSERT on its unique key), and a channel is sent on by the one watcher holding its lease. A channel that
fails (SMTP down, a chat URL that hangs) is retried at the next pass, logged once per outage, and never
holds up the other channel: both are sent from threads, each bounded by the channel timeout.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import F, Min, Q

from ..config import PHORGE_ALIAS, DeliveryConfig
from ..phorge.config import REQUEST_RETENTION_SEC
from ..records import heartbeat
from ..records.models import DeliveryAttempt
from ..web import phorge_status, selectors
from ..web.health import HookHealth, QueueHealth
from ..web.replica import on_master
from . import metrics
from .channels import SENDERS, ChannelError
from .config import AlertConfig
from .models import AlertChannel, AlertCondition, AlertNotification, HookLoss, WatchedRequest

logger = logging.getLogger(__name__)

DIGEST_LINES = 200  # a digest lists at most this many entries, then how many more there are
WATCH_LIMIT = 10_000  # queued requests near collection remembered per pass
LOSS_TOLERANCE_SEC = 300  # Phorge's collector runs on its host's clock, ours on the database's
LOST_PHIDS_SHOWN = 10


def _dt(epoch: int | float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _when(epoch: int | float | None) -> str:
    return "never" if not epoch else _dt(epoch).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


@dataclass(frozen=True)
class Observation:
    """A condition that holds now. `sustain`: it only keeps an active condition active (hysteresis)."""

    key: str
    kind: str
    since: int
    summary: str
    hook_phid: str = ""
    hook_name: str = ""
    sustain: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Loss:
    hook_phid: str
    hook_name: str
    request_phids: tuple[str, ...]
    first_id: int
    oldest: int
    newest: int


@dataclass
class Evaluation:
    now: int
    observations: dict[str, Observation]
    kinds: set[str]  # kinds evaluated this pass: only those may recover
    health: QueueHealth | None = None
    losses: list[Loss] = field(default_factory=list)


@dataclass
class TickResult:
    entered: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    lost: int = 0
    sent: dict[str, int] = field(default_factory=dict)  # channel: notifications carried
    failed: dict[str, str] = field(default_factory=dict)  # channel: safe error


@dataclass
class _Send:
    ids: list[int]
    thread: threading.Thread
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class Watcher:
    def __init__(
        self,
        config: AlertConfig | None = None,
        delivery: DeliveryConfig | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        self.config: AlertConfig = config or settings.GORGE_ALERT
        self.delivery: DeliveryConfig = delivery or settings.GORGE_WEBHOOK
        self.owner = owner or f"{socket.gethostname()[:150]}:{os.getpid()}:{secrets.token_hex(3)}"
        self._sending: dict[str, _Send] = {}
        self.senders: dict[str, Callable[[AlertConfig, str, str], None]] = dict(SENDERS)

    # -- the loop ------------------------------------------------------------------------------------

    def run_forever(self, stop_event: threading.Event) -> None:
        """Pass after pass until stop_event is set; a failed pass is logged and the next one runs."""
        logger.info(
            "alert watcher started",
            extra={"channels": ",".join(self.config.channels) or "none", "interval_sec": self.config.interval_sec},
        )
        failing = False
        while not stop_event.is_set():
            try:
                self.tick()
                if failing:
                    logger.info("alert watcher: Django's database answers again")
                failing = False
            except DatabaseError as exc:
                if not failing:
                    logger.error("alert watcher: Django's database unavailable", extra={"error": type(exc).__name__})
                failing = True
            except Exception:
                logger.exception("alert watcher: pass failed")
            finally:
                self._close_connections()
            stop_event.wait(self.config.interval_sec)
        logger.info("alert watcher stopped")

    @staticmethod
    def _close_connections() -> None:
        # Connections are per thread: inside deliver_webhooks this closes the watcher thread's own only.
        for alias in ("default", PHORGE_ALIAS):
            try:
                connections[alias].close_if_unusable_or_obsolete()
            except DatabaseError:
                connections[alias].close()

    def tick(self) -> TickResult:
        """One pass: evaluate, record transitions (once, whoever else watches), send the digests."""
        result = TickResult()
        with on_master():  # alerts are decided on herald's master, never on a replica's copy
            evaluation = self.evaluate()
            self._record(evaluation, result)
            self._record_losses(evaluation, result)
        self._update_gauges()
        self._deliver(result)
        return result

    # -- conditions ----------------------------------------------------------------------------------

    def evaluate(self) -> Evaluation:
        try:
            health = selectors.queue_health(self.delivery)
        except DatabaseError as exc:
            now = int(datetime.now(UTC).timestamp())
            summary = (
                f"Phorge's herald database is unreachable from the alert watcher ({type(exc).__name__}): "
                "nothing is delivered and no other condition can be checked"
            )
            return Evaluation(now, {"database": Observation("database", "database", now, summary)}, {"database"})
        now = health.now
        found: dict[str, Observation] = {}
        kinds = {"database", "receiver", "no_worker", "php_delivery", "stalled", "collection"}
        for observation in self._receivers(health):
            found[observation.key] = observation
        resolved = phorge_status.phorge_settings()
        retention = REQUEST_RETENTION_SEC if resolved is None else resolved.retention.value
        losses: list[Loss] = []
        if retention is not None:
            for observation in self._collection(health, retention):
                found[observation.key] = observation
            losses = self._losses(health, retention)
        for single in (self._no_worker(health), self._php(), self._stalled(health)):
            if single is not None:
                found[single.key] = single
        return Evaluation(now, found, kinds, health, losses)

    def _links(self, phid: str, hook_id: int) -> str:
        links = []
        if self.config.site_url:
            links.append(f"{self.config.site_url}/hooks/{phid}/")
        base = phorge_status.phorge_base_uri()
        if base and hook_id:
            links.append(f"{base.rstrip('/')}/herald/webhook/view/{hook_id}/")
        return "".join(f"\n    {link}" for link in links)

    def _hook(self, hook: HookHealth) -> str:
        return f"hook {hook.name!r} ({hook.phid})"

    def _receivers(self, health: QueueHealth) -> Iterable[Observation]:
        troubled = [hook for hook in health.hooks if hook.state in ("failing", "backoff")]
        if not troubled:
            return []
        since = self._failing_since(troubled)
        errors = self._last_errors(troubled)
        found = []
        for hook in troubled:
            start = since.get(hook.phid) or hook.last_failed_attempt or health.now
            failing_for = health.now - start
            error = errors.get(hook.phid)
            what = (
                f"is in Phorge's breaker backoff ({hook.window_failures} failed attempts in the last "
                f"{health.error_window_sec} s, threshold {health.error_threshold})"
                if hook.in_backoff
                else "has been failing"
            )
            summary = (
                f"{self._hook(hook)} {what}; failing since {_when(start)} ({_duration(failing_for)}), "
                f"last success {_when(hook.last_success)}; last error {error or 'unknown'}; "
                f"{hook.queued} queued, {hook.due} due, {hook.failed} failed"
            ) + self._links(hook.phid, hook.id)
            found.append(
                Observation(
                    key=f"receiver:{hook.phid}",
                    kind="receiver",
                    since=start,
                    summary=summary,
                    hook_phid=hook.phid,
                    hook_name=hook.name,
                    sustain=not hook.in_backoff and failing_for < self.config.failing_sec,
                    detail={"hook_id": hook.id, "error": error or ""},
                )
            )
        return found

    def _failing_since(self, hooks: list[HookHealth]) -> dict[str, int]:
        """The first failed attempt after each hook's last success: Phorge's rows (through key_ratelimit,
        one range per hook) and this service's attempt log, whichever remembers earlier."""
        since = selectors.first_failures({hook.phid: hook.last_success or 0 for hook in hooks})
        logged = Q()
        for hook in hooks:
            logged |= Q(hook_phid=hook.phid, result="fail", started_at__gt=_dt(hook.last_success or 0))
        try:
            for row in DeliveryAttempt.objects.filter(logged).values("hook_phid").annotate(first=Min("started_at")):
                epoch = int(row["first"].timestamp())
                since[row["hook_phid"]] = min(since.get(row["hook_phid"], epoch), epoch)
        except DatabaseError:
            pass  # the attempt log is a help here, not a need
        return since

    def _last_errors(self, hooks: list[HookHealth]) -> dict[str, str]:
        """errorType/errorCode of each hook's newest failed attempt (one query)."""
        errors = selectors.last_errors([hook.phid for hook in hooks])
        return {phid: f"{kind}/{code}" for phid, (kind, code) in errors.items()}

    def _collection(self, health: QueueHealth, retention: int) -> Iterable[Observation]:
        holding = [hook for hook in health.hooks if hook.queued]
        if not holding:
            return []
        by_phid = {hook.phid: hook for hook in holding}
        edge = health.now - retention + int(self.config.gc_warning_sec)
        found = []
        for near in selectors.near_collection(list(by_phid), edge):
            hook, count, oldest = by_phid[near.hook_phid], near.requests, near.oldest
            deadline = oldest + retention
            left = deadline - health.now
            hours = round(left / 3600)
            when = (
                f"in {hours} hour{'s' if hours != 1 else ''}"
                if left >= 3600
                else f"in {_duration(left)}"
                if left > 0
                else "at Phorge's next garbage collection"
            )
            summary = (
                f"{count} requests to {self._hook(hook)} will be deleted by Phorge {when} unless delivered "
                f"(oldest queued since {_when(oldest)}, kept {_duration(retention)} by phd.garbage-collection)"
            ) + self._links(hook.phid, hook.id)
            found.append(
                Observation(
                    key=f"collection:{hook.phid}",
                    kind="collection",
                    since=oldest + retention - int(self.config.gc_warning_sec),
                    summary=summary,
                    hook_phid=hook.phid,
                    hook_name=hook.name,
                    detail={"count": count, "deadline": deadline, "hook_id": hook.id},
                )
            )
        return found

    def _no_worker(self, health: QueueHealth) -> Observation | None:
        due = health.due_now - health.due_held
        oldest = min((h.oldest_due_since for h in health.hooks if not h.held and h.oldest_due_since), default=None)
        if due <= 0 or oldest is None or health.now - oldest < self.config.worker_dead_sec:
            return None  # due for less than the heartbeat threshold: a starting worker has not reported yet
        now = datetime.now(UTC)
        beats = heartbeat.workers(now)
        threshold = timedelta(seconds=self.config.worker_dead_sec)
        if any(now - beat.last_seen <= threshold and not beat.stopping for beat in beats):
            return None
        last = max((beat.last_seen for beat in beats), default=None)
        seen = (
            "no worker has reported in the last day"
            if last is None
            else (f"the last heartbeat is {_duration((now - last).total_seconds())} old")
        )
        since = int(last.timestamp()) if last is not None else (oldest or health.now)
        summary = (
            f"No deliver_webhooks worker is alive ({seen}) while {due} requests are due "
            f"(oldest due since {_when(oldest)})"
        )
        return Observation("no_worker", "no_worker", since, summary, detail={"due": due})

    def _php(self) -> Observation | None:
        state = phorge_status.php_delivery_state()
        if state.state != "active":
            return None
        now = int(datetime.now(UTC).timestamp())
        tasks = state.active_tasks
        summary = (
            "Phorge's own PHP worker (HeraldWebhookWorker) is delivering beside this service"
            + (f" ({tasks} active tasks)" if tasks is not None else "")
            + ": stop PHP delivery (README, Taking over from Phorge's PHP delivery)"
        )
        return Observation("php_delivery", "php_delivery", int(state.last_delivery or now), summary)

    def _stalled(self, health: QueueHealth) -> Observation | None:
        if health.lag_state != "stalled":
            return None
        age = health.oldest_due_age or 0
        summary = (
            f"Delivery is stalled: the oldest due request has waited {_duration(age)} "
            f"(stalled beyond {_duration(health.thresholds.stalled_after)}); "
            f"{health.due_now - health.due_held} requests due"
        )
        return Observation("stalled", "stalled", health.now - age, summary, detail={"age": age})

    # -- recording transitions, once ----------------------------------------------------------------

    def _notify(self, key: str, kind: str, episode: int, transition: str, line: str) -> None:
        now = datetime.now(UTC)
        for channel in self.config.channels:
            try:
                with transaction.atomic():
                    AlertNotification.objects.create(
                        key=key,
                        episode=episode,
                        transition=transition,
                        kind=kind,
                        channel=channel,
                        text=line,
                        created_at=now,
                    )
            except IntegrityError:
                pass  # already recorded: the unique key is the last line of de-duplication

    def _record(self, evaluation: Evaluation, result: TickResult) -> None:
        now, observed = evaluation.now, evaluation.observations
        now_dt = datetime.now(UTC)
        rows = {row.key: row for row in AlertCondition.objects.filter(Q(active=True) | Q(key__in=list(observed)))}
        for key, obs in observed.items():
            row = rows.get(key)
            fields = {
                "summary": obs.summary,
                "detail": obs.detail,
                "hook_name": obs.hook_name,
                "observed_epoch": now,
            }
            if row is not None and row.active:
                AlertCondition.objects.filter(pk=row.pk, active=True, observed_epoch__lte=now).update(**fields)
                continue
            if obs.sustain:
                continue
            if row is None:
                try:
                    with transaction.atomic():
                        AlertCondition.objects.create(
                            key=key,
                            kind=obs.kind,
                            hook_phid=obs.hook_phid,
                            active=True,
                            episode=1,
                            since=_dt(obs.since),
                            entered_at=now_dt,
                            **fields,
                        )
                except IntegrityError:
                    continue  # another watcher recorded it first and sends it
                episode = 1
            else:
                won = AlertCondition.objects.filter(
                    pk=row.pk, active=False, episode=row.episode, observed_epoch__lt=now
                ).update(
                    active=True,
                    episode=row.episode + 1,
                    since=_dt(obs.since),
                    entered_at=now_dt,
                    recovered_at=None,
                    **fields,
                )
                if not won:
                    continue
                episode = row.episode + 1
            self._notify(key, obs.kind, episode, "entered", f"ALERT      {obs.summary}")
            result.entered.append(key)
            logger.warning("alert: %s", obs.summary.split("\n", 1)[0], extra={"alert": key})
        for row in rows.values():
            if not row.active or row.key in observed or row.kind not in evaluation.kinds:
                continue
            won = AlertCondition.objects.filter(
                pk=row.pk, active=True, episode=row.episode, observed_epoch__lt=now
            ).update(active=False, recovered_at=now_dt, observed_epoch=now)
            if not won:
                continue
            line = f"RECOVERED  {self._recovery(row, evaluation)}"
            self._notify(row.key, row.kind, row.episode, "recovered", line)
            result.recovered.append(row.key)
            logger.info(
                "alert recovered: %s", line.split("\n", 1)[0].removeprefix("RECOVERED  "), extra={"alert": row.key}
            )

    def _recovery(self, row: AlertCondition, evaluation: Evaluation) -> str:
        lasted = _duration(evaluation.now - row.since.timestamp())
        hook = (
            next((h for h in evaluation.health.hooks if h.phid == row.hook_phid), None) if evaluation.health else None
        )
        name = f"hook {row.hook_name!r} ({row.hook_phid})" if row.hook_phid else ""
        links = self._links(row.hook_phid, hook.id if hook else int(row.detail.get("hook_id") or 0)) if name else ""
        if row.kind == "receiver":
            if hook is None:
                return f"{name} no longer exists (it was failing for {lasted})"
            return (
                f"{name} delivers again (last success {_when(hook.last_success)}, "
                f"was failing since {_when(row.since.timestamp())}, {lasted}); {hook.queued} queued"
            ) + links
        if row.kind == "collection":
            return f"{name}: no queued request is close to Phorge's collection any more" + links
        if row.kind == "no_worker":
            return "A deliver_webhooks worker is alive again, or nothing is due any more" + f" (after {lasted})"
        if row.kind == "php_delivery":
            return "Phorge's PHP worker no longer delivers webhooks beside this service"
        if row.kind == "stalled":
            return f"Delivery is no longer stalled (after {lasted})"
        if row.kind == "database":
            return f"Phorge's herald database answers the alert watcher again (after {lasted})"
        return f"{row.key} ended after {lasted}"

    # -- requests lost to Phorge's collection --------------------------------------------------------

    def _losses(self, health: QueueHealth, retention: int) -> list[Loss]:
        """Remember queued requests close to collection; those gone since, undelivered, were collected.

        Reads: one range of key_ratelimit (the pending slice, dateCreated filtered there) and, for the
        remembered rows missing from it, one primary-key lookup per 500. Exact: a missing row counts only
        if it was queued at last sight, no attempt of ours sent it, and it was old enough to be collected;
        and only the watcher whose claim UPDATE marked it counts it.
        """
        names = {hook.phid: hook.name for hook in health.hooks}
        edge = health.now - retention + max(self.config.loss_margin_sec, int(10 * self.config.interval_sec))
        near = selectors.queued_near_collection([hook.phid for hook in health.hooks if hook.queued], edge, WATCH_LIMIT)
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
        still = selectors.request_statuses([watch.request_id for watch in absent])
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
                extra={"count": len(other)},
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

    def _record_losses(self, evaluation: Evaluation, result: TickResult) -> None:
        now_dt = datetime.now(UTC)
        for loss in evaluation.losses:
            count = len(loss.request_phids)
            HookLoss.objects.get_or_create(hook_phid=loss.hook_phid, defaults={"hook_name": loss.hook_name})
            HookLoss.objects.filter(hook_phid=loss.hook_phid).update(
                lost_total=F("lost_total") + count, last_lost_at=now_dt, hook_name=loss.hook_name or F("hook_name")
            )
            total = HookLoss.objects.get(hook_phid=loss.hook_phid).lost_total
            metrics.REQUESTS_LOST.inc(count)
            result.lost += count
            shown = ", ".join(loss.request_phids[:LOST_PHIDS_SHOWN])
            more = f" and {count - LOST_PHIDS_SHOWN} more" if count > LOST_PHIDS_SHOWN else ""
            hook_id = (
                next((h.id for h in evaluation.health.hooks if h.phid == loss.hook_phid), 0) if evaluation.health else 0
            )
            line = (
                f"LOST       {count} queued requests to hook {loss.hook_name!r} ({loss.hook_phid}) were deleted by "
                f"Phorge's garbage collection before they were delivered (created {_when(loss.oldest)}"
                + (f" to {_when(loss.newest)}" if loss.newest != loss.oldest else "")
                + f"): {shown}{more}; {total} lost in all for this hook"
            ) + self._links(loss.hook_phid, hook_id)
            self._notify(f"lost:{loss.hook_phid}:{loss.first_id}", "lost", 0, "event", line)
            logger.error(
                "queued requests deleted by Phorge's garbage collection before delivery",
                extra={"hook": loss.hook_phid, "count": count, "lost_total": total},
            )

    def _update_gauges(self) -> None:
        from .selectors import active_counts

        counts = active_counts()
        for kind in metrics.KINDS:
            metrics.CONDITIONS_ACTIVE.labels(kind).set(counts.get(kind, 0))

    # -- sending digests -----------------------------------------------------------------------------

    def _lease(self, channel: str) -> bool:
        AlertChannel.objects.get_or_create(name=channel)
        now = datetime.now(UTC)
        lease = timedelta(seconds=3 * self.config.channel_timeout_sec + 30)
        return bool(
            AlertChannel.objects.filter(name=channel)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=self.owner))
            .update(lease_owner=self.owner, lease_until=now + lease)
        )

    def _release(self, channel: str) -> None:
        AlertChannel.objects.filter(name=channel, lease_owner=self.owner).update(lease_until=None, lease_owner="")

    def _deliver(self, result: TickResult) -> None:
        started: dict[str, _Send] = {}
        for channel in self.config.channels:
            running = self._sending.get(channel)
            if running is not None:
                if not running.done.is_set():
                    self._lease(channel)  # still in flight from an earlier pass: keep the lease, wait
                    continue
                self._finish(channel, running, result)
            if not self._lease(channel):
                continue  # another watcher sends on this channel now
            pending = list(
                AlertNotification.objects.filter(channel=channel, sent_at__isnull=True).order_by("id")[:5000]
            )
            if not pending:
                self._release(channel)
                continue
            subject, body = digest(pending)
            send = self._start(channel, subject, body, [note.pk for note in pending])
            started[channel] = send
        end = time.monotonic() + self.config.channel_timeout_sec + 2
        for send in started.values():
            send.done.wait(max(0.0, end - time.monotonic()))  # in parallel: a hanging channel costs the other nothing
        for channel, send in started.items():
            if send.done.is_set():
                self._finish(channel, send, result)
            else:
                self._sending[channel] = send

    def _start(self, channel: str, subject: str, body: str, ids: list[int]) -> _Send:
        sender = self.senders[channel]
        holder: list[_Send] = []

        def run() -> None:
            send = holder[0]
            try:
                sender(self.config, subject, body)
            except ChannelError as exc:
                send.error = str(exc)
            except Exception as exc:  # noqa: BLE001 - any failure of a channel is that channel's outage
                send.error = type(exc).__name__
            finally:
                send.done.set()

        send = _Send(ids=ids, thread=threading.Thread(target=run, name=f"alert-{channel}", daemon=True))
        holder.append(send)
        send.thread.start()
        return send

    def _finish(self, channel: str, send: _Send, result: TickResult) -> None:
        self._sending.pop(channel, None)
        now = datetime.now(UTC)
        if send.error is None:
            AlertNotification.objects.filter(pk__in=send.ids, sent_at__isnull=True).update(sent_at=now)
            metrics.NOTIFICATIONS_SENT.labels(channel).inc()
            result.sent[channel] = len(send.ids)
            back = AlertChannel.objects.filter(name=channel, failing_since__isnull=False).update(
                failing_since=None, last_sent_at=now
            )
            if back:
                logger.info("alert channel works again: pending alerts sent", extra={"channel": channel})
            else:
                AlertChannel.objects.filter(name=channel).update(last_sent_at=now)
        else:
            metrics.NOTIFICATIONS_FAILED.labels(channel).inc()
            result.failed[channel] = send.error
            began = AlertChannel.objects.filter(name=channel, failing_since__isnull=True).update(
                failing_since=now, last_error=send.error[:200]
            )
            if began:
                logger.error(
                    "alert channel failing: alerts wait and are retried at every pass",
                    extra={"channel": channel, "error": send.error},
                )
        self._release(channel)

    def send_test(self) -> dict[str, str | None]:
        """A test message on every configured channel, now: {channel: None if sent, else the error}."""
        subject = "[gorge-webhook] test message"
        body = f"A test message from the gorge-webhook alert watcher on {socket.gethostname()}: this channel works."
        outcome: dict[str, str | None] = {}
        sends = {channel: self._start(channel, subject, body, []) for channel in self.config.channels}
        end = time.monotonic() + self.config.channel_timeout_sec + 2
        for channel, send in sends.items():
            send.done.wait(max(0.0, end - time.monotonic()))
            outcome[channel] = send.error if send.done.is_set() else "timed out"
        return outcome


def digest(notes: list[AlertNotification]) -> tuple[str, str]:
    """One message for every pending line of a channel: (subject, body)."""
    entered = sum(1 for note in notes if note.transition == "entered")
    recovered = sum(1 for note in notes if note.transition == "recovered")
    lost = sum(1 for note in notes if note.transition == "event")
    parts = [
        f"{entered} new" if entered else "",
        f"{recovered} recovered" if recovered else "",
        f"{lost} lost" if lost else "",
    ]
    counted = ", ".join(part for part in parts if part)
    if len(notes) == 1:
        subject = (
            "[gorge-webhook] "
            + notes[0].text.split("\n", 1)[0].split(None, 1)[0]
            + ": "
            + (notes[0].text.split("\n", 1)[0].split(None, 1)[1][:150])
        )
    else:
        subject = f"[gorge-webhook] alerts: {counted}"
    lines = [note.text for note in notes[:DIGEST_LINES]]
    if len(notes) > DIGEST_LINES:
        lines.append(f"... and {len(notes) - DIGEST_LINES} more (see the dashboard)")
    body = f"gorge-webhook alerts ({counted}):\n\n" + "\n\n".join(lines) + "\n"
    return subject, body
