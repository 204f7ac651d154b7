"""A dead receiver holds back no healthy one; many deliveries in flight share a few connections; losing the
session that holds the hook locks loses nothing and duplicates nothing. Real MariaDB, receivers, processes.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/db/test_isolation.py."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

from bench.common import tcp_ports
from tests.support.helpers import PHORGE_DB, Phorge, mysql_admin, with_event
from tests.support.processes import WorkerProcess, count_status, seed
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for
from webhook_delivery.phorge.locks import webhook_lock_name

pytestmark = PHORGE_DB


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
        wait_for(lambda: with_event(second.lines(), "worker.started"), 30, "w1")
        first.signal(signal.SIGTERM)
        wait_for(lambda: count_status(phorge, "sent") == 256, 90, "every request")
        second.signal(signal.SIGTERM)
        assert [first.wait(30), second.wait(30)] == [0, 0]
        assert Counter(r.object_phid for r in receiver.requests) == Counter(objects)
        assert set(receiver.state.max_in_flight.values()) == {1}
    delivered_by = [
        {line["hook"] for line in with_event(process.lines(), "delivery.sent")} for process in (first, second)
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
    lost = with_event(worker.lines(), "lock_session.lost")
    assert len(lost) == 1
