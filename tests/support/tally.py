"""The test of truth for the counts the pages show: a full count of Phorge's request table, the way the pages
counted it before the tally kept the counts (every request read at each view), at a given moment; and the
statements of the tally's refreshes, which run on a connection of their own."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connections

from webhook_delivery.config import PHORGE_ALIAS, DeliveryConfig
from webhook_delivery.phorge.columns import positional
from webhook_delivery.phorge.herald import REQUESTS, Dialect, text
from webhook_delivery.reads import counts
from webhook_delivery.reads.health import QueueHealth
from webhook_delivery.reads.herald import json_text


@dataclass
class Counted:
    """One hook's figures by a full count."""

    queued: int = 0
    sent: int = 0
    failed: int = 0
    due: int = 0
    due_since: int | None = None
    refused_at: int | None = None
    errors: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))


def full_count(config: DeliveryConfig, now: int, alias: str = PHORGE_ALIAS) -> dict[str, Counted]:
    """Every request read, grouped as the pages group them, due at `now`: per hook PHID."""
    dialect = Dialect(str(connections[alias].vendor))
    due = dialect.due_sql("%(now)s")
    sql = (
        f"SELECT webhookPHID, status, lastRequestResult, {json_text(dialect, 'errorType')} AS t, "
        f"{json_text(dialect, 'errorCode')} AS c, COUNT(*), "
        "MAX(CASE WHEN lastRequestResult = 'none' AND status = 'failed' THEN dateModified END), "
        f"SUM(CASE WHEN {due} THEN 1 ELSE 0 END), MIN(CASE WHEN {due} THEN {dialect.due_since_sql()} END) "
        f"FROM {REQUESTS} GROUP BY webhookPHID, status, lastRequestResult, t, c"
    )
    text_sql, values = positional(sql, {"now": now, "lease": config.claim_lease_sec, "retry": config.retry_backoff_sec})
    counted: dict[str, Counted] = defaultdict(Counted)
    with connections[alias].cursor() as cursor:
        cursor.execute(text_sql, values)
        rows = cursor.fetchall()
    for hook, status, result, error_type, error_code, requests, refused_at, due_n, since in rows:
        one = counted[text(hook)]
        status, result = text(status), text(result)
        if result == "okay":
            one.sent += int(requests)
        elif result in ("none", "fail"):
            if status == "queued":
                one.queued += int(requests)
            elif status == "failed":
                one.failed += int(requests)
            if error_type is not None:
                one.errors[(text(error_type), text(error_code))] += int(requests)
        if refused_at is not None:
            one.refused_at = max(one.refused_at or 0, int(refused_at))
        one.due += int(due_n or 0)
        if since is not None:
            one.due_since = int(since) if one.due_since is None else min(one.due_since, int(since))
    return dict(counted)


def shown(health: QueueHealth) -> dict[str, Counted]:
    """The figures the pages show, per hook, in the same form."""
    found: dict[str, Counted] = {}
    for hook in health.hooks:
        errors: dict[tuple[str, str], int] = defaultdict(int)
        for error in hook.errors:
            errors[(error.error_type, error.error_code)] = error.count
        found[hook.phid] = Counted(
            hook.queued,
            hook.sent,
            hook.failed,
            hook.due,
            hook.oldest_due_since,
            hook.last_configuration_failure,
            errors,
        )
    return found


def assert_counts_true(health: QueueHealth, config: DeliveryConfig) -> None:
    """Every figure shown equals a full count of the same table at the moment the counts say."""
    assert health.counts_known and health.complete and health.counted_at is not None
    truth = full_count(config, health.counted_at)
    hooks = {hook.phid for hook in health.hooks}
    expected = {phid: truth.get(phid, Counted()) for phid in hooks}
    for one in expected.values():
        one.errors = defaultdict(int, {key: n for key, n in one.errors.items() if n})
    assert shown(health) == expected
    assert health.queued == sum(one.queued for one in expected.values())
    assert health.sent == sum(one.sent for one in expected.values())
    assert health.failed == sum(one.failed for one in expected.values())


def refresh_statements(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Record what the tally's refreshes send (each on a connection of its own): call the result to read them."""
    made: list[Any] = []
    original = connections.create_connection

    def recording(alias: str) -> Any:
        wrapper = original(alias)
        wrapper.force_debug_cursor = True
        made.append(wrapper)
        return wrapper

    monkeypatch.setattr(connections, "create_connection", recording)
    counts._forget_connection()  # the next refresh opens its connection again, recorded
    return lambda: [query["sql"] for wrapper in made if wrapper.alias == PHORGE_ALIAS for query in wrapper.queries]
