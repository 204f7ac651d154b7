"""Failed requests back to the queue, behind `manage.py requeue_webhooks` and the dashboard's requeues.

A plan selects failed requests by hook, by when they failed and by error, and sets aside those Phorge
would not deliver (disabled hook, no HMAC key, unreadable properties) or that its garbage collector is
about to delete. Applying it changes each row with one guarded UPDATE (store.Store.requeue): a row that
changed since it was read is left alone. Requests whose hook row is gone are never selected. What may be
selected, and why a request is left failed, is shared with the dashboard's dry run (requeue_rules.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..phorge.herald import Hook, HookStatus, RequestRow
from ..phorge.outcomes import HOOK_ERROR, INVALID_OBJECT
from ..phorge.phpjson import UndecodableProperties, decode_properties
from ..requeue_rules import DISABLED, GC_MARGIN_SEC, NO_KEY, OBJECT_GONE, TOO_OLD, UNREADABLE, ErrorFilter
from ..requeue_rules import RequeueError as RequeueError
from ..requeue_rules import parse_when as parse_when
from .dispatcher import ObjectLookup
from .store import Store

BATCH = 1000
PHID_RE = re.compile(r"PHID-[A-Z0-9]{4}-[A-Za-z0-9]{1,54}")


def _error_of(row: RequestRow) -> tuple[dict[str, object] | None, tuple[str, str]]:
    """A failed request's properties (None when unreadable) and its (errorType, errorCode)."""
    try:
        properties = decode_properties(row.properties or "")
    except UndecodableProperties:
        return None, ("", "")
    return properties, (str(properties.get("errorType", "")), str(properties.get("errorCode", "")))


@dataclass(frozen=True)
class Candidate:
    row: RequestRow
    hook_name: str
    failed_at: int  # the failed attempt (lastRequestEpoch), or the written failure (dateModified) without one
    error_type: str
    error_code: str


@dataclass
class Plan:
    now: int
    since: int
    until: int
    selected: list[Candidate] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)

    @property
    def hooks(self) -> dict[str, int]:
        """{hook PHID: lowest selected request id}."""
        lowest: dict[str, int] = {}
        for candidate in self.selected:
            phid = candidate.row.webhook_phid
            lowest[phid] = min(lowest.get(phid, candidate.row.id), candidate.row.id)
        return lowest


@dataclass(frozen=True)
class Applied:
    requeued: list[Candidate]
    changed: int  # selected, but changed since they were read: left alone


class Requeue:
    def __init__(self, store: Store, retention: int | None, objects: ObjectLookup | None = None) -> None:
        self.store = store
        self.retention = retention  # Phorge's phd.garbage-collection for herald.webhooks; None: forever
        self.objects = objects

    def plan(
        self,
        hook_phids: Sequence[str],
        *,
        since: int | None = None,
        until: int | None = None,
        errors: Sequence[ErrorFilter] = (),
    ) -> Plan:
        now = self.store.db_now()
        plan = Plan(now=now, since=since if since is not None else 0, until=until if until is not None else now)
        if plan.since > plan.until:
            raise RequeueError("--since is after --until: nothing can match")
        oldest = None if self.retention is None else now - self.retention + GC_MARGIN_SEC
        for hook in self.hooks_named(hook_phids):
            refusal = DISABLED if hook.status == HookStatus.DISABLED else NO_KEY if not hook.hmac_key else None
            for row in self._failed(hook.phid, plan.since, plan.until):
                properties, error = _error_of(row)
                if errors and not any(wanted.matches(*error) for wanted in errors):
                    continue
                refusal_of_row = refusal or self._left_failed(row, properties, error, oldest)
                if refusal_of_row is not None:
                    plan.refused[refusal_of_row] += 1
                    continue
                kept = dataclasses.replace(row, properties=None)  # a week of failures stays small in memory
                plan.selected.append(Candidate(kept, hook.name, row.last_epoch or row.date_modified, *error))
        plan.selected.sort(key=lambda candidate: (candidate.failed_at, candidate.row.id))
        return plan

    def _left_failed(
        self, row: RequestRow, properties: dict[str, object] | None, error: tuple[str, str], oldest: int | None
    ) -> str | None:
        """Why a failed request of a deliverable hook stays failed, or None when it may go back to the queue."""
        if properties is None:
            return UNREADABLE
        if oldest is not None and row.date_created < oldest:
            return TOO_OLD
        if error == (HOOK_ERROR, INVALID_OBJECT) and self._object_gone(row.object_phid):
            return OBJECT_GONE
        return None

    def _object_gone(self, object_phid: str) -> bool:
        return self.objects is not None and self.objects.transactions(object_phid, []) is None

    def hooks_named(self, hook_phids: Sequence[str]) -> list[Hook]:
        """The hooks named (each checked: a PHID, in Phorge, enabled, with a key), or every hook when none is."""
        every = self.store.hooks()
        if not hook_phids:
            return sorted(every.values(), key=lambda hook: hook.phid)
        chosen = []
        for phid in dict.fromkeys(hook_phids):
            if not PHID_RE.fullmatch(phid):
                raise RequeueError(f"--hook {phid!r} is not a PHID (PHID-HWBH-...)")
            hook = every.get(phid)
            if hook is None:
                raise RequeueError(f"no hook {phid} in Phorge: its requests cannot be delivered")
            if hook.status == HookStatus.DISABLED:
                raise RequeueError(f"hook {phid} ({hook.name}) is disabled: enable it in Phorge first")
            if not hook.hmac_key:
                raise RequeueError(f"hook {phid} ({hook.name}) has no HMAC key: its requests would stay queued")
            chosen.append(hook)
        return chosen

    def _failed(self, hook_phid: str, since: int, until: int) -> Iterator[RequestRow]:
        after: tuple[int, int] = (since, 0)
        while True:
            rows = self.store.failed_attempts(hook_phid, since=since, until=until, after=after, limit=BATCH)
            yield from rows
            if len(rows) < BATCH:
                break
            after = (rows[-1].last_epoch, rows[-1].id)
        after_id = 0
        while True:
            rows = self.store.failed_unattempted(hook_phid, since=since, until=until, after_id=after_id, limit=BATCH)
            yield from rows
            if len(rows) < BATCH:
                break
            after_id = rows[-1].id

    def apply(self, plan: Plan) -> Applied:
        requeued = [candidate for candidate in plan.selected if self.store.requeue(candidate.row)]
        return Applied(requeued, len(plan.selected) - len(requeued))
