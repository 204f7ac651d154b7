"""How the admin's request list reaches its requests, newest first, a page at a time, without reading the
history: each list is a `Plan` that names the ids of one page and counts its matches up to COUNT_BOUND.

* a request's PHID: key_phid, one row;
* a hook's PHID or part of a hook's name: the hooks' entries of key_ratelimit (the index holds the id: the
  ids are found without reading a row), their status checked by id when the list is filtered by status;
* `status = queued` or `failed`, or `last result = none` or `fail`, over every hook: the same through the
  slices `none` and `fail` of every hook (Phorge's key_status (status, id) instead, where it exists);
* `sent` or `okay`, or no filter: the primary key backwards (nearly every request matches);
* an object's PHID or monogram: Phorge has no index on objectPHID, so only the newest requests are searched:
  those created in the last SEARCH_DAYS (where key_collect puts that day's first id), at most SEARCH_ROWS of
  them. The page says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..phorge.columns import in_filter
from ..phorge.herald import HOOKS, REQUESTS, text
from .herald import as_int, fetch_rows, read_dialect

COUNT_BOUND = 1000
SEARCH_DAYS = 1
SEARCH_ROWS = 25_000
CHECK_BATCH = 500  # candidate ids whose status is checked at a time
PENDING = ("none", "fail")


@dataclass
class Source:
    """One way to the ids: `SELECT id FROM <table> WHERE <where>` is in id order through its index, newest
    first; `status` (queued or failed), when set, is checked by id on the candidates it gives."""

    table: str
    where: str
    params: dict[str, Any] = field(default_factory=dict)
    status: str | None = None

    def ids(self, limit: int) -> list[int]:
        """The first `limit` matching ids, newest first."""
        if self.status is None:
            return self._candidates(limit)
        found: list[int] = []
        checked = 0
        wanted = 2 * limit + CHECK_BATCH
        while True:
            candidates = self._candidates(wanted)
            for start in range(checked, len(candidates), CHECK_BATCH):
                batch = candidates[start : start + CHECK_BATCH]
                where, params = in_filter("id", batch, "c")
                sql = f"SELECT id FROM {REQUESTS} WHERE {where} AND status = %(status)s"
                matched = {as_int(row_id) for (row_id,) in fetch_rows(sql, {**params, "status": self.status})}
                found += [row_id for row_id in batch if row_id in matched]
                if len(found) >= limit:
                    return found[:limit]
            checked = len(candidates)
            if len(candidates) < wanted:
                return found
            wanted *= 4

    def _candidates(self, limit: int) -> list[int]:
        rows = fetch_rows(
            f"SELECT id FROM {self.table} WHERE {self.where} ORDER BY id DESC LIMIT %(limit)s",
            {**self.params, "limit": limit},
        )
        return [as_int(row_id) for (row_id,) in rows]


@dataclass
class Plan:
    sources: list[Source]
    bounded: bool = False  # an object search: only the newest requests were looked at
    searched_from: int = 0  # the smallest id looked at when bounded

    def page(self, offset: int, limit: int) -> list[int]:
        """The ids of one page, newest first (several sources merged)."""
        merged = sorted({one for source in self.sources for one in source.ids(offset + limit)}, reverse=True)
        return merged[offset : offset + limit]

    def count(self) -> int:
        """The matches, up to COUNT_BOUND + 1 ("more than COUNT_BOUND")."""
        return len(self.page(0, COUNT_BOUND + 1))


def _hook_phids() -> list[str]:
    return [text(phid) for (phid,) in fetch_rows(f"SELECT phid FROM {HOOKS}", {})]


def _status_and_result(status: str | None, result: str | None) -> tuple[list[str], dict[str, Any]]:
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if status:
        clauses.append("status = %(status)s")
        params["status"] = status
    if result:
        clauses.append("lastRequestResult = %(result)s")
        params["result"] = result
    return clauses, params


def _by_hooks(hooks: Sequence[str], status: str | None, result: str | None, key_status: bool) -> Source | None:
    """Requests of these hooks through key_ratelimit; None when no result can match the filters."""
    if status == "sent":
        results = ["okay"] if result in (None, "okay") else []
    elif status in ("queued", "failed"):
        results = [one for one in PENDING if result in (None, one)]
    else:
        results = [result] if result else ["none", "okay", "fail"]
    if not results or not hooks:
        return None
    dialect = read_dialect()
    where, params = in_filter("webhookPHID", list(hooks), "h")
    kinds, more = in_filter("lastRequestResult", results, "r")
    check = status if status in ("queued", "failed") else None
    if check and key_status and dialect.is_mysql:
        # The fork's index: the status in the index itself, the ids in its order.
        return Source(
            f"{REQUESTS} FORCE INDEX (key_status)",
            f"status = %(s)s AND {where} AND {kinds}",
            {**params, **more, "s": check},
        )
    return Source(dialect.requests_by_result, f"{where} AND {kinds}", {**params, **more}, status=check)


def _every(status: str | None, result: str | None, key_status: bool) -> Source | None:
    if status in ("queued", "failed") or result in PENDING:
        if key_status and status and read_dialect().is_mysql:
            clauses, params = _status_and_result(status, result)
            return Source(f"{REQUESTS} FORCE INDEX (key_status)", " AND ".join(clauses), params)
        return _by_hooks(_hook_phids(), status, result, key_status=False)
    clauses, params = _status_and_result(status, result)
    return Source(REQUESTS, " AND ".join(clauses) or "1 = 1", params)


def _first_id_since(epoch: int) -> int:
    """The first id created at or after `epoch`, through key_collect (one entry read)."""
    rows = fetch_rows(
        f"SELECT id FROM {REQUESTS} WHERE dateCreated >= %(since)s ORDER BY dateCreated, id LIMIT 1", {"since": epoch}
    )
    return as_int(rows[0][0]) if rows else 0


def _newest() -> tuple[int, int]:
    (row,) = fetch_rows(f"SELECT (SELECT MAX(id) FROM {REQUESTS}), {read_dialect().now_sql}", {})
    return as_int(row[0]), as_int(row[1])


def plan(
    *,
    request_phid: str | None = None,
    hooks: Sequence[str] = (),
    objects: Sequence[str] = (),
    searched: bool = False,
    status: str | None = None,
    result: str | None = None,
    key_status: bool = False,
) -> Plan:
    """The plan of one list: a request's PHID, or hooks and objects (a search finds either), or every request
    (no search), filtered by status and last result."""
    clauses, params = _status_and_result(status, result)
    if request_phid is not None:
        where = " AND ".join(["phid = %(phid)s", *clauses])
        return Plan([Source(REQUESTS, where, {**params, "phid": request_phid})])
    if not searched:
        source = _every(status, result, key_status)
        return Plan([source] if source else [])
    sources = []
    if hooks and (found := _by_hooks(hooks, status, result, key_status)) is not None:
        sources.append(found)
    bounded, floor = False, 0
    if objects:
        newest, now = _newest()
        since = now - SEARCH_DAYS * 86400
        floor = max(_first_id_since(since) or newest + 1, newest - SEARCH_ROWS + 1, 1)
        where, more = in_filter("objectPHID", list(objects), "o")
        bounds = [f"id >= {floor}", f"dateCreated >= {int(since)}"]
        sources.append(Source(REQUESTS, " AND ".join([*bounds, where, *clauses]), {**params, **more}))
        bounded = True
    return Plan(sources, bounded=bounded, searched_from=floor)
