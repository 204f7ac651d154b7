"""The alert watcher's own reads of Phorge's herald tables, beside the queue health it shares with the pages
(herald.py): the failures of an incident, the newest failure of each hook, and what is near Phorge's
garbage collection. Each is one query on key_ratelimit, or a primary-key lookup per 500 ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..phorge.columns import Columns, Record, in_filter
from ..phorge.herald import REQUESTS, Dialect, text
from .herald import PENDING_RESULTS, as_int, fetch_rows, hook_filter, json_text, read_dialect


@dataclass(frozen=True)
class Incident:
    """A hook's requests whose last attempt failed after its last success: the failures of this incident."""

    first: int  # the earliest of their failed attempts (lastRequestEpoch)
    requests: int
    errors: tuple[tuple[str, str, int], ...]  # (errorType, errorCode, requests), most first


def _incident_columns(dialect: Dialect) -> Columns:
    return Columns.of(
        "webhookPHID",
        error_type=f"{json_text(dialect, 'errorType')} AS error_type",
        error_code=f"{json_text(dialect, 'errorCode')} AS error_code",
        requests="COUNT(*)",
        first="MIN(lastRequestEpoch)",
    )


def incidents(last_success: Mapping[str, int]) -> dict[str, Incident]:
    """Per hook (PHID: its last success, 0 for none), the requests that failed after that success, where
    Phorge still has them, by error: one key_ratelimit range per hook, in one query."""
    if not last_success:
        return {}
    clauses: list[str] = []
    params: dict[str, Any] = {}
    for index, (phid, success) in enumerate(last_success.items()):
        clauses.append(
            f"(webhookPHID = %(h{index})s AND lastRequestResult = 'fail' AND lastRequestEpoch > %(s{index})s)"
        )
        params[f"h{index}"], params[f"s{index}"] = phid, success
    dialect = read_dialect()
    columns = _incident_columns(dialect)
    rows = fetch_rows(
        f"SELECT {columns.sql} FROM {dialect.requests_by_result} "
        f"WHERE {' OR '.join(clauses)} GROUP BY webhookPHID, error_type, error_code",
        params,
    )
    grouped: dict[str, list[Record]] = {}
    for row in columns.read_all(rows):
        grouped.setdefault(text(row["webhookPHID"]), []).append(row)
    found = {}
    for phid, groups in grouped.items():
        errors = sorted(
            (
                (text(g["error_type"] or ""), text(g["error_code"] or ""), as_int(g["requests"]))
                for g in groups
                if g["error_type"] is not None
            ),
            key=lambda error: (-error[2], error[0], error[1]),
        )
        found[phid] = Incident(
            first=min(as_int(g["first"]) for g in groups),
            requests=sum(as_int(g["requests"]) for g in groups),
            errors=tuple(errors),
        )
    return found


@dataclass(frozen=True)
class LastError:
    """A hook's newest failed attempt: its stored error and whose request it was."""

    error_type: str
    error_code: str
    request_phid: str
    object_phid: str


def last_errors(phids: Sequence[str]) -> dict[str, LastError]:
    """The newest failed attempt of each hook that has one: errorType/errorCode, request and object (one query)."""
    dialect = read_dialect()
    columns = Columns.of(
        "webhookPHID",
        "phid",
        "objectPHID",
        error_type=json_text(dialect, "errorType"),
        error_code=json_text(dialect, "errorCode"),
    )
    where, params = hook_filter(phids)
    rows = fetch_rows(
        f"SELECT {columns.sql} FROM {REQUESTS} JOIN ("
        f"SELECT webhookPHID AS newest_hook, MAX(lastRequestEpoch) AS newest FROM {dialect.requests_by_result} "
        f"WHERE {where} AND lastRequestResult = 'fail' GROUP BY webhookPHID) AS newest_fail "
        "ON webhookPHID = newest_hook AND lastRequestResult = 'fail' AND lastRequestEpoch = newest ORDER BY id",
        params,
    )
    return {
        text(r["webhookPHID"]): LastError(
            text(r["error_type"]), text(r["error_code"] or ""), text(r["phid"]), text(r["objectPHID"])
        )
        for r in columns.read_all(rows)
        if r["error_type"] is not None
    }


def _queued_before(columns: Columns, phids: Sequence[str], edge: int, tail: str) -> list[Record]:
    """The hooks' queued requests created at or before `edge`: one range of key_ratelimit's pending slice."""
    where, params = hook_filter(phids)
    rows = fetch_rows(
        f"SELECT {columns.sql} FROM {read_dialect().requests_by_result} "
        f"WHERE {where} AND {PENDING_RESULTS} AND status = 'queued' AND dateCreated <= %(edge)s {tail}",
        {**params, "edge": edge},
    )
    return columns.read_all(rows)


@dataclass(frozen=True)
class NearCollection:
    hook_phid: str
    requests: int
    oldest: int  # dateCreated of the hook's oldest queued request


NEAR_COLLECTION = Columns.of("webhookPHID", requests="COUNT(*)", oldest="MIN(dateCreated)")


def near_collection(phids: Sequence[str], edge: int) -> list[NearCollection]:
    """Per hook, the queued requests created at or before `edge` (Phorge collects them next): how many and
    the oldest."""
    return [
        NearCollection(text(r["webhookPHID"]), as_int(r["requests"]), as_int(r["oldest"]))
        for r in _queued_before(NEAR_COLLECTION, phids, edge, "GROUP BY webhookPHID")
    ]


@dataclass(frozen=True)
class QueuedRequest:
    id: int
    phid: str
    hook_phid: str
    date_created: int


QUEUED_REQUEST = Columns.of("id", "phid", "webhookPHID", "dateCreated")


def queued_near_collection(phids: Sequence[str], edge: int, limit: int) -> list[QueuedRequest]:
    """At most `limit` queued requests of these hooks created at or before `edge`, one by one (the same range
    as near_collection)."""
    return [
        QueuedRequest(as_int(r["id"]), text(r["phid"]), text(r["webhookPHID"]), as_int(r["dateCreated"]))
        for r in _queued_before(QUEUED_REQUEST, phids, edge, f"LIMIT {int(limit)}")
    ]


STATUS_LOOKUP_BATCH = 500
REQUEST_STATUS = Columns.of("id", "status")


def request_statuses(ids: Sequence[int]) -> dict[int, str]:
    """The status of each of these requests that still exists: one primary-key lookup per 500 ids."""
    found: dict[int, str] = {}
    for start in range(0, len(ids), STATUS_LOOKUP_BATCH):
        where, params = in_filter("id", ids[start : start + STATUS_LOOKUP_BATCH], "id")
        rows = fetch_rows(f"SELECT {REQUEST_STATUS.sql} FROM {REQUESTS} WHERE {where}", params)
        found.update({as_int(r["id"]): text(r["status"]) for r in REQUEST_STATUS.read_all(rows)})
    return found
