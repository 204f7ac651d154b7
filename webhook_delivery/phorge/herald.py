"""Phorge's herald data as values: the row types, the value domains, and the rules that read them (when a
request is due, when a hook is in error backoff) in Python and in SQL side by side, with the SQL dialect
of the two backends (MariaDB/MySQL, and SQLite for the demo). Pure: nothing here connects or writes.
A test holds each rule's two forms equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import TextChoices

from .columns import Columns

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
    def from_record(cls, record: Mapping[str, Any]) -> RequestRow:
        """A row read by name: REQUEST_FIELDS and `properties` (or NULL)."""
        return cls.from_values(tuple(record[name] for name in ROW_FIELDS))

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> RequestRow:
        """A row from its ROW_FIELDS' values, in that order (as `Columns.picker(*ROW_FIELDS)` reads them)."""
        row_id, phid, hook, obj, status, result, epoch, created, modified, properties = values
        return cls(
            id=int(row_id),
            phid=text(phid),
            webhook_phid=text(hook),
            object_phid=text(obj),
            status=text(status),
            last_result=text(result),
            last_epoch=int(epoch),
            date_created=int(created),
            date_modified=int(modified),
            properties=None if properties is None else text(properties),
        )


REQUEST_FIELDS = (
    "id",
    "phid",
    "webhookPHID",
    "objectPHID",
    "status",
    "lastRequestResult",
    "lastRequestEpoch",
    "dateCreated",
    "dateModified",
)
REQUEST_SELECT = Columns.of(*REQUEST_FIELDS)
ROW_FIELDS = (*REQUEST_FIELDS, "properties")  # what a RequestRow is read from
REQUEST_COLUMNS = REQUEST_SELECT.sql


@dataclass(frozen=True)
class Hook:
    phid: str
    name: str
    status: str
    uri: str
    hmac_key: str

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Hook:
        """A hook read by name, as HOOK_SELECT lists it."""
        return cls(
            text(record["phid"]),
            text(record["name"]),
            text(record["status"]),
            text(record["webhookURI"]),
            text(record["hmacKey"]),
        )

    def __repr__(self) -> str:  # never print the URI or the key
        return f"Hook(phid={self.phid!r}, name={self.name!r}, status={self.status!r})"


HOOK_SELECT = Columns.of("phid", "name", "status", "webhookURI", "hmacKey")


# -- the due rule: next_due / is_due, and Dialect.due_sql / Dialect.due_since_sql, from the same pieces ---------


def _untouched(row: RequestRow) -> bool:
    """Never attempted nor claimed (UNTOUCHED_SQL)."""
    return row.date_modified == row.date_created and row.last_result == RequestResult.NONE


def _failed(row: RequestRow) -> bool:
    """The last attempt failed (FAILED_SQL)."""
    return row.last_result == RequestResult.FAIL


def _settled_failure(row: RequestRow) -> bool:
    """A failed attempt as written, not claimed since (SETTLED_FAILURE_SQL)."""
    return _failed(row) and row.date_modified == row.last_epoch


def next_due(row: RequestRow, lease: int, retry_backoff: int) -> int:
    """The earliest database time at which `row` (as read) becomes due, if it is queued.

    Untouched rows (never attempted, dateModified = dateCreated) are due at once. A failed attempt waits the
    retry backoff from its lastRequestEpoch. A row whose dateModified moved past its last result is under a
    claim and waits for the lease to expire. A result write sets dateModified = lastRequestEpoch = now, which
    may equal dateCreated when created, claimed and attempted within one second: hence the result test.
    """
    if _untouched(row):
        return 0
    after_retry = row.last_epoch + retry_backoff if _failed(row) else 0
    after_claim = 0 if _settled_failure(row) else row.date_modified + lease
    return max(after_retry, after_claim)


def is_due(row: RequestRow, now: int, lease: int, retry_backoff: int) -> bool:
    """Whether a worker may claim the row at database time `now` (never negative): Dialect.due_sql in SQL."""
    return row.status == RequestStatus.QUEUED and now >= next_due(row, lease, retry_backoff)


def retry_wait(row: RequestRow, retry_backoff: int, failed_up_to: int) -> int:
    """The retry backoff this row waits: none when an operator's Retry now covers its failed attempt (one made at
    or before `failed_up_to`, Phorge's clock), else `retry_backoff`. What next_due, is_due and the claim's SQL
    are given for it; the row itself is not changed (its failure still counts toward the breaker)."""
    if row.last_result == RequestResult.FAIL and 0 < row.last_epoch <= failed_up_to:
        return 0
    return retry_backoff


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


UNTOUCHED_SQL = "dateModified = dateCreated AND lastRequestResult = 'none'"
FAILED_SQL = "lastRequestResult = 'fail'"
SETTLED_FAILURE_SQL = f"{FAILED_SQL} AND dateModified = lastRequestEpoch"


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

    # Two SQL forms stay where Python has one: `now >= due_since_sql` would hold an untouched row back until
    # the clock reaches its dateCreated, which due_sql (the claim's test) never does.
    def due_sql(self, now: str | None = None) -> str:
        """is_due() in SQL; placeholders %(lease)s and %(retry)s."""
        now = now or self.now_sql
        retry_over = f"lastRequestEpoch <= {now} - %(retry)s"
        lease_over = f"dateModified <= {now} - %(lease)s"
        return (
            f"(status = 'queued' AND (({UNTOUCHED_SQL}) OR ("
            f"(lastRequestResult <> 'fail' OR {retry_over}) AND (({SETTLED_FAILURE_SQL}) OR {lease_over}))))"
        )

    def due_since_sql(self) -> str:
        """next_due() in SQL, except that an untouched row is due since it was created."""
        after_retry = f"CASE WHEN {FAILED_SQL} THEN lastRequestEpoch + %(retry)s ELSE 0 END"
        after_claim = f"CASE WHEN {SETTLED_FAILURE_SQL} THEN 0 ELSE dateModified + %(lease)s END"
        later = self.greatest(after_retry, after_claim)
        return f"CASE WHEN {UNTOUCHED_SQL} THEN dateCreated ELSE {later} END"

    @staticmethod
    def breaker_failure_sql(window_start: str) -> str:
        """counts_toward_breaker() in SQL (key_ratelimit serves it)."""
        return f"({FAILED_SQL} AND lastRequestEpoch >= {window_start})"
