"""One contract, every store: store.Store in each of its ways to write (writes.py) and twins.MemoryStore.
store.Store runs on Phorge's real tables on MariaDB (the clock fixed with the session's own `SET timestamp`),
on its own connection (CursorWrites) and through a session pool (PooledWrites), and on SQLite as the demo
runs it (ReturningWrites; the clock fixed by standing in for SQLite's strftime). What the job and the loop
rely on holds for all, so a test that runs the worker on the twin says something about the real thing.
StoreContract holds the tests; each lane runs them on its stores: tests/unit/test_store_contract.py on the
twin, tests/db/test_store_contract.py on the others."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Protocol

from django.db import connections

from tests.support.clock import PhorgeClock
from tests.support.helpers import Phorge
from webhook_delivery.config import PHORGE_ALIAS
from webhook_delivery.demo.sqlite_schema import translate
from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.herald import RequestRow
from webhook_delivery.sql import PHORGE_SCHEMA
from webhook_delivery.worker.sessions import SessionPool
from webhook_delivery.worker.store import INLINE_PROPERTIES, Store
from webhook_delivery.worker.twins import MemoryStore
from webhook_delivery.worker.writes import CursorWrites, PooledWrites, ReturningWrites

NOW = 1_764_620_000
LEASE, RETRY = 60, 300
PROPERTIES = json.dumps({"retry": "forever", "transactionPHIDs": [], "triggerPHIDs": []})


class Seeded(Protocol):
    """A store to test, with a way to seed it as Phorge writes and to move its clock."""

    store: Any

    def hook(self, phid: str) -> str: ...
    def request(self, hook: str, *, created: int, properties: str = ..., **columns: Any) -> int: ...
    def at(self, now: int) -> None: ...
    def row(self, row_id: int) -> RequestRow: ...


class OnMemory:
    def __init__(self) -> None:
        self.store = MemoryStore(NOW)

    def hook(self, phid: str) -> str:
        return self.store.add_hook(phid, uri="http://127.0.0.1:9/x")

    def request(self, hook: str, *, created: int, properties: str = PROPERTIES, **columns: Any) -> int:
        return self.store.add_request(hook, properties, created=created, **_row_fields(columns))

    def at(self, now: int) -> None:
        self.store.now = now

    def row(self, row_id: int) -> RequestRow:
        return self.store.rows[row_id]


class OnMariaDB:
    def __init__(self, phorge: Phorge) -> None:
        self.phorge = phorge
        self.store = Store()
        assert type(self.store.writes) is CursorWrites
        self.clock = PhorgeClock(phorge, NOW)

    def hook(self, phid: str) -> str:
        self.phorge.execute("DELETE FROM herald_webhook WHERE phid = %s", (phid,))
        from webhook_delivery.phorge import seeding

        row = seeding.hook_row("http://127.0.0.1:9/x", now=NOW, name="hook", status="enabled", hmac_key=None)
        row["phid"] = phid
        self.phorge.insert_hook_row(row)
        return phid

    def request(self, hook: str, *, created: int, properties: str = "", **columns: Any) -> int:
        phid = self.phorge.request(hook, created=created, properties=properties or PROPERTIES, **columns)
        return int(self.phorge.row(phid)["id"])

    def at(self, now: int) -> None:
        self.clock.set(now)

    def row(self, row_id: int) -> RequestRow:
        found, _now = self.store.fetch([row_id])
        [row] = found
        return row


class OnPooledMariaDB(OnMariaDB):
    """The same tables through a session pool of two connections, as the delivery threads use the store:
    the reads on the one it lends, the claims and writes in the driver's own calls on the one it keeps, a
    write and a claim in one round trip. Both sessions keep the fixed clock too."""

    def __init__(self, phorge: Phorge) -> None:
        super().__init__(phorge)
        self.pool = SessionPool(PHORGE_ALIAS, 2)
        assert self.pool.batches, "one connection kept: a write and a claim go in one round trip"
        self.store = Store(pool=self.pool)
        assert type(self.store.writes) is PooledWrites
        self.at(NOW)

    def at(self, now: int) -> None:
        super().at(now)
        with self.pool.connection() as wrapper, wrapper.cursor() as cursor:
            cursor.execute("SET timestamp = %s", (now,))
        self.pool.change("SET timestamp = %(now)s", {"now": now})


class OnSQLite:
    """Phorge's tables as the demo makes them on SQLite (its translation of their DDL), in a file of their own
    under a Django alias of their own, the store on that connection."""

    ALIAS = "phorge_contract_sqlite"

    def __init__(self, folder: Path) -> None:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(folder / "phorge.sqlite3")}
        connections.settings[self.ALIAS] = connections.configure_settings({"default": {}, self.ALIAS: database})[
            self.ALIAS
        ]
        self.now = NOW
        connection = connections[self.ALIAS]
        connection.ensure_connection()
        # SQLite lets a connection's own function stand in for a built-in one of the same arity.
        connection.connection.create_function("strftime", 2, self._strftime)
        with connection.cursor() as cursor:
            for statement in translate(PHORGE_SCHEMA.read_text()):
                cursor.execute(statement)
        self.store = Store(self.ALIAS)
        assert type(self.store.writes) is ReturningWrites

    def _strftime(self, form: str, when: str) -> str:
        assert (form, when) == ("%s", "now"), "the store reads the clock only as now_sql"
        return str(self.now)

    def hook(self, phid: str) -> str:
        row = seeding.hook_row("http://127.0.0.1:9/x", now=NOW, name="hook", status="enabled", hmac_key=None)
        row["phid"] = phid
        with connections[self.ALIAS].cursor() as cursor:
            seeding.insert(cursor, "herald_webhook", [row])
        return phid

    def request(self, hook: str, *, created: int, properties: str = PROPERTIES, **columns: Any) -> int:
        row = seeding.request_row(hook, properties, now=created)
        row.update(columns)
        with connections[self.ALIAS].cursor() as cursor:
            seeding.insert(cursor, "herald_webhookrequest", [row])
            return int(cursor.lastrowid)

    def at(self, now: int) -> None:
        self.now = now

    def row(self, row_id: int) -> RequestRow:
        found, _now = self.store.fetch([row_id])
        [row] = found
        return row

    def close(self) -> None:
        connections[self.ALIAS].close()
        del connections[self.ALIAS]
        del connections.settings[self.ALIAS]


def _row_fields(columns: dict[str, Any]) -> dict[str, Any]:
    names = {"lastRequestResult": "last_result", "lastRequestEpoch": "last_epoch", "dateModified": "date_modified"}
    return {names.get(key, key): value for key, value in columns.items()}


class StoreContract:
    """What every store keeps; a subclass gives the `seeded` fixture."""

    def test_reads_in_id_order_without_properties_and_with_the_clock(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0001")
        ids = [seeded.request(hook, created=NOW - 10) for _ in range(3)]
        rows, now = seeded.store.scan_after(ids[0] - 1, 10)
        assert [row.id for row in rows] == ids and now == NOW
        assert all(row.properties is None for row in rows)
        assert seeded.store.scan_after(ids[-1], 10) == ([], None), "no rows: no clock reading"
        assert seeded.store.max_request_id() == (ids[-1], NOW)
        assert list(seeded.store.hooks()) == [hook] and seeded.store.hook_phids() == [hook]

    def test_a_claim_is_won_once_and_moves_the_version_to_the_clock(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0002")
        row_id = seeded.request(hook, created=NOW - 10)
        row = seeded.row(row_id)
        version = seeded.store.claim(row, lease=LEASE, retry_backoff=RETRY)
        assert version == NOW
        assert seeded.store.claim(row, lease=LEASE, retry_backoff=RETRY) is None, "the version as read is gone"
        claimed = seeded.row(row_id)
        assert seeded.store.claim(claimed, lease=LEASE, retry_backoff=RETRY) is None, "under its lease: not due"
        seeded.at(NOW + LEASE)
        assert seeded.store.claim(claimed, lease=LEASE, retry_backoff=RETRY) == NOW + LEASE, "its lease ran out"

    def test_a_second_claim_in_the_same_second_still_moves_the_version(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0003")
        row_id = seeded.request(hook, created=NOW)
        first = seeded.store.claim(seeded.row(row_id), lease=0, retry_backoff=RETRY)
        assert first == NOW + 1, "created this second: the claim still moves past it"
        seeded.at(NOW + 1)  # the same second as the version: a lease of 0 has run out, the version still moves
        second = seeded.store.claim(seeded.row(row_id), lease=0, retry_backoff=RETRY)
        assert second == NOW + 2

    def test_a_result_is_written_only_under_the_claim_won(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0004")
        row_id = seeded.request(hook, created=NOW - 10)
        version = seeded.store.claim(seeded.row(row_id), lease=LEASE, retry_backoff=RETRY)
        assert version is not None
        seeded.at(NOW + 2)
        assert (
            seeded.store.write_outcome(
                row_id, version - 1, status="sent", result="okay", attempted=True, properties=None
            )
            is None
        )
        written = seeded.store.write_outcome(
            row_id, version, status="queued", result="fail", attempted=True, properties='{"retry":"forever"}'
        )
        assert written == NOW + 2
        row = seeded.row(row_id)
        assert (row.status, row.last_result, row.last_epoch, row.date_modified) == ("queued", "fail", NOW + 2, NOW + 2)
        assert row.properties == '{"retry":"forever"}'
        assert (
            seeded.store.write_outcome(row_id, version, status="sent", result="okay", attempted=True, properties=None)
            is None
        )
        assert seeded.store.recent_failures(hook, window=10, limit=5) == [NOW + 2]

    def test_a_claim_taken_back_leaves_the_row_as_it_was_and_only_under_that_claim(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0009")
        row_id = seeded.request(hook, created=NOW - 10)
        before = seeded.row(row_id)
        version = seeded.store.claim(before, lease=LEASE, retry_backoff=RETRY)
        assert version is not None
        assert not seeded.store.release_claim(row_id, version - 1, previous=before.date_modified), "not our claim"
        assert seeded.store.release_claim(row_id, version, previous=before.date_modified)
        assert seeded.row(row_id) == before, "every column as it was"
        assert not seeded.store.release_claim(row_id, version, previous=before.date_modified), "taken back once"
        again = seeded.store.claim(before, lease=LEASE, retry_backoff=RETRY)
        assert again is not None, "due again at once, from the snapshot it was claimed from"
        seeded.store.write_outcome(row_id, again, status="sent", result="okay", attempted=True, properties=None)
        assert not seeded.store.release_claim(row_id, again, previous=before.date_modified), "a written row stays"
        assert seeded.row(row_id).status == "sent"

    def test_a_result_and_the_next_claim_are_written_together_each_on_its_own(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0010")
        first, second, third = (seeded.request(hook, created=NOW - 10) for _ in range(3))
        version = seeded.store.claim(seeded.row(first), lease=LEASE, retry_backoff=RETRY)
        assert version == NOW
        seeded.at(NOW + 1)
        sent = ("sent", "okay", True, None)
        both = seeded.store.write_then_claim(
            (first, version), sent, seeded.row(second), lease=LEASE, retry_backoff=RETRY
        )
        assert both == (NOW + 1, NOW + 1, True)
        assert seeded.row(first).status == "sent" and seeded.row(second).date_modified == NOW + 1
        # A write whose claim is gone does not stop the claim after it...
        lost = seeded.store.write_then_claim(
            (first, version), sent, seeded.row(third), lease=LEASE, retry_backoff=RETRY
        )
        assert lost == (None, NOW + 1, True)
        # ...and a claim lost does not undo the write before it.
        stale = dataclasses.replace(seeded.row(third), date_modified=NOW - 10)
        failed = ("queued", "fail", True, '{"retry":"forever"}')
        taken = seeded.store.write_then_claim((second, NOW + 1), failed, stale, lease=LEASE, retry_backoff=RETRY)
        assert taken == (NOW + 1, None, True)
        row = seeded.row(second)
        assert (row.status, row.last_result, row.last_epoch, row.properties) == ("queued", "fail", NOW + 1, failed[3])
        assert seeded.row(third).date_modified == NOW + 1, "claimed once, by the first of the two"

    def test_a_failed_request_is_requeued_once_and_only_as_it_was_read(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0011")
        row_id = seeded.request(
            hook,
            created=NOW - 1000,
            status="failed",
            lastRequestResult="fail",
            lastRequestEpoch=NOW - 100,
            dateModified=NOW - 100,
        )
        failed = seeded.row(row_id)
        assert not seeded.store.requeue(dataclasses.replace(failed, last_epoch=NOW - 101)), "not as it was read"
        assert seeded.store.requeue(failed)
        row = seeded.row(row_id)
        assert (row.status, row.last_result, row.last_epoch, row.date_modified) == ("queued", "none", 0, NOW - 1000)
        assert row.properties == PROPERTIES, "properties as they were"
        assert not seeded.store.requeue(failed), "requeued once"
        assert seeded.store.claim(row, lease=LEASE, retry_backoff=RETRY) == NOW, "due at once"

    def test_a_failed_forever_request_waits_the_retry_backoff_not_the_lease(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0005")
        # A settled failure: dateModified = lastRequestEpoch (the result write sets both).
        row_id = seeded.request(
            hook, created=NOW - 1000, lastRequestResult="fail", lastRequestEpoch=NOW - 100, dateModified=NOW - 100
        )
        assert seeded.store.claim(seeded.row(row_id), lease=LEASE, retry_backoff=RETRY) is None
        rows, _now = seeded.store.retries([(hook, 0, 0)], NOW - RETRY + 200, 10)
        assert [row.id for row in rows] == [row_id]
        assert seeded.store.next_failures([hook], 0) == {hook: NOW - 100}
        seeded.at(NOW - 100 + RETRY)
        assert seeded.store.claim(seeded.row(row_id), lease=LEASE, retry_backoff=RETRY) == NOW - 100 + RETRY

    def test_untried_rows_by_hook_above_a_cursor(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0006")
        ids = [seeded.request(hook, created=NOW - 5) for _ in range(4)]
        rows, _now = seeded.store.untried([(hook, ids[0])], 2)
        assert [row.id for row in rows] == ids[1:3]

    def test_properties_come_with_a_queued_row_and_large_ones_alone(self, seeded: Seeded) -> None:
        hook = seeded.hook("PHID-HWBH-contractcontract0007")
        small = seeded.request(hook, created=NOW)
        large = seeded.request(
            hook, created=NOW, properties=json.dumps({"retry": "never", "pad": "x" * (INLINE_PROPERTIES + 10)})
        )
        found, _now = seeded.store.fetch([small, large])
        by_id = {row.id: row for row in found}
        assert by_id[small].properties == PROPERTIES and by_id[large].properties is None
        length, text = seeded.store.large_properties(large)
        assert text is not None and length == len(text.encode()) > INLINE_PROPERTIES
