"""The scheduler (worker/scheduling.py): lanes, one job per hook, held, locked and backed-off hooks, and hooks
whose receiver asked to wait (Retry-After, when honored)."""

from __future__ import annotations

import time

import pytest

from tests.support.twin_worker import HOOK, NOW, OTHER
from webhook_delivery.worker.job import Job, JobResult
from webhook_delivery.worker.metrics import Counters
from webhook_delivery.worker.scheduling import Lane, Lanes, Scheduler
from webhook_delivery.worker.window import Settlement


def test_failing_hooks_get_at_most_a_quarter_and_new_ones_three_quarters() -> None:
    lanes = Lanes(8)
    for n in range(8):
        if lanes.admits(Lane.FAILING):
            lanes.start(Lane.FAILING, f"failing{n}")
    assert lanes.running[Lane.FAILING] == 2
    for n in range(8):
        if lanes.admits(Lane.NEW):
            lanes.start(Lane.NEW, f"new{n}")
    assert lanes.running[Lane.NEW] == 4, "with the failing ones, three quarters"
    assert lanes.admits(Lane.ANSWERING) and not lanes.admits(Lane.NEW)


def test_the_scheduler_keeps_one_job_per_hook_and_skips_held_locked_and_backed_off_hooks() -> None:
    now = [NOW]
    scheduler = Scheduler(4, estimated_now=lambda: now[0], counters=Counters())
    job = Job(HOOK, None, [])
    scheduler.start(job, Lane.NEW)
    assert not scheduler.schedulable(HOOK) and scheduler.schedulable(OTHER)
    from webhook_delivery.worker.job import JobResult
    from webhook_delivery.worker.window import Settlement

    scheduler.finish(job, JobResult(Settlement(HOOK, []), lock_busy=True))
    assert not scheduler.schedulable(HOOK), "its lock is busy elsewhere: skipped a moment"
    assert scheduler.lock_busy() == [HOOK]
    scheduler.start(Job(OTHER, None, []), Lane.NEW)
    scheduler.finish(Job(OTHER, None, []), JobResult(Settlement(OTHER, []), backoff_until=NOW + 60))
    assert not scheduler.schedulable(OTHER)
    now[0] = NOW + 61
    assert scheduler.schedulable(OTHER), "out of Phorge's backoff once its window has passed"
    scheduler.hold(frozenset({OTHER}))
    assert not scheduler.schedulable(OTHER)
    order = scheduler.order([(5, "PHID-HWBH-a", "fail"), (3, "PHID-HWBH-b", "none")])
    assert order == [("PHID-HWBH-a", Lane.FAILING), ("PHID-HWBH-b", Lane.NEW)], "failing first: they are capped"


def finished(scheduler: Scheduler, hook: str) -> None:
    job = Job(hook, None, [])
    scheduler.start(job, Lane.NEW)
    scheduler.finish(job, JobResult(Settlement(hook, [])))


@pytest.mark.parametrize("honor", [True, False])
def test_the_scheduler_holds_a_hook_back_until_its_retry_after_only_when_honoring_it(honor: bool) -> None:
    asked = {HOOK: time.monotonic() + 60}
    scheduler = Scheduler(
        4,
        estimated_now=lambda: NOW,
        counters=Counters(),
        retry_after=lambda hook: asked.pop(hook, None),
        honor_retry_after=honor,
    )
    finished(scheduler, HOOK)
    assert not asked, "what the answer asked for is taken, whether honored or not"
    assert scheduler.schedulable(HOOK) is not honor
    assert scheduler.schedulable(OTHER), "another hook is not held back"
    scheduler.wait_until[HOOK] = time.monotonic() - 1
    assert scheduler.schedulable(HOOK), "once the time has passed"
