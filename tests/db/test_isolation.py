"""A dead receiver holds back no healthy one; many deliveries in flight share a few connections; losing the
session that holds the hook locks loses nothing and duplicates nothing. Real MariaDB, receivers, processes.

Here: what runs on Django's test databases; the rest is in tests/process/test_isolation.py."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
import requests

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for
from webhook_delivery.worker.dispatcher import Dispatcher
from webhook_delivery.worker.job import Job
from webhook_delivery.worker.loop import build_worker

pytestmark = PHORGE_DB


def dead_in_flight(receiver: Receiver) -> int:
    with receiver.state.lock:
        return sum(n for path, n in receiver.state.in_flight.items() if path.startswith("/dead"))


def test_a_failing_hooks_job_stops_after_its_first_failed_attempt(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/down/s503"))
        phids = [phorge.request(hook, retry="forever") for _ in range(5)]
        worker = build_worker(delivery_config, dispatcher=Dispatcher(delivery_config))
        try:
            hooks = worker.reader.hooks()
            result = worker.runner.run(Job(hook, hooks[hook], [phorge.snapshot(phid) for phid in phids]))
        finally:
            worker.parts.closing.close()
        assert len(receiver.requests) == 1
        assert result.answered is False and len(result.settlement.retried) == 1 and not result.settlement.done
        untouched = [phorge.row(phid) for phid in phids[1:]]
        assert all((row["lastRequestResult"], row["dateModified"]) == ("none", row["dateCreated"]) for row in untouched)


@pytest.mark.slow
def test_a_hook_that_answers_is_delivered_while_many_receivers_hang(phorge: Phorge, delivery_config: Any) -> None:
    """Eight slots, twelve hooks whose receiver never answers: the answering hook's requests still go out
    while every hung call is still hanging, and every hung hook gets its turn afterwards."""
    with Receiver(hold_seconds=30) as receiver:
        healthy = phorge.hook(receiver.url("/healthy/ok"))
        first = phorge.request(healthy)
        config = dataclasses.replace(delivery_config, delivery_timeout=5.0, claim_lease_sec=12, poll_interval_ms=20)
        worker = build_worker(config, max_concurrent=8)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            wait_for(lambda: phorge.row(first)["status"] == "sent", 10, "the first healthy request")
            dead = [phorge.hook(receiver.url(f"/dead{i}/timeout")) for i in range(12)]
            for hook in dead:
                phorge.request(hook, retry="forever")
                phorge.request(hook, retry="forever")
            wait_for(lambda: dead_in_flight(receiver) >= 6, 10, "hung calls")
            hung = dead_in_flight(receiver)
            later = [phorge.request(healthy) for _ in range(5)]
            wait_for(lambda: all(phorge.row(p)["status"] == "sent" for p in later), 10, "the healthy requests")
            assert dead_in_flight(receiver) >= hung  # none of the hung calls had timed out meanwhile
            assert worker.scheduler.lanes.running.total() <= 8

            def tried() -> set[str]:
                return {r.path.rsplit("/", 1)[0] for r in receiver.requests if r.path.startswith("/dead")}

            wait_for(lambda: len(tried()) == 12, 30, "a turn for every hung hook")
        finally:
            worker.stop()
            thread.join(30)
        assert not thread.is_alive()
        assert receiver.state.max_in_flight["/healthy"] == 1


@pytest.mark.slow
def test_the_receiver_counts_overlapping_calls_and_only_those() -> None:
    """The in-flight count the tests above rely on: two calls at once count 2, calls one after the other 1."""

    def post(url: str) -> None:
        requests.post(url, data=b"{}", timeout=10).raise_for_status()

    with Receiver(slow_seconds=0.5) as receiver:
        for _ in range(3):
            post(receiver.url("/sequential/slow"))
        together = [threading.Thread(target=post, args=(receiver.url("/together/slow"),)) for _ in range(2)]
        for thread in together:
            thread.start()
        for thread in together:
            thread.join(10)
        assert receiver.state.max_in_flight["/sequential"] == 1
        assert receiver.state.max_in_flight["/together"] == 2
