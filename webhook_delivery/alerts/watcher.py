"""The alert watcher: reads Phorge's tables (read only, through webhook_delivery.reads.herald), decides which
conditions hold, records each start and end once in Django's database, and sends one digest per channel.

Runs as `manage.py watch_webhooks`, or in a thread of `deliver_webhooks --watch`, supervised there
(webhook_delivery/sidetasks.py: restarted when it dies, and the worker stops if it keeps dying).

Any number of watchers may run: a condition's start (and end) is won by one conditional UPDATE (or one
INSERT on its unique key), and a channel is sent on by the one watcher holding its lease. A channel that
fails (SMTP down, a chat URL that hangs, Phorge refusing the token) is retried with a growing wait, logged
once per outage, and never holds up another: each is sent from a thread of its own, bounded by the channel
timeout (sending.py; the channels: e-mail, the chat webhook, each Apprise URL, Phorge's incident tasks).
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
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import Q

from ..config import PHORGE_ALIAS, DeliveryConfig
from ..reads import queue
from ..reads.alert_state import active_counts
from ..reads.health import QueueHealth
from ..reads.phorge_status import phorge_settings
from ..reads.replica import on_master
from . import messages, metrics
from .conditions import CONDITIONS, Database, Observation, Pass, Remembered
from .config import PHORGE_CHANNEL, AlertConfig
from .losses import Loss, Losses
from .messages import PREFIX, Message
from .models import KINDS, AlertCondition, AlertNotification
from .sending import Channels, TickResult
from .transitions import ENTERED, Known, Seen, Step, decide

logger = logging.getLogger(__name__)

RETRY_MAX_SEC = 900.0  # a failing channel is tried at least this often
REFUSALS_GIVEN_UP = 3  # refused this many times in a row: those notifications are dropped
WATCH_LIMIT = 10_000  # queued requests near collection remembered per pass
LOSS_TOLERANCE_SEC = 300  # Phorge's collector runs on its host's clock, ours on the database's


def _dt(epoch: int | float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@dataclass
class Evaluation:
    now: int
    observations: dict[str, Observation]
    kinds: set[str]  # kinds evaluated this pass: only those may recover
    health: QueueHealth | None
    facts: Pass
    losses: list[Loss] = field(default_factory=list)


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
        self.channels = Channels(self.config, self.owner)
        self.losses = Losses(self.config, self.owner)

    # -- the loop ------------------------------------------------------------------------------------

    def run_forever(self, stop_event: threading.Event) -> None:
        """Pass after pass until stop_event is set; a failed pass is logged and the next one runs."""
        logger.info(
            "alert watcher started",
            extra={
                "event": "watcher.started",
                "channels": ",".join(self.channels.names) or "none",
                "interval_sec": self.config.interval_sec,
            },
        )
        failing = False
        while not stop_event.is_set():
            try:
                self.tick()
                if failing:
                    logger.info(
                        "alert watcher: Django's database answers again", extra={"event": "watcher.database_back"}
                    )
                failing = False
            except DatabaseError as exc:
                if not failing:
                    logger.error(
                        "alert watcher: Django's database unavailable",
                        extra={"event": "watcher.database_lost", "error": type(exc).__name__},
                    )
                failing = True
            except Exception:
                logger.exception("alert watcher: pass failed", extra={"event": "watcher.pass_failed"})
            finally:
                self._close_connections()
            stop_event.wait(self.config.interval_sec)
        logger.info("alert watcher stopped", extra={"event": "watcher.stopped"})

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
            result.lost += self.losses.record(
                evaluation.losses, evaluation.now, evaluation.health, evaluation.facts.links, self._notify
            )
        self._update_gauges()
        self._read_blacklist()
        self.channels.deliver(result)
        return result

    def _read_blacklist(self) -> None:
        """Phorge's outbound blacklist in force, for the addresses of the chat servers (Apprise's sends): as the
        worker reads it, or GORGE_WEBHOOK_OUTBOUND_BLACKLIST or Phorge's default while Phorge's database does
        not answer."""
        resolved = phorge_settings(self.delivery)
        self.channels.blacklist = self.delivery.outbound_blacklist if resolved is None else resolved.blacklist.value

    # -- conditions ----------------------------------------------------------------------------------

    def evaluate(self) -> Evaluation:
        host_now = datetime.fromtimestamp(self.clock(), UTC)
        try:
            health: QueueHealth | None = queue.queue_health(self.delivery)
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
        losses = (
            self.losses.observe(health, facts.retention) if health is not None and facts.retention is not None else []
        )
        return Evaluation(facts.now, found, kinds, health, facts, losses)

    # -- recording transitions, once ----------------------------------------------------------------

    def _notify(self, key: str, kind: str, episode: int, transition: str, said: Message) -> None:
        now = datetime.now(UTC)
        for channel in self.channels.names:
            if channel == PHORGE_CHANNEL and transition == "event":
                continue  # a loss is an event, with no start or end: e-mail and chat tell it, no task
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
        """Each condition's step (transitions.decide), applied once whoever else watches: a start once it has
        held its hold time, an end once it has been clear as long; told by the watcher that won it."""
        now, observed = evaluation.now, evaluation.observations
        now_dt = datetime.now(UTC)
        rows = {
            row.key: row
            for row in AlertCondition.objects.filter(
                Q(active=True) | Q(key__in=list(observed)) | Q(pending_since__isnull=False)
            )
        }
        for key in [*observed, *(key for key in rows if key not in observed)]:
            row, obs = rows.get(key), observed.get(key)
            kind = obs.kind if obs is not None else rows[key].kind
            if obs is not None:
                seen = Seen.SUSTAINS if obs.sustain else Seen.HOLDS
            else:
                seen = Seen.CLEAR if kind in evaluation.kinds else Seen.UNKNOWN
            known = None if row is None else Known(row.active, row.episode, row.pending_since, row.clear_since)
            hold = CONDITIONS[kind].hold_sec(self.config) if kind in CONDITIONS else 0.0
            step = decide(known, seen, now, hold)
            if step is Step.NOTHING or not self._apply(step, key, row, obs, now, now_dt):
                continue
            if step in ENTERED and obs is not None:
                episode = 1 if row is None else row.episode + 1
                self._notify(key, obs.kind, episode, "entered", obs.message)
                result.entered.append(key)
                logger.warning(
                    "alert: %s",
                    obs.message.subject.removeprefix(PREFIX),
                    extra={"event": "alert.entered", "alert": key},
                )
            elif step is Step.RECOVER and row is not None:
                said = self._ended(row, evaluation)
                self._notify(key, row.kind, row.episode, "recovered", said)
                result.recovered.append(key)
                logger.info(
                    "alert recovered: %s",
                    said.subject.removeprefix(PREFIX),
                    extra={"event": "alert.recovered", "alert": key},
                )

    @staticmethod
    def _apply(
        step: Step, key: str, row: AlertCondition | None, obs: Observation | None, now: int, now_dt: datetime
    ) -> bool:
        """One step as one guarded statement on the state read (an UPDATE conditional on it, or an INSERT on
        the unique key): whether this watcher won it."""
        conditions = AlertCondition.objects
        facts: dict[str, Any] = {}
        if obs is not None:
            facts = {"summary": obs.message.body, "detail": obs.detail, "hook_name": obs.hook_name}
            facts["observed_epoch"] = now
        if step in (Step.REMEMBER, Step.OPEN) and obs is not None:
            opened = step is Step.OPEN
            try:
                with transaction.atomic():
                    conditions.create(
                        key=key,
                        kind=obs.kind,
                        hook_phid=obs.hook_phid,
                        active=opened,
                        episode=1 if opened else 0,
                        since=_dt(obs.since),
                        entered_at=now_dt,
                        pending_since=None if opened else now,
                        **facts,
                    )
            except IntegrityError:
                return False  # another watcher recorded it first (and tells it)
            return True
        if row is None:
            raise ValueError(f"{step}: a step on a row the pass did not read")  # decide() never gives one
        mine = conditions.filter(pk=row.pk)
        if step is Step.REFRESH:
            changed = mine.filter(active=True, observed_epoch__lte=now).update(clear_since=None, **facts)
        elif step is Step.PEND:
            changed = mine.filter(active=False, pending_since__isnull=True).update(pending_since=now)
        elif step is Step.REOPEN and obs is not None:
            changed = mine.filter(active=False, episode=row.episode, observed_epoch__lt=now).update(
                active=True,
                episode=row.episode + 1,
                since=_dt(obs.since),
                entered_at=now_dt,
                recovered_at=None,
                pending_since=None,
                clear_since=None,
                **facts,
            )
        elif step is Step.FORGET:
            changed = mine.filter(active=False, pending_since=row.pending_since).update(pending_since=None)
        elif step is Step.CLEARING:
            changed = mine.filter(active=True, clear_since__isnull=True).update(clear_since=now)
        elif step is Step.RECOVER:
            changed = mine.filter(active=True, episode=row.episode, observed_epoch__lt=now).update(
                active=False, recovered_at=now_dt, observed_epoch=now, clear_since=None
            )
        else:
            raise AssertionError(step)
        return changed == 1

    def _ended(self, row: AlertCondition, evaluation: Evaluation) -> Message:
        detail = row.detail if isinstance(row.detail, dict) else {}
        remembered = Remembered(row.key, row.hook_phid, row.hook_name, int(row.since.timestamp()), detail)
        condition = CONDITIONS.get(row.kind)
        if condition is None:  # a kind an older version recorded
            return messages.message(f"{row.kind} ended", [f"{row.key} ended."])
        return condition.ended(remembered, evaluation.facts)

    def _update_gauges(self) -> None:
        counts = active_counts()
        for kind in KINDS:
            metrics.CONDITIONS_ACTIVE.labels(kind).set(counts.get(kind, 0))

    def send_test(self) -> dict[str, str | None]:
        """A test message on every configured channel, now: {channel: None if sent, else the error}."""
        self._read_blacklist()
        return self.channels.send_test()
