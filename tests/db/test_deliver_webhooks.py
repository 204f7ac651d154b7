"""`manage.py deliver_webhooks` in-process: the alert watcher it runs with --watch is a supervised side task
(webhook_delivery/sidetasks.py): a watcher that dies is started again, and one that keeps dying stops the
worker, which says so and exits non-zero."""

from __future__ import annotations

import logging
import threading

import pytest
from django.core.management import CommandError, call_command

from tests.support.helpers import PHORGE_DB, Phorge
from webhook_delivery import sidetasks
from webhook_delivery.alerts.watcher import Watcher
from webhook_delivery.management.commands.deliver_webhooks import EXIT_SIDE_TASK
from webhook_delivery.worker import loop


@PHORGE_DB
def test_a_watcher_that_keeps_dying_stops_the_worker_with_its_own_exit_code(
    phorge: Phorge, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(sidetasks, "FIRST_WAIT_SEC", 0.01)
    started: list[str] = []

    def dies(self: Watcher, stop: threading.Event) -> None:
        started.append(threading.current_thread().name)
        raise RuntimeError("the watcher's bug")

    monkeypatch.setattr(Watcher, "run_forever", dies)
    with pytest.raises(CommandError) as stopped:
        call_command("deliver_webhooks", watch=True, poll_interval_ms=50)
    assert stopped.value.returncode == EXIT_SIDE_TASK
    assert started == ["alert-watcher"] * (sidetasks.RESTARTS + 1), "started again after each death, then given up"
    said = [(r.levelname, getattr(r, "event", "")) for r in caplog.records if getattr(r, "task", "") == "alert-watcher"]
    assert said[-1] == ("CRITICAL", "side_task.gave_up")
    assert [event for _level, event in said].count("side_task.died") == sidetasks.RESTARTS + 1
    events = [getattr(r, "event", "") for r in caplog.records]
    assert events.index("side_task.gave_up") < events.index("worker.stopped"), "the worker stopped after it"


@PHORGE_DB
def test_a_watcher_that_dies_once_is_started_again_and_the_worker_goes_on(
    phorge: Phorge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sidetasks, "FIRST_WAIT_SEC", 0.01)
    runs: list[int] = []
    second = threading.Event()

    def dies_once(self: Watcher, stop: threading.Event) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("once")
        second.set()
        stop.wait()

    monkeypatch.setattr(Watcher, "run_forever", dies_once)

    built = loop.build_worker

    def build(*args: object, **kwargs: object) -> loop.Worker:
        worker = built(*args, **kwargs)  # type: ignore[arg-type]
        threading.Thread(target=lambda: second.wait(10) and worker.stop(), daemon=True).start()
        return worker

    monkeypatch.setattr(loop, "build_worker", build)
    call_command("deliver_webhooks", watch=True, poll_interval_ms=50)  # no error: stopped as if by SIGTERM
    assert second.is_set() and len(runs) == 2
