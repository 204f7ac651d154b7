"""Phorge's herald data as values: the row types, the value domains, and the rules that read them (when a
request is due, when a hook is in error backoff) in Python and in SQL side by side, with the SQL dialect
of the two backends (MariaDB/MySQL, and SQLite for the demo). Pure: nothing here connects or writes.
A test holds each rule's two forms equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import TextChoices

REQUESTS = "herald_webhookrequest"
HOOKS = "herald_webhook"


class HookStatus(TextChoices):
    FIREHOSE = "firehose", "Firehose"
    ENABLED = "enabled", "Enabled"
    DISABLED = "disabled", "Disabled"


class RequestStatus(TextChoices):
    QUEUED = "queued", "Queued"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class RequestResult(TextChoices):
    NONE = "none", "None"
    OKAY = "okay", "Okay"
    FAIL = "fail", "Fail"


def text(value: Any) -> str:
    """A column as text: varbinary columns (PHIDs) come back as bytes from the MySQL driver."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def utc(epoch: int | None) -> str:
    """Unix seconds as shown everywhere: `2026-12-01 09:30:00 UTC`, empty for 0 or None."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if epoch else ""


@dataclass(frozen=True)
class RequestRow:
    id: int
    phid: str
    webhook_phid: str
    object_phid: str
    status: str
    last_result: str
    last_epoch: int
    date_created: int
    date_modified: int
    properties: str | None = None

    @classmethod
    def from_columns(cls, columns: Sequence[Any]) -> RequestRow:
        """A row selected as REQUEST_COLUMNS followed by `properties` (or NULL)."""
        return cls(
            id=int(columns[0]),
            phid=text(columns[1]),
            webhook_phid=text(columns[2]),
            object_phid=text(columns[3]),
            status=text(columns[4]),
            last_result=text(columns[5]),
            last_epoch=int(columns[6]),
            date_created=int(columns[7]),
            date_modified=int(columns[8]),
            properties=None if columns[9] is None else text(columns[9]),
        )


REQUEST_COLUMNS = (
    "id, phid, webhookPHID, objectPHID, status, lastRequestResult, lastRequestEpoch, dateCreated, dateModified"
)


@dataclass(frozen=True)
class Hook:
    phid: str
    name: str
    status: str
    uri: str
    hmac_key: str

    def __repr__(self) -> str:  # never print the URI or the key
        return f"Hook(phid={self.phid!r}, name={self.name!r}, status={self.status!r})"


# -- the due rule: is_due / next_due, and Dialect.due_sql / Dialect.due_since_sql -------------------------------


def is_due(row: RequestRow, now: int, lease: int, retry_backoff: int) -> bool:
    """Whether a worker may claim the row now (Dialect.due_sql is the same rule in SQL).

    Untouched rows (never attempted, dateModified = dateCreated) are due. A failed attempt waits the retry
    backoff from its lastRequestEpoch. A row whose dateModified moved past its last result is under a claim
    and waits for the lease to expire. A result write sets dateModified = lastRequestEpoch = now, which may
    equal dateCreated when created, claimed and attempted within one second: hence the result test.
    """
    if row.status != RequestStatus.QUEUED:
        return False
    if row.date_modified == row.date_created and row.last_result == RequestResult.NONE:
        return True
    failed = row.last_result == RequestResult.FAIL
    if failed and row.last_epoch > now - retry_backoff:
        return False
    return (failed and row.date_modified == row.last_epoch) or row.date_modified <= now - lease


def next_due(row: RequestRow, lease: int, retry_backoff: int) -> int:
    """The earliest database time at which `row` (as read) becomes due (Dialect.due_since_sql in SQL)."""
    if row.date_modified == row.date_created and row.last_result == RequestResult.NONE:
        return 0
    failed = row.last_result == RequestResult.FAIL
    after_retry = row.last_epoch + retry_backoff if failed else 0
    after_claim = 0 if failed and row.date_modified == row.last_epoch else row.date_modified + lease
    return max(after_retry, after_claim)


# -- the breaker: Phorge's isInErrorBackoff(), and Dialect.breaker_failure_sql ------------------------------------


def counts_toward_breaker(last_result: str, last_epoch: int, window_start: int) -> bool:
    """A failed attempt inside the window (Dialect.breaker_failure_sql in SQL). Configuration failures write
    `none` and so never count."""
    return last_result == RequestResult.FAIL and last_epoch >= window_start


def backoff_until(failure_epochs_newest_first: list[int], threshold: int, window: int) -> int | None:
    """When a hook with these failed attempts (inside the window) leaves error backoff; None: it is not in it.

    Phorge's rule: at least `threshold` failed attempts within `window` seconds.
    """
    if len(failure_epochs_newest_first) < threshold:
        return None
    return failure_epochs_newest_first[threshold - 1] + window + 1


class Dialect:
    """The SQL that differs between MariaDB/MySQL and SQLite, and the rules above in SQL."""

    def __init__(self, vendor: str) -> None:
        self.is_mysql = vendor == "mysql"
        # With query parameters, '%%' becomes '%' on both backends.
        self.now_sql = "UNIX_TIMESTAMP()" if self.is_mysql else "CAST(strftime('%%s', 'now') AS INTEGER)"

    @property
    def requests_by_result(self) -> str:
        """The request table read through key_ratelimit (webhookPHID, lastRequestResult, lastRequestEpoch).

        Queries that restrict hooks and results must reach rows through that index: without the hint the
        optimizer turns to a full scan once non-sent rows are a large share of a small table (an incident).
        """
        return f"{REQUESTS} FORCE INDEX (key_ratelimit)" if self.is_mysql else REQUESTS

    def greatest(self, a: str, b: str) -> str:
        return f"GREATEST({a}, {b})" if self.is_mysql else f"MAX({a}, {b})"

    def due_sql(self, now: str | None = None, *, positional: bool = False) -> str:
        """is_due() in SQL; placeholders %(lease)s and %(retry)s (or retry, lease positionally)."""
        now = now or self.now_sql
        retry, lease = ("%s", "%s") if positional else ("%(retry)s", "%(lease)s")
        return (
            "(status = 'queued' AND ((dateModified = dateCreated AND lastRequestResult = 'none') OR ("
            f"(lastRequestResult <> 'fail' OR lastRequestEpoch <= {now} - {retry}) AND ("
            "(lastRequestResult = 'fail' AND dateModified = lastRequestEpoch)"
            f" OR dateModified <= {now} - {lease}))))"
        )

    def due_since_sql(self) -> str:
        """next_due() in SQL, except that an untouched row is due since it was created."""
        after_retry = "CASE WHEN lastRequestResult = 'fail' THEN lastRequestEpoch + %(retry)s ELSE 0 END"
        after_claim = (
            "CASE WHEN lastRequestResult = 'fail' AND dateModified = lastRequestEpoch THEN 0 "
            "ELSE dateModified + %(lease)s END"
        )
        later = self.greatest(after_retry, after_claim)
        return f"CASE WHEN dateModified = dateCreated AND lastRequestResult = 'none' THEN dateCreated ELSE {later} END"

    @staticmethod
    def breaker_failure_sql(window_start: str) -> str:
        """counts_toward_breaker() in SQL (key_ratelimit serves it)."""
        return f"(lastRequestResult = 'fail' AND lastRequestEpoch >= {window_start})"
