"""The queue's figures for the dashboard, the JSON diagnostics, the web metrics and the alert watcher: the
counts of the retained history from the tally (counts.py: exact as of its last refresh, which they state),
and what is read live of each hook through key_ratelimit (latest.py). Nothing here reads the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError

from ..config import DeliveryConfig
from ..records.holds import held_hook_phids
from ..records.tally import Snapshot
from . import counts
from .health import QueueHealth, Tally, queue_health_of
from .herald import hooks, uncommitted_reads
from .latest import latest
from .tally import Settled, Waiting


@dataclass(frozen=True)
class QueueCounts:
    """The Gorge-compatible /api/webhook/stats, and as of when."""

    queued: int
    sent: int
    failed: int
    active_webhooks: int
    as_of: int | None = None  # Phorge's database clock at the count; None: never counted
    complete: bool = False


def _snapshot(config: DeliveryConfig) -> Snapshot | None:
    return counts.current(config)


def queue_counts(config: DeliveryConfig) -> QueueCounts:
    snapshot = _snapshot(config)
    _now, all_hooks = hooks()
    active = sum(1 for hook in all_hooks if hook.status != "disabled")
    queued = sent = failed = 0
    if snapshot is not None:
        for hook in all_hooks:
            settled = snapshot.settled.get(hook.phid, Settled())
            waiting = snapshot.waiting.get(hook.phid, Waiting())
            queued += waiting.queued
            sent += settled.sent + waiting.sent
            failed += settled.failed
    return QueueCounts(
        queued=queued,
        sent=sent,
        failed=failed,
        active_webhooks=active,
        as_of=None if snapshot is None else snapshot.as_of,
        complete=snapshot is not None and snapshot.complete,
    )


def _held_hooks() -> set[str]:
    """Hooks held by an operator, from Django's database; none when it cannot be read (the pages then show
    their requests as due, never hide them)."""
    try:
        return held_hook_phids()
    except DatabaseError:
        return set()


def queue_health(config: DeliveryConfig, only: Sequence[str] | None = None) -> QueueHealth:
    """Counts, due requests, breaker state and errors per hook (every hook, or the ones named)."""
    return _health(config, only, _snapshot(config))


@uncommitted_reads
def _health(config: DeliveryConfig, only: Sequence[str] | None, snapshot: Snapshot | None) -> QueueHealth:
    now, all_hooks = hooks(only)
    found = latest([hook.phid for hook in all_hooks], now - config.error_backoff_sec)
    tallies: dict[str, Tally] = {}
    for hook in all_hooks:
        tally = tallies[hook.phid] = Tally()
        live = found[hook.phid]
        tally.last_success, tally.last_failed_attempt = live.last_success, live.last_failed_attempt
        tally.window_failures = live.window_failures
        if snapshot is None:
            continue
        settled = snapshot.settled.get(hook.phid, Settled())
        waiting = snapshot.waiting.get(hook.phid, Waiting())
        tally.sent, tally.failed, tally.queued = settled.sent + waiting.sent, settled.failed, waiting.queued
        tally.last_configuration_failure = settled.refused_at or None
        tally.due, tally.oldest_due_since = waiting.due, waiting.due_since
        for errors in (settled.errors, waiting.errors):
            for key, count in errors.items():
                tally.errors[key] += count
    health = queue_health_of(now, all_hooks, tallies, _held_hooks(), config)
    if snapshot is None:
        return health
    return health.counted(
        as_of=snapshot.as_of,
        complete=snapshot.complete,
        progress=(int(snapshot.cost.get("counted_through", 0)), int(snapshot.cost.get("newest", 0))),
        refusals=tuple(snapshot.refusals),
        key_status=snapshot.key_status,
        attempts=snapshot.attempts if snapshot.attempts.now else None,
    )
