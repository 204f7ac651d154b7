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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import F, Q

from ..config import PHORGE_ALIAS, DeliveryConfig
from ..records.models import DeliveryAttempt
from ..web import selectors
from ..web.health import QueueHealth
from ..web.replica import on_master
from . import messages, metrics
from .channels import LIMITS, SENDERS, ChannelError, Limits
from .conditions import CONDITIONS, Database, Observation, Pass, Remembered
from .config import AlertConfig
from .messages import PREFIX, HookRef, Message
from .models import AlertChannel, AlertCondition, AlertNotification, HookLoss, WatchedRequest

logger = logging.getLogger(__name__)

RETRY_MAX_SEC = 900.0  # a failing channel is tried at least this often
REFUSALS_GIVEN_UP = 3  # refused this many times in a row: those notifications are dropped
WATCH_LIMIT = 10_000  # queued requests near collection remembered per pass
LOSS_TOLERANCE_SEC = 300  # Phorge's collector runs on its host's clock, ours on the database's


def _dt(epoch: int | float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


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
    health: QueueHealth | None
    facts: Pass
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
    ids: list[int]  # the part being sent (left: the part that failed)
    thread: threading.Thread
    sent: list[int] = field(default_factory=list)  # the notifications of the parts that went out
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    refused: bool = False  # the channel refused what it was given: sending it again gets the same answer


class Watcher:
    def __init__(
        self,
        config: AlertConfig | None = None,
        delivery: DeliveryConfig | None = None,
        *,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock  # the host's clock, beside Phorge's: for the heartbeats' ages
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
        host_now = datetime.fromtimestamp(self.clock(), UTC)
        try:
            health: QueueHealth | None = selectors.queue_health(self.delivery)
        except DatabaseError as exc:
            health = None
            error = type(exc).__name__
        facts = Pass(
            health.now if health is not None else int(host_now.timestamp()),
            health,
            self.config,
            self.delivery,
            host_now,
        )
        if health is None:
            facts.error = error
            kinds = {Database.kind}
        else:
            kinds = set(CONDITIONS)
        found: dict[str, Observation] = {}
        for kind in kinds:
            for observation in CONDITIONS[kind].observe(facts):
                found[observation.key] = observation
        losses = self._losses(health, facts.retention) if health is not None and facts.retention is not None else []
        return Evaluation(facts.now, found, kinds, health, facts, losses)

    # -- recording transitions, once ----------------------------------------------------------------

    def _notify(self, key: str, kind: str, episode: int, transition: str, said: Message) -> None:
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
                        subject=said.subject,
                        text=said.text(transition),
                        created_at=now,
                    )
            except IntegrityError:
                pass  # already recorded: the unique key is the last line of de-duplication

    def _record(self, evaluation: Evaluation, result: TickResult) -> None:
        """Each condition's start and end, won by one watcher: a start once it has held its hold time, an
        end once it has been clear as long (`pending_since` and `clear_since` remember since when)."""
        now, observed = evaluation.now, evaluation.observations
        now_dt = datetime.now(UTC)
        rows = {
            row.key: row
            for row in AlertCondition.objects.filter(
                Q(active=True) | Q(key__in=list(observed)) | Q(pending_since__isnull=False)
            )
        }
        for key, obs in observed.items():
            row = rows.get(key)
            fields = {
                "summary": obs.message.body,
                "detail": obs.detail,
                "hook_name": obs.hook_name,
                "observed_epoch": now,
            }
            if row is not None and row.active:
                AlertCondition.objects.filter(pk=row.pk, active=True, observed_epoch__lte=now).update(
                    clear_since=None, **fields
                )
                continue
            if obs.sustain:
                continue
            hold = CONDITIONS[obs.kind].hold_sec(self.config)
            pending = row.pending_since if row is not None else None
            if hold > 0 and (pending is None or now - pending < hold):
                self._pending(row, obs, now, now_dt, fields)
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
                    pending_since=None,
                    clear_since=None,
                    **fields,
                )
                if not won:
                    continue
                episode = row.episode + 1
            self._notify(key, obs.kind, episode, "entered", obs.message)
            result.entered.append(key)
            logger.warning(
                "alert: %s", obs.message.subject.removeprefix(PREFIX), extra={"event": "alert.entered", "alert": key}
            )
        for row in rows.values():
            if row.key in observed or row.kind not in evaluation.kinds:
                continue
            if not row.active:
                if row.pending_since is not None:  # it did not hold long enough: start counting again next time
                    AlertCondition.objects.filter(pk=row.pk, active=False, pending_since=row.pending_since).update(
                        pending_since=None
                    )
                continue
            hold = CONDITIONS[row.kind].hold_sec(self.config) if row.kind in CONDITIONS else 0.0
            if hold > 0 and (row.clear_since is None or now - row.clear_since < hold):
                if row.clear_since is None:
                    AlertCondition.objects.filter(pk=row.pk, active=True, clear_since__isnull=True).update(
                        clear_since=now
                    )
                continue
            won = AlertCondition.objects.filter(
                pk=row.pk, active=True, episode=row.episode, observed_epoch__lt=now
            ).update(active=False, recovered_at=now_dt, observed_epoch=now, clear_since=None)
            if not won:
                continue
            said = self._ended(row, evaluation)
            self._notify(row.key, row.kind, row.episode, "recovered", said)
            result.recovered.append(row.key)
            logger.info(
                "alert recovered: %s",
                said.subject.removeprefix(PREFIX),
                extra={"event": "alert.recovered", "alert": row.key},
            )

    @staticmethod
    def _pending(
        row: AlertCondition | None, obs: Observation, now: int, now_dt: datetime, fields: dict[str, Any]
    ) -> None:
        """Remember since when a condition holds, without telling anyone yet."""
        if row is None:
            try:
                with transaction.atomic():
                    AlertCondition.objects.create(
                        key=obs.key,
                        kind=obs.kind,
                        hook_phid=obs.hook_phid,
                        active=False,
                        episode=0,
                        since=_dt(obs.since),
                        entered_at=now_dt,
                        pending_since=now,
                        **fields,
                    )
            except IntegrityError:
                pass  # another watcher remembered it first
        elif row.pending_since is None:
            AlertCondition.objects.filter(pk=row.pk, active=False, pending_since__isnull=True).update(pending_since=now)

    def _ended(self, row: AlertCondition, evaluation: Evaluation) -> Message:
        detail = row.detail if isinstance(row.detail, dict) else {}
        remembered = Remembered(row.key, row.hook_phid, row.hook_name, int(row.since.timestamp()), detail)
        condition = CONDITIONS.get(row.kind)
        if condition is None:  # a kind an older version recorded
            return messages.message(f"{row.kind} ended", [f"{row.key} ended."])
        return condition.ended(remembered, evaluation.facts)

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
            hook_id = (
                next((h.id for h in evaluation.health.hooks if h.phid == loss.hook_phid), 0) if evaluation.health else 0
            )
            facts = messages.Lost(
                HookRef(loss.hook_phid, loss.hook_name, hook_id),
                evaluation.now,
                loss.request_phids,
                loss.oldest,
                loss.newest,
                total,
            )
            said = messages.lost(facts, evaluation.facts.links)
            self._notify(f"lost:{loss.hook_phid}:{loss.first_id}", "lost", 0, "event", said)
            logger.error(
                "queued requests deleted by Phorge's garbage collection before delivery",
                extra={"event": "alert.lost", "hook": loss.hook_phid, "count": count, "lost_total": total},
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
        now = datetime.now(UTC)
        for channel in self.config.channels:
            running = self._sending.get(channel)
            if running is not None:
                if not running.done.is_set():
                    self._lease(channel)  # still in flight from an earlier pass: keep the lease, wait
                    continue
                self._finish(channel, running, result)
            if AlertChannel.objects.filter(name=channel, retry_at__gt=now).exists():
                continue  # backing off after a failed send
            if not self._lease(channel):
                continue  # another watcher sends on this channel now
            pending = list(
                AlertNotification.objects.filter(channel=channel, sent_at__isnull=True).order_by("id")[:5000]
            )
            if not pending:
                self._release(channel)
                continue
            started[channel] = self._start(channel, digests(pending, LIMITS.get(channel, LIMITS["chat"])))
        end = time.monotonic() + self.config.channel_timeout_sec + 2
        for send in started.values():
            send.done.wait(max(0.0, end - time.monotonic()))  # in parallel: a hanging channel costs the other nothing
        for channel, send in started.items():
            if send.done.is_set():
                self._finish(channel, send, result)
            else:
                self._sending[channel] = send

    def _start(self, channel: str, parts: list[messages.Digest]) -> _Send:
        """Send the parts in order from a thread of their own; the first that fails ends the send."""
        sender = self.senders[channel]
        holder: list[_Send] = []

        def run() -> None:
            send = holder[0]
            try:
                for part in parts:
                    send.ids = list(part.ids)
                    sender(self.config, part.subject, part.body)
                    send.sent += send.ids
                send.ids = []
            except ChannelError as exc:
                send.error, send.refused = str(exc), exc.refused
            except Exception as exc:  # noqa: BLE001 - any failure of a channel is that channel's outage
                send.error = type(exc).__name__
            finally:
                send.done.set()

        send = _Send(ids=[], thread=threading.Thread(target=run, name=f"alert-{channel}", daemon=True))
        holder.append(send)
        send.thread.start()
        return send

    def _finish(self, channel: str, send: _Send, result: TickResult) -> None:
        self._sending.pop(channel, None)
        now = datetime.now(UTC)
        if send.sent:
            AlertNotification.objects.filter(pk__in=send.sent, sent_at__isnull=True).update(sent_at=now)
            metrics.NOTIFICATIONS_SENT.labels(channel).inc()
            result.sent[channel] = len(send.sent)
        if send.error is None:
            back = AlertChannel.objects.filter(name=channel, failing_since__isnull=False).update(
                failing_since=None, last_sent_at=now, failures=0, refusals=0, retry_at=None
            )
            if back:
                logger.info(
                    "alert channel works again: pending alerts sent",
                    extra={"event": "alert.channel_back", "channel": channel},
                )
            else:
                AlertChannel.objects.filter(name=channel).update(last_sent_at=now, failures=0, refusals=0)
            self._release(channel)
            return
        metrics.NOTIFICATIONS_FAILED.labels(channel).inc()
        result.failed[channel] = send.error
        state = AlertChannel.objects.get(name=channel)
        failures = state.failures + 1
        refusals = state.refusals + 1 if send.refused else 0
        wait = min(self.config.interval_sec * 2 ** (failures - 1), RETRY_MAX_SEC)
        AlertChannel.objects.filter(name=channel).update(
            failures=failures, refusals=refusals, retry_at=now + timedelta(seconds=wait)
        )
        began = AlertChannel.objects.filter(name=channel, failing_since__isnull=True).update(
            failing_since=now, last_error=send.error[:200]
        )
        if began:
            logger.error(
                "alert channel failing: alerts wait and are retried, less often while it keeps failing",
                extra={"event": "alert.channel_failing", "channel": channel, "error": send.error},
            )
        if refusals >= REFUSALS_GIVEN_UP:
            # The channel refuses these very notifications every time (too large, malformed for it): drop
            # them, so that the ones after them can go out.
            dropped = AlertNotification.objects.filter(pk__in=send.ids, sent_at__isnull=True).update(
                sent_at=now, given_up=True
            )
            metrics.NOTIFICATIONS_GIVEN_UP.labels(channel).inc(dropped)
            AlertChannel.objects.filter(name=channel).update(refusals=0, retry_at=None)
            logger.error(
                "alert channel refused the same alerts %d times: given up on them (they stay on the dashboard)",
                REFUSALS_GIVEN_UP,
                extra={"event": "alert.given_up", "channel": channel, "error": send.error, "notifications": dropped},
            )
        self._release(channel)

    def send_test(self) -> dict[str, str | None]:
        """A test message on every configured channel, now: {channel: None if sent, else the error}."""
        subject = "[gorge-webhook] test message"
        body = f"A test message from the gorge-webhook alert watcher on {socket.gethostname()}: this channel works."
        outcome: dict[str, str | None] = {}
        test = [messages.Digest(subject, body)]
        sends = {channel: self._start(channel, test) for channel in self.config.channels}
        end = time.monotonic() + self.config.channel_timeout_sec + 2
        for channel, send in sends.items():
            send.done.wait(max(0.0, end - time.monotonic()))
            outcome[channel] = send.error if send.done.is_set() else "timed out"
        return outcome


def digests(notes: list[AlertNotification], limits: Limits) -> list[messages.Digest]:
    """The messages that carry a channel's pending notifications, within what the channel accepts."""
    return messages.digests(
        [messages.Note(note.transition, note.subject, note.text, note.pk) for note in notes],
        max_chars=limits.chars,
        max_entries=limits.entries,
        max_parts=limits.parts,
    )
