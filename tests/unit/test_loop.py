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
from webhook_delivery.worker.twins import MemoryHolds, MemoryStore, memory_parts


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
