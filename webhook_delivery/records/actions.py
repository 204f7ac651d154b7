"""Operators' actions (default database): hold, release, requeue and retry now, asked for from the dashboard or
done by a command, with who, when, from where, what, why and what came of it.

The web process writes a pending action and nothing else: it never writes Phorge's tables. A running
worker takes it (a compare-and-set on its state, so one worker of many does it), carries it out within a
second or so with the grant it already has (worker/actions.py), and records the outcome; the pages show it
pending, then done. A pending action no worker took within EXPIRES_AFTER is never done (a hold asked for
at noon is not made in the evening when a worker starts); one taken by a worker that died before it said
what came of it is taken again after RETAKE_AFTER (each action is safe to do twice: a hold held, a
release released, a requeue guarded on the rows it read). The commands write their rows done at once.

Asking is one step per user (`ask`, under the user's ActionQuota row): the same form sent twice is one action,
an action already waiting for the same hook (or request) is refused, and each user may ask for at most
PER_USER actions of a kind (holds and releases count together) within WINDOW, however many web workers
take the posts at once.
"""

from __future__ import annotations

import logging
import re
import secrets
import socket
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from ..terminal import printable
from .holds import os_user
from .models import ActionQuota, OperatorAction

logger = logging.getLogger(__name__)

EXPIRES_AFTER = timedelta(minutes=10)
RETAKE_AFTER = timedelta(minutes=2)
PER_USER = 10  # actions of a kind one user may ask for from the dashboard within WINDOW
WINDOW = timedelta(minutes=10)
SHOWN = 20
FORM_KEY_RE = re.compile(r"[A-Za-z0-9_-]{20,64}")
CLI = "cli"
OUTCOME_MAX = OperatorAction._meta.get_field("outcome").max_length or 500
FROM_MAX = OperatorAction._meta.get_field("requested_from").max_length or 200

HOLD, RELEASE, REQUEUE, RETRY = (
    OperatorAction.HOLD,
    OperatorAction.RELEASE,
    OperatorAction.REQUEUE,
    OperatorAction.RETRY,
)
# The kinds that share a user's limit, and what they are called in its refusal.
LIMITED: dict[str, tuple[tuple[str, ...], str]] = {
    HOLD: ((HOLD, RELEASE), "holds and releases"),
    RELEASE: ((HOLD, RELEASE), "holds and releases"),
    REQUEUE: ((REQUEUE,), "requeues"),
    RETRY: ((RETRY,), "retries"),
}
PENDING, TAKEN, DONE, NOT_DONE, EXPIRED = (
    OperatorAction.PENDING,
    OperatorAction.TAKEN,
    OperatorAction.DONE,
    OperatorAction.NOT_DONE,
    OperatorAction.EXPIRED,
)
EXPIRED_OUTCOME = f"no worker took it within {int(EXPIRES_AFTER.total_seconds() // 60)} minutes: nothing was done"


class DuplicateForm(ValueError):
    """The form's key names an action of someone else, or of another kind: a forged or confused submit."""


class AlreadyPending(ValueError):
    """The same action (kind, hook, request) waits for a worker already: `action` is that one."""

    def __init__(self, action: OperatorAction) -> None:
        super().__init__("the same action is waiting for a worker already")
        self.action = action


class Limited(ValueError):
    """The user asked for PER_USER actions of this kind within WINDOW: `what` names them, `again_at` says when
    the oldest leaves the window."""

    def __init__(self, what: str, again_at: datetime) -> None:
        super().__init__(f"at most {PER_USER} {what} per user within {int(WINDOW.total_seconds() // 60)} minutes")
        self.what = what
        self.again_at = again_at


