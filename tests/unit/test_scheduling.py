"""The scheduler (worker/scheduling.py): lanes, one job per hook, held, locked and backed-off hooks."""

from __future__ import annotations

from tests.support.twin_worker import HOOK, NOW, OTHER
from webhook_delivery.worker.job import Job
from webhook_delivery.worker.metrics import Counters
from webhook_delivery.worker.scheduling import Lane, Lanes, Scheduler


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
