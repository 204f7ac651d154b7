"""The dashboard's dry run of a requeue: which failed requests of a hook `requeue_webhooks` would select with the
same choices (requeue_rules.py), read without loading their `properties`.

The same two slices of `key_ratelimit` as the worker's plan (worker/requeue.py): requests whose last attempt
failed within the window, and requests failed without an attempt (hook errors) whose failure was written
within it. The same refusals, but one: whether a request's object was deleted in Phorge is checked only by
the worker when it requeues (it reads Phorge's other databases); its outcome says how many it left failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..phorge.columns import Columns
from ..phorge.herald import text
from ..requeue_rules import CAP_PER_ACTION, DISABLED, GC_MARGIN_SEC, NO_KEY, TOO_OLD, UNREADABLE, ErrorFilter
from .herald import HookRow, as_int, fetch_rows, json_text, read_dialect, uncommitted_reads


@dataclass(frozen=True)
class PreviewRow:
    id: int
    phid: str
    failed_at: int  # the failed attempt (lastRequestEpoch), or the written failure (dateModified) without one
    error_type: str
    error_code: str


@dataclass
class RequeuePreview:
    hook: HookRow
    now: int
    since: int
    until: int
    errors: list[ErrorFilter]
    matched: list[PreviewRow] = field(default_factory=list)  # every one the worker would requeue, oldest failure first
    refused: Counter[str] = field(default_factory=Counter)

    @property
    def hook_refusal(self) -> str | None:
        """Why none of the hook's requests can be requeued (the command refuses such a hook by name)."""
        if self.hook.status == "disabled":
            return DISABLED
        return NO_KEY if self.hook.misconfigured else None

    @property
    def shown(self) -> list[PreviewRow]:
        """What one action requeues: the oldest failures, at most CAP_PER_ACTION."""
        return self.matched[:CAP_PER_ACTION]

    @property
    def left_failed(self) -> list[tuple[str, int]]:
        """(why, how many) of the requests that match but are left failed."""
        return sorted(self.refused.items())

    @property
    def beyond_cap(self) -> int:
        return max(0, len(self.matched) - CAP_PER_ACTION)


def _columns() -> Columns:
    dialect = read_dialect()
    return Columns.of(
        "id",
        "phid",
        "lastRequestEpoch",
        "dateModified",
        "dateCreated",
        is_json="JSON_VALID(properties)" if dialect.is_mysql else "json_valid(properties)",
        error_type=json_text(dialect, "errorType", only_failed=False),
        error_code=json_text(dialect, "errorCode", only_failed=False),
    )


@uncommitted_reads
def requeue_preview(
    hook: HookRow,
    now: int,
    *,
    since: int | None,
    until: int | None,
    errors: Sequence[ErrorFilter],
    retention: int | None,
) -> RequeuePreview:
    """The hook's failed requests a requeue with these choices would put back (`retention`: Phorge's
    phd.garbage-collection for herald.webhooks, None for forever)."""
    preview = RequeuePreview(hook, now, since or 0, now if until is None else until, list(errors))
    if preview.hook_refusal is not None or preview.since > preview.until:
        return preview
    columns = _columns()
    table = read_dialect().requests_by_result
    params = {"hook": hook.phid, "since": preview.since, "until": preview.until}
    rows = fetch_rows(
        f"SELECT {columns.sql} FROM {table} WHERE webhookPHID = %(hook)s AND lastRequestResult = 'fail' "
        "AND lastRequestEpoch BETWEEN %(since)s AND %(until)s AND status = 'failed'",
        params,
    )
    rows += fetch_rows(
        f"SELECT {columns.sql} FROM {table} WHERE webhookPHID = %(hook)s AND lastRequestResult = 'none' "
        "AND lastRequestEpoch = 0 AND status = 'failed' AND dateModified BETWEEN %(since)s AND %(until)s",
        params,
    )
    oldest = None if retention is None else now - retention + GC_MARGIN_SEC
    for found in columns.read_all(rows):
        readable = bool(found["is_json"])
        error_type = text(found["error_type"]) if readable and found["error_type"] is not None else ""
        error_code = text(found["error_code"]) if readable and found["error_code"] is not None else ""
        if errors and not any(wanted.matches(error_type, error_code) for wanted in errors):
            continue
        if not readable:
            preview.refused[UNREADABLE] += 1
        elif oldest is not None and as_int(found["dateCreated"]) < oldest:
            preview.refused[TOO_OLD] += 1
        else:
            failed_at = as_int(found["lastRequestEpoch"]) or as_int(found["dateModified"])
            preview.matched.append(
                PreviewRow(as_int(found["id"]), text(found["phid"]), failed_at, error_type, error_code)
            )
    preview.matched.sort(key=lambda row: (row.failed_at, row.id))
    return preview
