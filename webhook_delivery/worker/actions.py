"""The operators' actions asked for from the dashboard (records/actions.py), carried out by a worker: the web
process writes none of Phorge's rows, the worker has the grant.

Called by the site-records thread (site_records.py) about once a second, never by the delivery loop: one
indexed read of Django's database when nothing is pending. A hold and a release change the holds in
Django's database (records/holds.py), which this worker then reads at once and the others at their next
heartbeat; a requeue is requeue.Requeue with the dashboard's choices, limited to the requests its dry run
showed (never more than requeue_rules.CAP_PER_ACTION), and the running workers are told as the command
tells them (records/notices.py); a retry now is an order in Django's database (records/retries.py) that
every worker reads at its heartbeat: no row of Phorge's is written for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError, connections

from ..config import DeliveryConfig
from ..phorge.herald import Hook, HookStatus, utc
from ..records import actions, holds
from ..records.models import OperatorAction
from ..records.notices import announce
from ..requeue_rules import CAP_PER_ACTION, ErrorFilter, RequeueError
from ..terminal import printable
from .requeue import Requeue
from .retry_now import RetryNow, said
from .store import Store

logger = logging.getLogger(__name__)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _requeued(done: int, shown: int, *, one: bool) -> str:
    """What a requeue did, in words: `requeued the request`, `requeued 3 of the 5 requests shown; 2 ...`."""
    if one:
        if done:
            return "requeued the request"
        return (
            "nothing was requeued: the request is no longer failed as shown (changed since, or requeued already), "
            "or Phorge would not deliver it"
        )
    if done == shown:
        return "requeued the request shown" if shown == 1 else f"requeued the {shown} requests shown"
    head = f"requeued {done} of the {_plural(shown, 'request')} shown" if done else "nothing was requeued"
    return (
        f"{head}; {_plural(shown - done, 'request')} no longer failed as shown (changed since, or requeued "
        "already) or left failed as Phorge would not deliver"
    )


def _choices(stored: object) -> tuple[int | None, int | None, list[ErrorFilter], set[int]]:
    """A requeue's choices as the dashboard stored them (checked there): since, until, errors, request ids."""
    choices = stored if isinstance(stored, dict) else {}
    moments = [choices.get("since"), choices.get("until")]
    ids, errors = choices.get("ids", []), choices.get("errors", [])
    if not all(moment is None or type(moment) is int for moment in moments) or not isinstance(ids, list):
        raise RequeueError("its choices cannot be read")
    if not all(type(row_id) is int for row_id in ids) or len(ids) > CAP_PER_ACTION or not isinstance(errors, list):
        raise RequeueError("its choices cannot be read")
    return moments[0], moments[1], [ErrorFilter.parse(str(value)) for value in errors], set(ids)


