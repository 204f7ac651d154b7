"""A dead receiver holds back no healthy one; many deliveries in flight share a few connections; losing the
session that holds the hook locks loses nothing and duplicates nothing. Real MariaDB, receivers, processes."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from django.conf import settings

from bench.common import tcp_ports
from tests.helpers import PHORGE_DB, Phorge, mysql_admin
from tests.processes import WorkerProcess, count_status, seed, wait_for
from tests.receiver import Receiver
from webhook_delivery.phorge.locks import webhook_lock_name
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
def test_one_call_in_flight_per_hook_across_two_processes_with_locks_on_one_session(
    phorge: Phorge, workers: Callable[..., WorkerProcess]
) -> None:
    """Two processes on the same hooks: the second starts while the first delivers, then the first is told
    to stop, so every hook passes from one process to the other while both want it. The receiver counts
    calls in flight per hook."""
    with Receiver(slow_seconds=0.03) as receiver:
        hooks = [phorge.hook(receiver.url(f"/shared{i}/slow")) for i in range(4)]
        objects = seed(phorge, hooks, 256)
        first = workers("w0", "--poll-interval-ms", "20", LOG_LEVEL="DEBUG").start()
        wait_for(lambda: count_status(phorge, "sent") >= 40, 30, "the first process delivering")
        second = workers("w1", "--poll-interval-ms", "20", LOG_LEVEL="DEBUG").start()
        wait_for(lambda: any(line.get("message") == "deliver_webhooks started" for line in second.lines()), 30, "w1")
        first.signal(signal.SIGTERM)
        wait_for(lambda: count_status(phorge, "sent") == 256, 90, "every request")
        second.signal(signal.SIGTERM)
        assert [first.wait(30), second.wait(30)] == [0, 0]
        assert Counter(r.object_phid for r in receiver.requests) == Counter(objects)
        assert set(receiver.state.max_in_flight.values()) == {1}
    delivered_by = [
        {line["hook"] for line in process.lines() if line.get("message") == "webhook delivered"}
        for process in (first, second)
    ]
    assert delivered_by[0] == delivered_by[1] == set(hooks)  # every hook went from one process to the other


@pytest.mark.slow
def test_many_deliveries_in_flight_hold_a_handful_of_connections(
    phorge: Phorge, workers: Callable[..., WorkerProcess]
) -> None:
    with Receiver(slow_seconds=3.0) as receiver:
        hooks = [phorge.hook(receiver.url(f"/many{i}/slow")) for i in range(48)]
        seed(phorge, hooks, 48)
        worker = workers("many", "--max-concurrent", "64", "--poll-interval-ms", "20").start()
        wait_for(lambda: receiver.state.in_flight.total() >= 40, 20, "forty calls in flight")
        assert worker.proc is not None
        ports = tcp_ports(worker.proc.pid)
        sessions = phorge.execute(
            "SELECT HOST FROM information_schema.PROCESSLIST WHERE DB = %s", (settings.DATABASES["phorge"]["NAME"],)
        )
        held = sum(1 for (host,) in sessions if int(host.rsplit(":", 1)[1]) in ports)
        in_flight = receiver.state.in_flight.total()
        wait_for(lambda: count_status(phorge, "sent") == 48, 30, "every request")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert in_flight >= 40
    assert held <= settings.GORGE_WEBHOOK.db_pool_size + 2


@pytest.mark.slow
def test_killing_the_lock_session_loses_nothing_and_sends_nothing_twice(
    phorge: Phorge, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    with Receiver(slow_seconds=0.3) as receiver:
        hooks = [phorge.hook(receiver.url(f"/k{i}/slow")) for i in range(6)]
        objects = seed(phorge, hooks, 90)
        worker = workers("killed", "--poll-interval-ms", "20").start()
        wait_for(lambda: receiver.state.in_flight.total() >= 4, 20, "calls in flight")
        admin = mysql_admin()
        cursor = admin.cursor()
        namespace = settings.GORGE_WEBHOOK.namespace
        holders: set[int] = set()
        deadline = time.monotonic() + 10
        while not holders:
            assert time.monotonic() < deadline, "no hook lock held"
            for hook in hooks:
                cursor.execute("SELECT IS_USED_LOCK(%s)", (webhook_lock_name(namespace, hook),))
                holder = cursor.fetchone()[0]
                if holder is not None:
                    holders.add(int(holder))
        assert len(holders) == 1  # every hook lock of the process on one session
        cursor.execute(f"KILL {holders.pop()}")
        admin.close()
        wait_for(lambda: count_status(phorge, "sent") == 90, 60, "delivery to resume and finish")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        answered = Counter(r.object_phid for r in receiver.requests if r.answered_at)
    assert answered == Counter(objects)  # nothing lost, nothing twice
    assert set(receiver.state.max_in_flight.values()) == {1}
    lost = [line for line in worker.lines() if line["message"].startswith("lost the database session holding")]
    assert len(lost) == 1


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
