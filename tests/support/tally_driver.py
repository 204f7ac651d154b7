"""Changes of every kind to Phorge's request table, each followed by the counts the pages show and a full count
of the same table at the moment they state (tests/support/tally.py): one JSON line per step on stdout.

Run in a process of its own on the production settings, against whichever herald database the environment
names (MariaDB, or SQLite as the demo runs), with a real receiver and the real worker:

    python -m tests.support.tally_driver
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gorge_site.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connections  # noqa: E402

from tests.support.receiver import Receiver  # noqa: E402
from tests.support.tally import Counted, full_count, shown  # noqa: E402
from webhook_delivery.config import PHORGE_ALIAS  # noqa: E402
from webhook_delivery.phorge import seeding  # noqa: E402
from webhook_delivery.reads import queue, tally_refresh  # noqa: E402
from webhook_delivery.records import holds  # noqa: E402
from webhook_delivery.records.notices import announce  # noqa: E402
from webhook_delivery.worker.loop import build_worker  # noqa: E402
from webhook_delivery.worker.requeue import Requeue  # noqa: E402
from webhook_delivery.worker.store import Store  # noqa: E402

CONFIG = dataclasses.replace(settings.GORGE_WEBHOOK, retry_backoff_sec=1, delivery_timeout=3.0, claim_lease_sec=8)


def execute(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connections[PHORGE_ALIAS].cursor() as cursor:
        cursor.execute(sql, params or [])
        return list(cursor.fetchall()) if cursor.description else []


def now() -> int:
    return int(Store(PHORGE_ALIAS).db_now())


def hook(uri: str, name: str, **columns: Any) -> str:
    row = seeding.hook_row(uri, now=now(), name=name, **columns)
    with connections[PHORGE_ALIAS].cursor() as cursor:
        seeding.insert(cursor, seeding.HOOK_TABLE, [row])
    return str(row["phid"])


def requests(hook_phid: str, count: int, *, retry: str = "never", **columns: Any) -> None:
    at = columns.pop("now", now())
    rows = [
        seeding.request_row(hook_phid, seeding.properties(retry=retry, triggers=[hook_phid], **columns), now=at)
        for _ in range(count)
    ]
    with connections[PHORGE_ALIAS].cursor() as cursor:
        seeding.insert(cursor, seeding.REQUEST_TABLE, rows)


def deliver() -> None:
    build_worker(CONFIG, once=True).run(handle_signals=False)


def check(step: str) -> None:
    health = queue.queue_health(CONFIG)
    truth = full_count(CONFIG, health.counted_at or 0)
    figures = shown(health)
    mismatched = [
        {"hook": phid, "shown": _plain(one), "counted": _plain(truth.get(phid, Counted()))}
        for phid, one in figures.items()
        if _plain(one) != _plain(truth.get(phid, Counted()))
    ]
    line = {
        "step": step,
        "complete": health.complete,
        "counted_at": health.counted_at,
        "queued": health.queued,
        "sent": health.sent,
        "failed": health.failed,
        "due": health.due_now,
        "due_held": health.due_held,
        "errors": sum(e.count for h in health.hooks for e in h.errors),
        "mismatched": mismatched,
    }
    print(json.dumps(line), flush=True)


def _plain(counted: Counted) -> list[Any]:
    errors = sorted([kind, code, count] for (kind, code), count in counted.errors.items() if count)
    return [counted.queued, counted.sent, counted.failed, counted.due, counted.due_since, counted.refused_at, errors]


def main() -> None:
    vendor = connections[PHORGE_ALIAS].vendor
    with Receiver() as receiver:
        ok = hook(receiver.url("/ok/ok"), "ok")
        broken = hook(receiver.url("/broken/s500"), "broken")
        flaky = hook(receiver.url("/flaky/s503"), "flaky")
        off = hook(receiver.url("/off/ok"), "off", status="disabled")
        held = hook(receiver.url("/held/ok"), "held")
        check("no requests")
        requests(ok, 12)
        requests(broken, 6)
        requests(flaky, 4, retry="forever")
        requests(off, 3)
        requests(held, 5)
        check("queued")
        holds.hold(held, reason="repairs", held_by="tests")
        deliver()
        check("delivered, failed, retrying, refused, held")
        # Phorge's own PHP worker: requests it wrote already delivered, and two of the held hook's it sent.
        requests(ok, 3)
        execute(
            "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = "
            "dateCreated, dateModified = dateCreated WHERE status = 'queued' AND webhookPHID = %s",
            [ok],
        )
        first_two = [
            row_id
            for (row_id,) in execute(
                "SELECT id FROM herald_webhookrequest WHERE webhookPHID = %s ORDER BY id LIMIT 2", [held]
            )
        ]
        execute(
            "UPDATE herald_webhookrequest SET status = 'sent', lastRequestResult = 'okay', lastRequestEpoch = "
            f"dateCreated WHERE id IN ({', '.join(str(i) for i in first_two)})",
        )
        check("written and delivered by PHP")
        # The broken receiver is repaired: its failed requests are put back in the queue and delivered.
        execute("UPDATE herald_webhook SET webhookURI = %s WHERE phid = %s", [receiver.url("/broken/ok"), broken])
        store = Store(PHORGE_ALIAS)
        requeue = Requeue(store, None)
        applied = requeue.apply(requeue.plan([broken]))
        announce({broken: min(candidate.row.id for candidate in applied.requeued)})
        check("requeued")
        deliver()
        check("requeued and delivered")
        holds.release(held)
        deliver()
        check("released and delivered")
        # Phorge's garbage collector: the oldest requests, 100 at a time (SQLite has no DELETE ... LIMIT).
        execute(
            "UPDATE herald_webhookrequest SET dateCreated = dateCreated - 700000 WHERE id IN "
            "(SELECT id FROM (SELECT id FROM herald_webhookrequest ORDER BY id LIMIT 8) AS oldest)"
        )
        if vendor == "mysql":  # Phorge's own statement
            execute("DELETE FROM herald_webhookrequest WHERE dateCreated < %s LIMIT 100", [now() - 604800])
        else:
            execute(
                "DELETE FROM herald_webhookrequest WHERE id IN "
                "(SELECT id FROM herald_webhookrequest WHERE dateCreated < %s LIMIT 100)",
                [now() - 604800],
            )
        check("collected")
        # A failed request put back by hand, with no notice: not seen until the sweep (the check fails), then
        # found by the sweep; with key_status, at once.
        tally_refresh.SWEEP_SEC = 3600
        execute(
            "UPDATE herald_webhookrequest SET status = 'queued', lastRequestResult = 'none', lastRequestEpoch = 0, "
            "dateModified = dateCreated WHERE webhookPHID = %s AND status = 'failed'",
            [off],
        )
        check("put back by hand, not seen yet")
        tally_refresh.SWEEP_SEC = 0
        check("put back by hand, swept")
        tally_refresh.SWEEP_SEC = 3600
        tally_refresh.KEY_STATUS_SEC = 0  # the key is looked for every ten minutes: at once here
        if vendor == "mysql":
            execute("ALTER TABLE herald_webhookrequest ADD KEY key_status (status, id)")
        else:
            execute("CREATE INDEX herald_webhookrequest_key_status ON herald_webhookrequest (status, id)")
        requests(off, 2)
        deliver()
        check("refused again")
        execute(
            "UPDATE herald_webhookrequest SET status = 'queued', lastRequestResult = 'none', lastRequestEpoch = 0, "
            "dateModified = dateCreated WHERE webhookPHID = %s AND status = 'failed'",
            [off],
        )
        check("put back by hand, through key_status")


if __name__ == "__main__":
    sys.exit(main())