def new_form_key() -> str:
    """One per form shown: the same form sent twice (a double click, a reload) is one action."""
    return secrets.token_urlsafe(24)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ask(
    kind: str,
    *,
    form_key: str,
    requested_by: str,
    requested_from: str,
    hook_phid: str,
    request_phid: str = "",
    reason: str = "",
    choices: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> tuple[OperatorAction, bool]:
    """A pending action for a worker to carry out (every value already checked), and whether this call made
    it; the action of a form already sent, when it was. One step per user: under the user's ActionQuota row,
    so that concurrent posts are counted one after the other. Raises DuplicateForm, AlreadyPending, Limited,
    DatabaseError."""
    now = now or datetime.now(UTC)
    fields = {
        "kind": kind,
        "hook_phid": hook_phid,
        "request_phid": request_phid,
        "reason": reason,
        "choices": dict(choices or {}),
        "requested_by": requested_by,
        "requested_from": _cut(requested_from, FROM_MAX),
        "requested_at": now,
        "state": PENDING,
    }
    same = (requested_by, kind, hook_phid, request_phid)
    _quota_row(requested_by, now)
    try:
        with transaction.atomic(using="default"):
            # A write first: on MariaDB and PostgreSQL it locks the user's row, on SQLite the database, until
            # the commit; a second post of the same user waits here.
            ActionQuota.objects.filter(requested_by=requested_by).update(touched_at=now)
            sent = OperatorAction.objects.filter(form_key=form_key).first()
            if sent is not None:
                if (sent.requested_by, sent.kind, sent.hook_phid, sent.request_phid) != same:
                    raise DuplicateForm("this form was already used for another action")
                return sent, False
            waiting = pending_like(kind, hook_phid, request_phid, now)
            if waiting is not None:
                raise AlreadyPending(waiting)
            kinds, what = LIMITED[kind]
            recent = OperatorAction.objects.filter(
                requested_by=requested_by, kind__in=kinds, requested_at__gt=now - WINDOW
            ).order_by("requested_at")
            if recent.count() >= PER_USER:
                oldest = recent.values_list("requested_at", flat=True).first() or now
                raise Limited(what, oldest + WINDOW)
            return OperatorAction.objects.create(form_key=form_key, **fields), True
    except IntegrityError:  # the form's key taken by another user's action at the same moment
        raise DuplicateForm("this form was already used for another action") from None


def _quota_row(requested_by: str, now: datetime) -> None:
    """The user's lock row, made if missing in one statement (a read before the write would let SQLite refuse a
    second writer at once instead of making it wait)."""
    ActionQuota.objects.bulk_create([ActionQuota(requested_by=requested_by, touched_at=now)], ignore_conflicts=True)


def pending_like(kind: str, hook_phid: str, request_phid: str, now: datetime | None = None) -> OperatorAction | None:
    """An action of this kind about this hook (and request) still to be carried out, if any: one taken by a
    worker, or one asked for within EXPIRES_AFTER."""
    now = now or datetime.now(UTC)
    waiting = Q(state=TAKEN) | Q(state=PENDING, requested_at__gte=now - EXPIRES_AFTER)
    found = OperatorAction.objects.filter(waiting, kind=kind, hook_phid=hook_phid, request_phid=request_phid)
    return found.order_by("-requested_at", "-id").first()


def cli_origin() -> str:
    """Where a command's action comes from: the operating system user and the host (`alice@worker-1`)."""
    return f"{os_user()}@{socket.gethostname()}"


def record(
    kind: str,
    *,
    requested_from: str,
    hook_phid: str,
    outcome: str,
    state: str = DONE,
    reason: str = "",
    choices: Mapping[str, Any] | None = None,
    requeued: int | None = None,
) -> OperatorAction:
    """The row of an action a command did itself: by `cli`, done at once. Raises DatabaseError."""
    now = datetime.now(UTC)
    return OperatorAction.objects.create(
        kind=kind,
        hook_phid=hook_phid,
        reason=reason,
        choices=dict(choices or {}),
        requested_by=CLI,
        requested_from=_cut(requested_from, FROM_MAX),
        requested_at=now,
        form_key=new_form_key(),
        state=state,
        taken_by=CLI,
        taken_at=now,
        done_at=now,
        requeued=requeued,
        outcome=_cut(outcome, OUTCOME_MAX),
    )


def recent(
    *, hook_phid: str | None = None, request_phid: str | None = None, limit: int = SHOWN
) -> list[OperatorAction]:
    """The newest actions: of every hook, of one hook, or about one request. Raises DatabaseError."""
    found = OperatorAction.objects.all()
    if hook_phid is not None:
        found = found.filter(hook_phid=hook_phid)
    if request_phid is not None:
        found = found.filter(request_phid=request_phid)
    return list(found.order_by("-requested_at", "-id")[:limit])


def expire_overdue(now: datetime | None = None) -> list[OperatorAction]:
    """Mark expired every pending action no worker took within EXPIRES_AFTER, each by a compare-and-set on its
    state (a worker taking it at the same moment wins or loses whole), and log each once, whichever process
    marks it: a worker's look for actions, or a page that shows them. Raises DatabaseError."""
    now = now or datetime.now(UTC)
    overdue = list(OperatorAction.objects.filter(state=PENDING, requested_at__lt=now - EXPIRES_AFTER))
    expired = []
    for action in overdue:
        if OperatorAction.objects.filter(id=action.id, state=PENDING).update(
            state=EXPIRED, done_at=now, outcome=EXPIRED_OUTCOME
        ):
            action.state, action.done_at, action.outcome = EXPIRED, now, EXPIRED_OUTCOME
            expired.append(action)
            logger.warning(
                f"operator's {action.kind} expired: {EXPIRED_OUTCOME}",
                extra={
                    "event": "action.expired",
                    "action": action.id,
                    "kind": action.kind,
                    "hook": action.hook_phid,
                    "request": action.request_phid or None,
                    "requested_by": printable(action.requested_by),
                    "requested_at": action.requested_at.isoformat(),
                },
            )
    return expired


# -- the worker's side ---------------------------------------------------------------------------------


def take_pending(worker_id: str, now: datetime | None = None) -> list[OperatorAction]:
    """The actions this worker is to carry out now, oldest first, each taken by a compare-and-set on its state
    so that no other worker does it too; pending ones too old to do are marked expired instead. One indexed
    query when there is nothing to do. Raises DatabaseError."""
    now = now or datetime.now(UTC)
    waiting = Q(state=PENDING) | Q(state=TAKEN, taken_at__lt=now - RETAKE_AFTER)
    found = list(OperatorAction.objects.filter(waiting).order_by("requested_at", "id").values_list("id", "state"))
    if any(state == PENDING for _id, state in found):
        expire_overdue(now)
    taken: list[int] = []
    for action_id, _state in found:
        if OperatorAction.objects.filter(Q(id=action_id) & waiting).update(
            state=TAKEN, taken_by=worker_id, taken_at=now
        ):
            taken.append(action_id)
    return list(OperatorAction.objects.filter(id__in=taken).order_by("requested_at", "id"))


def finish(action: OperatorAction, *, state: str, outcome: str, requeued: int | None = None) -> None:
    """What came of an action this worker took. Raises DatabaseError."""
    OperatorAction.objects.filter(id=action.id, state=TAKEN, taken_by=action.taken_by).update(
        state=state, outcome=_cut(outcome, OUTCOME_MAX), requeued=requeued, done_at=datetime.now(UTC)
    )