class OperatorActions:
    def __init__(
        self,
        worker_id: str,
        store: Store,
        requeue: Callable[[], Requeue],
        *,
        config: DeliveryConfig | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.store = store
        self.requeue = requeue  # made for each action: Phorge's retention setting may have changed
        self.config = config or DeliveryConfig()
        self._failing = False

    def carry_out(self) -> bool:
        """Carry out the pending actions; whether any was (the holds and notices are then read again at once)."""
        try:
            taken = actions.take_pending(self.worker_id)
        except DatabaseError:
            if not self._failing:
                logger.warning(
                    "cannot read operators' actions from Django's database (DATABASE_URL): they wait",
                    extra={"event": "action.read_failed"},
                )
            self._failing = True
            connections["default"].close_if_unusable_or_obsolete()
            return False
        if self._failing:
            logger.info("operators' actions read again", extra={"event": "action.read_again"})
            self._failing = False
        for action in taken:
            self._one(action)
        return bool(taken)

    def _one(self, action: OperatorAction) -> None:
        try:
            state, outcome, requeued = self._do(action)
        except RequeueError as exc:
            state, outcome, requeued = actions.NOT_DONE, f"nothing was requeued: {printable(str(exc))}", None
        except DatabaseError as exc:
            # Phorge's or Django's database failed: say so, without the driver's message (it may name hosts).
            connections["default"].close_if_unusable_or_obsolete()
            self.store.recycle_connection()
            state, outcome, requeued = actions.NOT_DONE, f"a database failed ({type(exc).__name__}): ask again", None
        level = logging.INFO if state == actions.DONE else logging.WARNING
        logger.log(
            level,
            f"operator's {action.kind} {state}: {outcome}",
            extra={
                "event": "action.done" if state == actions.DONE else "action.not_done",
                "action": action.id,
                "kind": action.kind,
                "hook": action.hook_phid,
                "request": action.request_phid or None,
                "requested_by": printable(action.requested_by),
                "requeued": requeued,
            },
        )
        try:
            actions.finish(action, state=state, outcome=outcome, requeued=requeued)
        except DatabaseError:
            pass  # taken again by a worker after actions.RETAKE_AFTER, and done again (each is safe to repeat)

    def _do(self, action: OperatorAction) -> tuple[str, str, int | None]:
        if action.kind == actions.REQUEUE:
            return self._requeue(action)
        hook = self.store.hooks().get(action.hook_phid)
        name = "" if hook is None else f" ({printable(hook.name)})"
        if action.kind == actions.RETRY:
            return self._retry(action, hook, name)
        if action.kind == actions.HOLD:
            if hook is None:
                return actions.NOT_DONE, "no such hook in Phorge: nothing was held", None
            hold, created = holds.hold(action.hook_phid, reason=action.reason, held_by=action.requested_by)
            if not created:
                return actions.DONE, f"already held{name} {self._describe(hold)}: nothing was changed", None
            return actions.DONE, f"held{name}: no worker starts a call for it once it has read the hold", None
        if action.kind == actions.RELEASE:
            released = holds.release(action.hook_phid)
            if released is None:
                return actions.DONE, f"not held{name}: nothing was changed", None
            return (
                actions.DONE,
                f"released{name}: its due requests go out within seconds; those that failed wait out their "
                "retry backoff (Retry now sends them at once)",
                None,
            )
        return actions.NOT_DONE, f"unknown action {printable(action.kind)!r}: nothing was done", None

    def _requeue(self, action: OperatorAction) -> tuple[str, str, int | None]:
        since, until, errors, shown = _choices(action.choices)
        requeue = self.requeue()
        plan = requeue.plan([action.hook_phid], since=since, until=until, errors=errors)
        plan.selected = [candidate for candidate in plan.selected if candidate.row.id in shown][:CAP_PER_ACTION]
        done = requeue.apply(plan).requeued if plan.selected else []
        if done:
            announce({action.hook_phid: min(candidate.row.id for candidate in done)})
        outcome = _requeued(len(done), len(shown), one=bool(action.request_phid))
        if len(shown) > len(done):
            refused = "; ".join(f"{count} {reason}" for reason, count in sorted(plan.refused.items()))
            outcome += f" ({refused})" if refused else ""
        return actions.DONE, outcome, len(done)

    def _retry(self, action: OperatorAction, hook: Hook | None, name: str) -> tuple[str, str, int | None]:
        """Make the hook's requests whose last attempt failed at or before the dry run due at once: an order
        every worker reads (records/retries.py), Phorge's rows untouched; the breaker is not cleared."""
        if hook is None or hook.status == HookStatus.DISABLED:
            return actions.NOT_DONE, f"the hook{name} is disabled or gone from Phorge: nothing was retried", None
        choices = action.choices if isinstance(action.choices, dict) else {}
        shown = choices.get("failed_up_to")
        if type(shown) is not int:
            raise RequeueError("its choices cannot be read")
        retry_now = RetryNow(self.store, self.config)
        waiting = retry_now.waiting(hook, now=self.store.db_now(), up_to=shown)
        if not waiting.rows:
            return (
                actions.DONE,
                f"nothing waits on its retry backoff any more of what failed up to {utc(waiting.now)}",
                0,
            )
        retry_now.order(waiting, asked_by=action.requested_by)
        return actions.DONE, said(waiting, self.config, name=name), len(waiting.rows)

    @staticmethod
    def _describe(hold: holds.Hold) -> str:
        text = f"by {hold.held_by} since {utc(int(hold.held_at.timestamp()))}"
        return printable(text + (f", {hold.reason}" if hold.reason else ""))
