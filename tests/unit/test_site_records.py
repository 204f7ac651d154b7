"""The worker loop's hand-off to Django's database (worker/site_records.py, issue 39, finding 3): handing a
beat over never waits on the database, a beat replaced before it was written is counted and said once, the
holds last read stay in force, and the notices read are handed back merged."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

import pytest

from tests.support.waiting import wait_for
from webhook_delivery.state import WorkerState
from webhook_delivery.worker.site_records import SiteRecords


class StuckDatabase:
    """A heartbeat, holds and notices whose database takes as long as the test says (a held write)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.writing = threading.Event()  # a publish has begun (and waits for `open`)
        self.written: list[WorkerState] = []
        self.retired: list[bool] = []
        self.held = frozenset({"PHID-HWBH-a"})
        self.notices: list[dict[str, int]] = [{"PHID-HWBH-a": 7}, {"PHID-HWBH-a": 3, "PHID-HWBH-b": 9}]

    worker_id = "stuck:1:000000"

    def publish(self, state: WorkerState) -> None:
        self.writing.set()
        self.open.wait(30)
        self.written.append(state)

    def retire(self, state: WorkerState, *, clean: bool) -> None:
        self.written.append(state)
        self.retired.append(clean)

    def refresh(self) -> frozenset[str]:
        return self.held

    def take(self) -> Mapping[str, int]:
        return self.notices.pop(0) if self.notices else {}


def test_a_beat_is_handed_over_at_once_however_long_the_database_takes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    stuck = StuckDatabase()
    behind: list[int] = []
    site = SiteRecords(stuck, stuck, stuck, held=frozenset(), period=0.05, behind=lambda: behind.append(1))
    site.beat(WorkerState(in_flight=0))
    assert stuck.writing.wait(10), "the first beat's write begins (and is stuck)"
    started = time.monotonic()
    for number in range(1, 50):
        site.beat(WorkerState(in_flight=number))
    assert time.monotonic() - started < 1, "the loop never waits on Django's database"
    assert site.held() == frozenset(), "the holds read before stay in force meanwhile"
    assert len(behind) == 48, "every beat replaced before it was written is counted"
    stuck.open.set()
    wait_for(lambda: site.held() == stuck.held, 10, "the holds read again")
    # The thread may have taken the first beat before the others came (two writes) or only after (one).
    wait_for(lambda: stuck.written and stuck.written[-1].in_flight == 49, 10, "the newest beat written")
    assert stuck.written[-1].in_flight == 49, "the newest state, not the ones replaced"
    wait_for(lambda: not stuck.notices, 10, "the notices read")
    assert site.take_notices() == {"PHID-HWBH-a": 3, "PHID-HWBH-b": 9}, "merged, the lowest id per hook"
    assert site.take_notices() == {}
    site.close(WorkerState(), clean=True)
    assert stuck.retired == [True]
    said = [r for r in caplog.records if getattr(r, "event", "") == "worker.heartbeat_behind"]
    assert len(said) == 1, "said once"
    assert [r for r in caplog.records if getattr(r, "event", "") == "worker.heartbeat_caught_up"]


def test_pending_actions_are_looked_for_every_second_and_a_hold_made_is_read_at_once() -> None:
    """Issue 40: the operators' actions are carried out by this thread about once a second, however long the
    heartbeat period; the holds (and notices) are read again right after one, not at the next beat."""
    database = StuckDatabase()
    database.open.set()
    database.held = frozenset()
    looked: list[float] = []

    class Acting:
        def carry_out(self) -> bool:
            looked.append(time.monotonic())
            if len(looked) == 3:  # the third look finds a hold asked for from the dashboard, and makes it
                database.held = frozenset({"PHID-HWBH-b"})
                return True
            return False

    site = SiteRecords(database, database, database, held=frozenset(), period=60.0, actions=Acting())
    wait_for(lambda: site.held() == frozenset({"PHID-HWBH-b"}), 10, "the hold read after the action")
    assert len(looked) == 3, "read at once after the action that made it, not a heartbeat period later"
    assert 0.5 < looked[2] - looked[1] < 3, "looked for about once a second"
    site.close(WorkerState(), clean=True)
