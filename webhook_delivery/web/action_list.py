"""The operators' actions as the pages show them: each with what its state means now, in words. A pending
action past its expiry is marked expired as the page reads it (records/actions.expire_overdue, logged
`action.expired` once, by whichever process marks it first), so that the page never says "pending" of an
action no worker will carry out; one waiting while no worker runs says so, and until when it waits."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError

from ..records import actions
from ..records.heartbeat import workers
from ..records.models import OperatorAction

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShownAction:
    action: OperatorAction
    note: str  # what its state means now: who carries it out, or what it waits for and until when

    @property
    def pending(self) -> bool:
        return self.action.pending


def note(action: OperatorAction, *, worker_running: bool) -> str:
    if action.state == actions.TAKEN:
        return f"being carried out by {action.taken_by}"
    if action.state != actions.PENDING:
        return ""
    if worker_running:
        return "waiting for a worker: the running ones look for actions every second"
    expires = action.requested_at + actions.EXPIRES_AFTER
    return f"no worker is running: this action waits until {expires.astimezone(UTC):%H:%M:%S} UTC, then expires"


def shown_actions(
    *, hook_phid: str | None = None, request_phid: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The page's actions (of every hook, of one, about one request), whether one is still to be carried out
    (the page then reloads itself until it is), and the kinds still to be carried out (their forms are not
    offered again). Left out when Django's database cannot be read."""
    now = now or datetime.now(UTC)
    try:
        actions.expire_overdue(now)
        found = actions.recent(hook_phid=hook_phid, request_phid=request_phid)
        running = any(worker.alive for worker in workers(now)) if any(a.pending for a in found) else True
    except DatabaseError as exc:
        logger.warning(
            "Django's database unavailable for operators' actions",
            extra={"event": "page.site_unavailable", "error": type(exc).__name__},
        )
        return {}
    shown = [ShownAction(action, note(action, worker_running=running)) for action in found]
    return {
        "actions": shown,
        "actions_pending": any(item.pending for item in shown),
        "pending_kinds": sorted({item.action.kind for item in shown if item.pending}),
    }
