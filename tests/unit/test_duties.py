"""The loop's periodic duties (worker/duties.py): each on its own timing, the first time at once, in order; and
the loop's own (worker/loop.py) on the parts in memory."""

from __future__ import annotations

from tests.support.receiver import Receiver
from tests.support.twin_worker import HOOK, NOW, worker
from webhook_delivery.worker.duties import Duties, Every, Throttle
from webhook_delivery.worker.twins import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_duty_runs_at_once_then_once_per_interval_in_the_order_given() -> None:
    clock, ran = Clock(), []
    duties = Duties(
        Every("often", 0.0, lambda: ran.append("often")),
        Every("beat", 5.0, lambda: ran.append("beat")),
        Every("check", 1.0, lambda: ran.append("check")),
        clock=clock,
    )
    duties.run_due()
    assert ran == ["often", "beat", "check"]
    ran.clear()
    clock.now += 0.999
    duties.run_due()
    assert ran == ["often"]
    ran.clear()
    clock.now += 0.001
    duties.run_due()
    assert ran == ["often", "check"]
    ran.clear()
    clock.now += 4.0
    duties.run_due()
    assert ran == ["often", "beat", "check"]


def test_a_throttle_says_yes_at_once_then_once_per_interval() -> None:
    clock = Clock()
    throttle = Throttle(300.0, clock)
    assert throttle.ready() and not throttle.ready()
    clock.now += 299.9
    assert not throttle.ready()
    clock.now += 0.1
    assert throttle.ready()


def test_a_once_run_says_how_it_stopped_and_closes_the_handles_it_kept() -> None:
    store = MemoryStore(NOW)
    with Receiver() as receiver:
        store.add_hook(HOOK, uri=receiver.url("/ok/ok"))
        sent = store.add_request(HOOK, created=NOW - 5)
        w = worker(store)
        handles = w.dispatcher.handles
        kept_at_close: list[int] = []
        close = handles.close
        handles.close = lambda: (kept_at_close.append(len(handles._idle)), close())[1]  # type: ignore[method-assign]
        assert w.run() == 0
    assert store.rows[sent].status == "sent"
    assert w.heartbeat.stopped == "clean"  # type: ignore[attr-defined]
    assert kept_at_close == [1], "the hook's handle, kept after its delivery, closed when the worker stopped"
    assert not handles._idle
