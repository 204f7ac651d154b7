"""Retry now's dry run, and the hook page's part of it: the hook's queued requests whose last attempt failed and
that wait on their retry backoff (Herald's requests are `retry=forever`: a receiver's outage leaves them
queued, never `failed`), how many, when the next one is tried, and the breaker.

Two slices of `key_ratelimit`, each bounded by what a retry backoff and a breaker window can hold, never the
hook's history: its `fail` rows attempted within the last backoff (those still waiting), and its failed
attempts within the breaker's window (at most the threshold of them). What a Retry now then does is
worker/actions.py's, and the order it leaves records/retries.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import DeliveryConfig
from ..phorge.columns import Columns
from ..phorge.herald import RequestRow, backoff_until, next_due, text
from .herald import HookRow, as_int, fetch_rows, read_dialect, uncommitted_reads

SHOWN = 100  # requests listed by the dry run; the count covers every one


@dataclass(frozen=True)
class WaitingRow:
    id: int
    phid: str
    failed_at: int  # its last attempt (lastRequestEpoch)
    next_try: int  # when the backoff (or a claim's lease) lets a worker try it again, Phorge's clock


@dataclass
class RetryPreview:
    hook: HookRow
    now: int
    retry_backoff: int
    breaker_window: int
    waiting: list[WaitingRow] = field(default_factory=list)  # oldest failure first, at most SHOWN
    count: int = 0
    breaker_failures: int = 0  # failed attempts within the breaker's window (at most its threshold)
    breaker_until: int | None = None  # when the breaker lets calls go again; None: it is closed

    @property
    def next_try(self) -> int | None:
        return min((row.next_try for row in self.waiting), default=None)

    @property
    def failed_up_to(self) -> int:
        """What a Retry now confirmed from this dry run covers: failures up to the moment it was read."""
        return self.now

    @property
    def refusal(self) -> str | None:
        if self.hook.status == "disabled":
            return "the hook is disabled in Phorge: its requests fail without a call when tried"
        if self.hook.misconfigured:
            return "the hook has no HMAC key: its requests stay queued until it has one"
        return None


def _columns() -> Columns:
    return Columns.of("id", "phid", "lastRequestEpoch", "dateCreated", "dateModified")


@uncommitted_reads
def retry_preview(hook: HookRow, now: int, config: DeliveryConfig) -> RetryPreview:
    """The hook's requests that wait on their retry backoff at database time `now`, and its breaker."""
    preview = RetryPreview(hook, now, config.retry_backoff_sec, config.error_backoff_sec)
    table = read_dialect().requests_by_result
    columns = _columns()
    params = {"hook": hook.phid, "after": now - config.retry_backoff_sec, "now": now}
    found = columns.read_all(
        fetch_rows(
            f"SELECT {columns.sql} FROM {table} WHERE webhookPHID = %(hook)s AND lastRequestResult = 'fail' "
            "AND lastRequestEpoch > %(after)s AND status = 'queued' ORDER BY lastRequestEpoch, id",
            params,
        )
    )
    preview.count = len(found)
    for record in found[:SHOWN]:
        epoch = as_int(record["lastRequestEpoch"])
        created, modified = as_int(record["dateCreated"]), as_int(record["dateModified"])
        row = RequestRow(
            as_int(record["id"]), text(record["phid"]), hook.phid, "", "queued", "fail", epoch, created, modified
        )
        next_try = next_due(row, config.claim_lease_sec, config.retry_backoff_sec)
        preview.waiting.append(WaitingRow(row.id, row.phid, epoch, next_try))
    window, threshold = config.error_backoff_sec, config.error_threshold
    epochs = [
        as_int(epoch)
        for (epoch,) in fetch_rows(
            f"SELECT lastRequestEpoch FROM {table} WHERE webhookPHID = %(hook)s AND lastRequestResult = 'fail' "
            "AND lastRequestEpoch >= %(start)s ORDER BY lastRequestEpoch DESC LIMIT %(limit)s",
            {"hook": hook.phid, "start": now - window, "limit": threshold},
        )
    ]
    preview.breaker_failures = len(epochs)
    preview.breaker_until = backoff_until(epochs, threshold, window)
    return preview
