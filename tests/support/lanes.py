"""The test lanes (a plugin the root conftest.py loads): the folder is the lane.

* tests/unit: no database and no server process; `make unit` runs it with the suite's test server at a closed
  port and no MariaDB started.
* tests/db: Django's test databases on MariaDB (and the receivers and servers the tests start in-process).
* tests/process: real `manage.py` processes, other programs (promtool, make, the bench) or MariaDB servers of
  their own.
* tests/browser: headless chromium.

Each test gets its folder's mark (`unit`, `db`, `process`, `browser`), so `-m` still selects by kind. A test in
tests/unit that asks for a database (a `django_db` or `database_server` mark, or a fixture on Django's test
databases) fails at collection: move it to tests/db. One that reaches a database in another way errors when
it runs in `make unit`: pytest-django blocks Django's connections, and a direct connection finds the closed port.

`@pytest.mark.needs_tool("promtool")`: the test runs a program that only `make test` installs. Where the
program is missing it is skipped with the reason, except in `make test` (TEST_LANE=test) and in CI, where a
missing program fails the test.

When the scripts set TEST_LANE (and TEST_LANE_STARTED, the shell's clock at their start), the run starts
with a line that says the order (the seed to repeat a random one) and ends with one line, "<lane> lane: <n>
tests in <s> s (<order>)", the wall time of the whole command. (Not GORGE_*: tests/support/settings.py drops
those.)
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
LANES = ("unit", "db", "process", "browser")
# Every fixture on Django's test databases (`db`, `transactional_db`, `phorge`, `admin_client`...) depends
# on `django_db_setup`; `live_server` asks for its database only while the test starts.
DATABASE_FIXTURES = frozenset({"django_db_setup", "live_server"})
STARTED = time.time()


def lane_of(item: pytest.Item) -> str | None:
    """The test's folder under tests/ when it is one of the lanes."""
    try:
        folder = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return None
    return folder if folder in LANES else None


def needs_database(item: pytest.Item) -> bool:
    """Whether the test uses a database: a database mark, or a fixture that needs one."""
    if item.get_closest_marker("django_db") or item.get_closest_marker("database_server"):
        return True
    return not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def must_have_tools() -> bool:
    """`make test` and CI run every test: there a missing program is a failure, not a skip."""
    return os.environ.get("TEST_LANE") == "test" or os.environ.get("CI", "") not in ("", "0", "false")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        lane = lane_of(item)
        if lane is not None:
            item.add_marker(getattr(pytest.mark, lane))
        if lane == "unit" and needs_database(item):
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(
            "tests in tests/unit that need a database (move them to tests/db): " + ", ".join(misplaced)
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs_tool"):
        for tool in mark.args:
            if shutil.which(tool) is not None:
                continue
            why = f"{tool} is not installed (make test installs it: scripts/bootstrap.sh --browser)"
            if must_have_tools():
                pytest.fail(why)
            pytest.skip(why)


def order(config: pytest.Config) -> str:
    """How this run orders the tests: pytest-randomly's seed when it shuffles (`-p randomly`), else file order."""
    if not config.pluginmanager.hasplugin("randomly"):
        return "file order"
    return f"random order, -p randomly --randomly-seed={config.getoption('randomly_seed')}"


class LaneTime:
    """Counts the tests that ran and prints the lane's line once pytest has printed everything else."""

    def __init__(self, lane: str, started: float, order: str) -> None:
        self.lane, self.started, self.order, self.ran, self.exitstatus = lane, started, order, 0, 0

    def pytest_sessionstart(self) -> None:
        print(f"{self.lane} lane: {self.order}", flush=True)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.ran += 1

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        self.exitstatus = exitstatus

    def pytest_unconfigure(self) -> None:
        failed = "" if self.exitstatus == 0 else ", FAILED"
        took = time.time() - self.started
        print(f"{self.lane} lane: {self.ran} tests in {took:.1f} s{failed} ({self.order})", flush=True)


@pytest.hookimpl(trylast=True)  # after pytest-randomly has settled its seed
def pytest_configure(config: pytest.Config) -> None:
    lane = os.environ.get("TEST_LANE")
    if lane:
        started = float(os.environ.get("TEST_LANE_STARTED") or STARTED)
        config.pluginmanager.register(LaneTime(lane, started, order(config)), "gorge-lane-time")
