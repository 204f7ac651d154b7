"""The test lanes (a plugin the root conftest.py loads): which tests need no database, and each lane's time.

A test is marked `unit` when it needs no database: no `django_db` mark, no fixture that sets up Django's
test databases, and no `database_server` mark (what reaches a server directly, past Django's connections).
`make unit` runs `-m "unit and not slow"` with the suite's test server at a closed port, so inside the lane a
test that touches a database without saying so errors: pytest-django blocks Django's connections, and a
direct connection is refused.

When the scripts set TEST_LANE (and TEST_LANE_STARTED, the shell's clock at their start), the run ends
with one line, "<lane> lane: <n> tests in <s> s", the wall time of the whole command. (Not GORGE_*:
tests/settings.py drops those.)
"""

from __future__ import annotations

import os
import time

import pytest

# Every fixture on Django's test databases (`db`, `transactional_db`, `phorge`, `admin_client`...) depends
# on `django_db_setup`; `live_server` asks for its database only while the test starts.
DATABASE_FIXTURES = frozenset({"django_db_setup", "live_server"})
STARTED = time.time()


def needs_database(item: pytest.Item) -> bool:
    """Whether the test uses a database: a database mark, or a fixture that needs one."""
    if item.get_closest_marker("django_db") or item.get_closest_marker("database_server"):
        return True
    return not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not needs_database(item):
            item.add_marker(pytest.mark.unit)


class LaneTime:
    """Counts the tests that ran and prints the lane's line once pytest has printed everything else."""

    def __init__(self, lane: str, started: float) -> None:
        self.lane, self.started, self.ran, self.exitstatus = lane, started, 0, 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.ran += 1

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        self.exitstatus = exitstatus

    def pytest_unconfigure(self) -> None:
        failed = "" if self.exitstatus == 0 else ", FAILED"
        print(f"{self.lane} lane: {self.ran} tests in {time.time() - self.started:.1f} s{failed}", flush=True)


def pytest_configure(config: pytest.Config) -> None:
    lane = os.environ.get("TEST_LANE")
    if lane:
        started = os.environ.get("TEST_LANE_STARTED", "")
        config.pluginmanager.register(LaneTime(lane, float(started) if started else STARTED), "gorge-lane-time")
