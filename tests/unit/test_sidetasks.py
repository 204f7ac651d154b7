"""sidetasks.py: a side task that dies is said and started again, one that keeps dying is given up and the
command told; one asked to stop is neither."""

from __future__ import annotations

import logging
import threading

import pytest

from webhook_delivery import sidetasks
from webhook_delivery.sidetasks import SideTask


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidetasks, "FIRST_WAIT_SEC", 0.01)


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(record, "event", "") for record in caplog.records if record.name == sidetasks.__name__]


def test_a_task_that_keeps_dying_is_restarted_then_given_up_and_the_command_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    starts: list[int] = []
    told = threading.Event()

    def dies(stop: threading.Event) -> None:
        starts.append(1)
        raise RuntimeError("boom")

    task = SideTask("alert-watcher", dies, on_give_up=told.set)
    task.start()
    assert told.wait(5), "the command is told"
    task.stop(5)
    assert len(starts) == sidetasks.RESTARTS + 1 and task.given_up
    assert events(caplog) == ["side_task.died", "side_task.restarting"] * sidetasks.RESTARTS + [
        "side_task.died",
        "side_task.gave_up",
    ]
    gave_up = caplog.records[-1]
    assert gave_up.levelno == logging.CRITICAL and gave_up.task == "alert-watcher" and gave_up.error == "RuntimeError"


def test_a_task_that_returns_on_its_own_has_died_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    runs = threading.Semaphore(0)

    def returns(stop: threading.Event) -> None:
        runs.release()

    task = SideTask("alert-watcher", returns, on_give_up=lambda: None)
    task.start()
    assert runs.acquire(timeout=5) and runs.acquire(timeout=5), "started again"
    task.stop(5)
    assert events(caplog)[:2] == ["side_task.died", "side_task.restarting"]


def test_deaths_outside_the_window_are_forgotten() -> None:
    now = [0.0]
    task = SideTask("t", lambda stop: None, on_give_up=lambda: None, clock=lambda: now[0])
    for _ in range(10):
        now[0] += sidetasks.WINDOW_SEC
        assert task._died("RuntimeError") == sidetasks.FIRST_WAIT_SEC
    assert not task.given_up


def test_a_task_asked_to_stop_is_neither_restarted_nor_given_up(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    running = threading.Event()
    told: list[bool] = []

    def runs(stop: threading.Event) -> None:
        running.set()
        stop.wait()

    task = SideTask("alert-watcher", runs, on_give_up=lambda: told.append(True))
    task.start()
    assert running.wait(5)
    task.stop(5)
    assert not task.alive
    assert events(caplog) == [] and told == [] and not task.given_up
