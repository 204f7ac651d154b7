"""Operators' actions (default database): hold, release and requeue, asked for from the dashboard or done by a
command, with who, when, from where, what, why and what came of it.

The web process writes a pending action and nothing else: it never writes Phorge's tables. A running
worker takes it (a compare-and-set on its state, so one worker of many does it), carries it out within a
second or so with the grant it already has (worker/actions.py), and records the outcome; the pages show it
pending, then done. A pending action no worker took within EXPIRES_AFTER is never done (a hold asked for
at noon is not made in the evening when a worker starts); one taken by a worker that died before it said
what came of it is taken again after RETAKE_AFTER (each action is safe to do twice: a hold held, a
release released, a requeue guarded on the rows it read). The commands write their rows done at once.
"""

from __future__ import annotations

import re
import secrets
import socket
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from .holds import os_user
from .models import OperatorAction

EXPIRES_AFTER = timedelta(minutes=10)
RETAKE_AFTER = timedelta(minutes=2)
REQUEUES_PER_USER = 10  # requeues one user may ask for from the dashboard within REQUEUE_WINDOW
REQUEUE_WINDOW = timedelta(minutes=10)
SHOWN = 20
FORM_KEY_RE = re.compile(r"[A-Za-z0-9_-]{20,64}")
CLI = "cli"
OUTCOME_MAX = OperatorAction._meta.get_field("outcome").max_length or 500
FROM_MAX = OperatorAction._meta.get_field("requested_from").max_length or 200

HOLD, RELEASE, REQUEUE = OperatorAction.HOLD, OperatorAction.RELEASE, OperatorAction.REQUEUE
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
) -> tuple[OperatorAction, bool]:
    """A pending action for a worker to carry out (every value already checked), and whether this call made
    it; the action of a form already sent, when it was. Raises DuplicateForm, DatabaseError."""
    fields = {
        "kind": kind,
        "hook_phid": hook_phid,
        "request_phid": request_phid,
        "reason": reason,
        "choices": dict(choices or {}),
        "requested_by": requested_by,
        "requested_from": _cut(requested_from, FROM_MAX),
        "requested_at": datetime.now(UTC),
        "state": PENDING,
    }
    try:
        with transaction.atomic(using="default"):
            action, created = OperatorAction.objects.get_or_create(form_key=form_key, defaults=fields)
    except IntegrityError:  # the same form sent twice at the same moment
        action, created = OperatorAction.objects.get(form_key=form_key), False
    if not created and (action.requested_by, action.kind, action.hook_phid, action.request_phid) != (
        requested_by,
        kind,
        hook_phid,
        request_phid,
    ):
        raise DuplicateForm("this form was already used for another action")
    return action, created


def cli_origin() -> str:
    """Where a command's action comes from: the operating system user and the host (`alice@worker-1`)."""
    return f"{os_user()}@{socket.gethostname()}"


def asked_already(form_key: str) -> bool:
    """Whether this form was sent already (its action exists)."""
    return OperatorAction.objects.filter(form_key=form_key).exists()


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


def requeues_asked(requested_by: str, now: datetime | None = None) -> int:
    """How many requeues this user asked for within REQUEUE_WINDOW (the rate limit counts these)."""
    since = (now or datetime.now(UTC)) - REQUEUE_WINDOW
    return OperatorAction.objects.filter(requested_by=requested_by, kind=REQUEUE, requested_at__gte=since).count()


def next_requeue_at(requested_by: str, now: datetime | None = None) -> datetime:
    """When this user may ask for the next requeue: the oldest of the window's requeues leaves it."""
    since = (now or datetime.now(UTC)) - REQUEUE_WINDOW
    oldest = (
        OperatorAction.objects.filter(requested_by=requested_by, kind=REQUEUE, requested_at__gte=since)
        .order_by("requested_at")
        .values_list("requested_at", flat=True)
        .first()
    )
    return (oldest or since) + REQUEUE_WINDOW


# -- the worker's side ---------------------------------------------------------------------------------


def take_pending(worker_id: str, now: datetime | None = None) -> list[OperatorAction]:
    """The actions this worker is to carry out now, oldest first, each taken by a compare-and-set on its state
    so that no other worker does it too; pending ones too old to do are marked expired instead. One indexed
    query when there is nothing to do. Raises DatabaseError."""
    now = now or datetime.now(UTC)
    waiting = Q(state=PENDING) | Q(state=TAKEN, taken_at__lt=now - RETAKE_AFTER)
    found = list(
        OperatorAction.objects.filter(waiting).order_by("requested_at", "id").values_list("id", "state", "requested_at")
    )
    taken: list[int] = []
    for action_id, state, requested_at in found:
        if state == PENDING and requested_at < now - EXPIRES_AFTER:
            OperatorAction.objects.filter(id=action_id, state=PENDING).update(
                state=EXPIRED, done_at=now, outcome=EXPIRED_OUTCOME
            )
            continue
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
