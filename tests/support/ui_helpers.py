"""Seeds and helpers shared by the dashboard, API, admin, leak and browser tests."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connections

from tests.support.helpers import Phorge
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.seeding import properties as properties  # the pages' tests build theirs with it
from webhook_delivery.records.models import DeliveryAttempt


@dataclass
class ContractState:
    """Gorge's contract fixture: 2 hooks (1 disabled), 3 queued, 2 sent, 1 failed."""

    enabled: str
    disabled: str
    requests: list[str] = field(default_factory=list)


def seed_contract(phorge: Phorge) -> ContractState:
    now = phorge.now()
    state = ContractState(
        enabled=phorge.hook("http://127.0.0.1:9/contract", name="contract enabled"),
        disabled=phorge.hook("http://127.0.0.1:9/contract", status="disabled", name="contract disabled"),
    )
    for _ in range(3):
        state.requests.append(phorge.request(state.enabled))
    for _ in range(2):
        state.requests.append(
            phorge.request(
                state.enabled,
                status="sent",
                lastRequestResult="okay",
                lastRequestEpoch=now - 5,
                properties=properties(errorType="http", errorCode=200),
            )
        )
    state.requests.append(
        phorge.request(
            state.disabled,
            status="failed",
            properties=properties(errorType="hook", errorCode="disabled"),
        )
    )
    return state


@dataclass
class BulkState:
    now: int
    hooks: list[str]
    failing: str
    rows: int


def logged_attempt(
    request: str, hook: str, *, ended: int, result: str, code: int | str, error_type: str = "http"
) -> DeliveryAttempt:
    """An attempt-log row of this service that ended at `ended` (epoch) after 50 ms (not saved)."""
    status = {"okay": "sent", "fail": "failed"}.get(result, "failed")
    return DeliveryAttempt(
        request_phid=request,
        hook_phid=hook,
        object_phid="PHID-TASK-aaaaaaaaaaaaaaaaaaaa",
        started_at=datetime.fromtimestamp(ended - 0.05, UTC),
        duration_ms=50.0,
        status=status,
        result=result,
        error_type=error_type,
        error_code=str(code),
        http_status=int(code) if str(code).isdigit() and error_type == "http" else None,
        response_bytes=2,
        worker_id="seed-host:1:abcdef",
    )


def seed_bulk(
    phorge: Phorge, *, rows: int = 4000, hooks: int = 6, seed: int = 7, spread_sec: int = 7 * 86400
) -> BulkState:
    """A busy site's retained history: mostly sent, some failed, a small queue; one hook keeps failing.
    Each attempted row's last attempt is in this service's attempt log too (the dashboard chart's source)."""
    rng = random.Random(seed)
    now = phorge.now()
    phids = [phorge.hook(f"http://127.0.0.1:9/bulk{i}", name=f"bulk hook {i}") for i in range(hooks)]
    failing = phids[-1]
    values = []
    for index in range(rows):
        hook = failing if index % 10 == 0 else rng.choice(phids[:-1])
        created = now - rng.randint(60, spread_sec)  # Phorge keeps a week; the chart shows 6 hours of it
        epoch = min(now, created + rng.randint(0, 30))
        roll = rng.random()
        if hook == failing:
            status, result, props = "failed", "fail", properties(errorType="http", errorCode=rng.choice([500, 502]))
        elif roll < 0.9:
            status, result, props = "sent", "okay", properties(errorType="http", errorCode=200)
        elif roll < 0.93:
            status, result, props = "failed", "none", properties(errorType="hook", errorCode="uri")
            epoch = 0
        elif roll < 0.96:
            status, result, props = "queued", "fail", properties(retry="forever", errorType="timeout", errorCode=28)
        else:
            status, result, props = "queued", "none", properties(retry="forever")
            epoch = 0
        modified = created if result == "none" and status == "queued" else max(created, epoch)
        values.append(
            seeding.request_row(hook, props, now=created, status=status, result=result, epoch=epoch, modified=modified)
        )
    with connections["phorge"].cursor() as cursor:
        seeding.insert(cursor, seeding.REQUEST_TABLE, values)
        cursor.execute("ANALYZE TABLE herald_webhookrequest")
        cursor.fetchall()
    DeliveryAttempt.objects.bulk_create(
        [
            logged_attempt(
                row["phid"],
                row["webhookPHID"],
                ended=row["lastRequestEpoch"],
                result=row["lastRequestResult"],
                code=json.loads(row["properties"]).get("errorCode", ""),
            )
            for row in values
            if row["lastRequestEpoch"] and row["lastRequestResult"] in ("okay", "fail")
        ],
        batch_size=1000,
    )
    return BulkState(now=now, hooks=phids, failing=failing, rows=rows)


def explain(sql: str) -> list[dict[str, Any]]:
    with connections["phorge"].cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def full_scans(sql: str) -> list[dict[str, Any]]:
    """EXPLAIN rows that read herald_webhookrequest without an index (a table scan: access type ALL)."""
    return [
        row
        for row in explain(sql)
        if row["table"] == "herald_webhookrequest" and (row["type"] == "ALL" or row["key"] is None)
    ]


def every_text(*parts: Any) -> Iterator[str]:
    for part in parts:
        yield part if isinstance(part, str) else part.decode("utf-8", "replace")
