"""The counts of Phorge's retained requests as the pages, the JSON and the alert watcher read them (the tally,
tally.py), and the one refresh at a time that keeps them.

A worker refreshes them beside its work (worker/tally_keeper.py), at most every
GORGE_WEBHOOK_COUNTS_REFRESH_SEC, and less often when a refresh takes long (it waits DUTY times what the
last one took). A reader that finds them past due with no one refreshing (no worker runs, as in the demo)
refreshes them itself, under the same turn and the same bound. However many web processes, monitors and
workers look, Phorge's database sees one refresh per period.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, connections

from ..config import PHORGE_ALIAS, DeliveryConfig
from ..records import tally as stored
from ..records.models import RequeueNotice
from ..records.tally import Snapshot
from .attempt_digest import LATENCY_SEC, refresh_digest
from .tally import totals_json
from .tally_refresh import BUDGET_IDS, Chunks, Outcome, Refresh, State
from .tally_sql import TallyReader, consistent_snapshot

logger = logging.getLogger(__name__)

DUTY = 20  # the next refresh waits at least this many times as long as the last one took
IDLE_MAX_SEC = 20.0  # nothing could change for a while: refreshes further apart, at most this
BUILD_PAUSE_SEC = 1.0  # between the steps of a first count
READER_GRACE_SEC = 2.0  # a reader refreshes only once a worker is this late


@dataclass(frozen=True)
class Refreshed:
    complete: bool
    seconds: float
    next_in: float


def _holder(role: str) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{role}"[:200]


_local = threading.local()


def _connection() -> Any:
    """This thread's own connection to herald's master for the refreshes, kept between them: the worker's
    refresher keeps one; a reader that refreshes (no worker runs) keeps its thread's."""
    connection = getattr(_local, "connection", None)
    if connection is None:
        connection = _local.connection = connections.create_connection(PHORGE_ALIAS)
    connection.close_if_unusable_or_obsolete()
    return connection


def forget_connection() -> None:
    """Close this thread's refresh connection (a worker whose turn it was not keeps none open)."""
    _forget_connection()


def _forget_connection() -> None:
    connection = getattr(_local, "connection", None)
    _local.connection = None
    if connection is not None:
        try:
            connection.close()
        except DatabaseError:
            pass


def source() -> str:
    return stored.source_of(PHORGE_ALIAS)


def _notices(after: int) -> list[tuple[int, str, int]]:
    rows = RequeueNotice.objects.filter(id__gt=max(after, 0)).order_by("id")
    if after < 0:  # the first count reads everything: only the newest notice matters, as a starting point
        rows = RequeueNotice.objects.order_by("-id")[:1]
    return [(notice_id, phid, lowest) for notice_id, phid, lowest in rows.values_list("id", "hook_phid", "lowest_id")]


def _next_in(config: DeliveryConfig, complete: bool, seconds: float, *, idle: int = 0) -> float:
    """When the next refresh may start: the period, or DUTY times this one's length; while a first count goes
    on, a second or DUTY times this step's length; twice, then four times the period while nothing can change
    (no request queued: nothing whose due time passes), at most IDLE_MAX_SEC."""
    if not config.counts_refresh_sec:
        return 0.0
    if not complete:
        return max(BUILD_PAUSE_SEC, DUTY * seconds)
    period = max(float(config.counts_refresh_sec), DUTY * seconds)
    return max(period, min(IDLE_MAX_SEC, period * 2 ** min(idle, 2))) if idle else period


def refresh(config: DeliveryConfig, *, role: str, grace: float = 0.0, budget: int = BUDGET_IDS) -> Refreshed | None:
    """Refresh the counts if it is this process's turn (None when it is not)."""
    where = source()
    holder = _holder(role)
    if not stored.take(where, holder, grace=grace):
        return None
    started = time.monotonic()
    try:
        kept = stored.load(where)
        state = State.from_json(kept.state)
        # Read before Phorge's snapshot opens: a notice is written after its requeue commits, so the snapshot
        # sees every request it names.
        notices = _notices(state.notices)
        chunks = Chunks(lambda numbers: stored.chunks(kept.tally_id, numbers), kept.settled)
        connection = _connection()
        try:
            reader = TallyReader(connection, config)
            bounds = reader.bounds()
            if state.unchanged(bounds, notices):  # an idle Phorge: one statement, the counts stand
                state.idle += 1
                outcome = Outcome(bounds.now, True, state, {}, chunks, False, state.key_status)
            else:
                with consistent_snapshot(connection):
                    outcome = Refresh(reader, state, chunks, notices, budget=budget).run()
        except DatabaseError:
            _forget_connection()
            raise
        digest = refresh_digest(kept.attempts, outcome.now, latency_every=min(LATENCY_SEC, config.counts_refresh_sec))
        seconds = time.monotonic() - started
        next_in = _next_in(config, outcome.complete, seconds, idle=outcome.state.idle)
        saved = stored.save(
            where,
            holder,
            as_of=outcome.now,
            complete=outcome.complete,
            key_status=outcome.key_status,
            cost={
                "statements": reader.statements,
                "requests_read": outcome.ids_read,
                "seconds": round(seconds, 4),
                "counted_through": outcome.progress[0],
                "newest": outcome.progress[1],
            },
            state=outcome.state.to_json(),
            settled=totals_json(chunks.totals),
            waiting={hook: waiting.to_json() for hook, waiting in sorted(outcome.waiting.items())},
            refusals=[list(one) for one in outcome.state.refusals],
            attempts=digest.to_json(),
            changed=[chunks.loaded[number] for number in sorted(chunks.changed)],
            dropped=sorted(chunks.dropped),
            next_in=next_in,
            reset=outcome.reset,
        )
    except BaseException:
        stored.give_back(where, holder)
        raise
    if not saved:
        logger.warning(
            "the counts' refresh took longer than its turn: its result was left", extra={"event": "tally.turn_lost"}
        )
        return None
    if outcome.reset:
        logger.info("counting Phorge's retained requests from the start", extra={"event": "tally.reset"})
    return Refreshed(outcome.complete, seconds, next_in)


def _past_due(snapshot: Snapshot | None, config: DeliveryConfig) -> bool:
    if snapshot is None or snapshot.next_at is None:
        return True
    grace = min(READER_GRACE_SEC, float(config.counts_refresh_sec))
    return datetime.now(UTC).timestamp() >= snapshot.next_at.timestamp() + grace


def current(config: DeliveryConfig, *, refresh_if_due: bool = True) -> Snapshot | None:
    """The counts as last refreshed; refreshed here first when past due and no one else refreshes them.
    None when Django's database cannot be read."""
    where = source()
    try:
        snapshot = stored.read(where)
        if refresh_if_due and _past_due(snapshot, config):
            grace = min(READER_GRACE_SEC, float(config.counts_refresh_sec))
            try:
                if refresh(config, role="reader", grace=grace) is not None:
                    snapshot = stored.read(where)
            except DatabaseError as exc:
                logger.warning(
                    "the counts could not be refreshed: the last ones are shown",
                    extra={"event": "tally.refresh_failed", "error": type(exc).__name__},
                )
    except DatabaseError as exc:
        logger.warning(
            "Django's database unavailable: no counts of the retained requests",
            extra={"event": "tally.unavailable", "error": type(exc).__name__},
        )
        return None
    return snapshot
