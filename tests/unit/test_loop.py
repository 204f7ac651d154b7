"""The loop (worker/loop.py) on the worker's parts in memory (tests/support/twin_worker.py): a once run,
silent mode, the stop."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support.receiver import Receiver
from tests.support.twin_worker import FOREVER, HOOK, NOW, OTHER, config, worker
from tests.support.waiting import wait_for
from webhook_delivery.worker.loop import Worker
from webhook_delivery.worker.twins import MemoryHolds, MemoryRetries, MemoryStore, memory_parts


@pytest.fixture
def receiver() -> Any:
    with Receiver() as running:
        yield running


def test_a_once_run_delivers_everything_due_and_leaves_what_is_held(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    store.add_hook(OTHER, uri=receiver.url("/held/ok"))
    sent = [store.add_request(HOOK, created=NOW - 5) for _ in range(20)]
    held = store.add_request(OTHER, created=NOW - 5)
    w = worker(store)
    w.parts.holds = MemoryHolds({OTHER})
    w.holds = w.parts.holds
    assert w.run() == 0
    assert all(store.rows[i].status == "sent" for i in sent) and store.rows[held].status == "queued"
    assert {r.path for r in receiver.requests} == {"/ok/ok"}
    assert any("held hook" in line for line in w.summary())
    assert w.heartbeat.stopped == "clean"  # type: ignore[attr-defined]


def test_a_retry_now_order_sends_the_requests_it_covers_at_once_and_no_other(receiver: Receiver) -> None:
    """Requests waiting on their retry backoff (Phorge's 300 s): an order covering failures up to a moment
    makes those due at once, through the claim's own due rule; the rows are not written for it."""
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/back/ok"))
    store.add_hook(OTHER, uri=receiver.url("/other/ok"))

    def failed_at(hook: str, epoch: int) -> int:
        return store.add_request(
            hook, FOREVER, created=NOW - 500, last_result="fail", last_epoch=epoch, date_modified=epoch
        )

    covered = [failed_at(HOOK, NOW - 100 + n) for n in range(5)]
    later = failed_at(HOOK, NOW - 10)
    other = failed_at(OTHER, NOW - 100)
    before = {row_id: store.rows[row_id] for row_id in (later, other)}
    w = worker(store)
    retries = MemoryRetries()
    retries.orders[HOOK] = NOW - 50
    w.parts.retries = w.retries = retries
    assert w.run() == 0
    assert [store.rows[row_id].status for row_id in covered] == ["sent"] * 5
    assert {store.rows[row_id] for row_id in (later, other)} == set(before.values()), "untouched, waiting"
    assert len(receiver.requests) == 5


def test_the_loop_delivers_nothing_while_silent_mode_is_unknown(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    row_id = store.add_request(HOOK, created=NOW - 5)
    w = worker(store, silent=None)
    w.run()
    assert not receiver.requests and store.claims == 0
    assert (w.blocked() or "").startswith("nothing delivered: phabricator.silent is unknown")
    assert store.rows[row_id].status == "queued"


def test_silent_mode_fails_the_backlog_for_good_without_a_call(receiver: Receiver) -> None:
    store = MemoryStore(NOW)
    store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
    row_id = store.add_request(HOOK, FOREVER, created=NOW - 5)
    worker(store, silent=True).run()
    row = store.rows[row_id]
    assert not receiver.requests and (row.status, row.last_result) == ("failed", "none")
    assert row.properties is not None and row.properties.endswith('"errorType":"hook","errorCode":"silent"}')


def test_stop_lets_the_calls_in_flight_finish_and_records_a_clean_stop() -> None:
    with Receiver(slow_seconds=0.3) as receiver:
        store = MemoryStore(NOW)
        store.add_hook(HOOK, uri=receiver.url("/slow/slow"))
        ids = [store.add_request(HOOK, created=NOW - 5) for _ in range(50)]
        settings = config()
        w = Worker(settings, memory_parts(settings, store), poll_interval_ms=10)
        runner = threading.Thread(target=w.run, kwargs={"handle_signals": False})
        runner.start()
        wait_for(lambda: receiver.requests, 10, "a call in flight", every=0.01)
        w.stop()
        runner.join(10)
        assert not runner.is_alive()
    sent = [i for i in ids if store.rows[i].status == "sent"]
    assert 1 <= len(sent) < 50 and store.writes == len(sent) == len(receiver.requests), "every call written"
    assert w.heartbeat.stopped == "clean"  # type: ignore[attr-defined]
