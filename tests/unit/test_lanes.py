"""The folder is the lane: a test in tests/unit is in the unit lane, cannot reach a database through Django,
and one that asks for a database there is refused at collection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.support import lanes


def test_a_test_in_tests_unit_is_in_the_unit_lane_and_django_refuses_it_a_connection(
    request: pytest.FixtureRequest,
) -> None:
    assert request.node.get_closest_marker("unit") is not None
    for alias in ("default", "phorge"):
        with pytest.raises(RuntimeError, match="Database access not allowed"):
            connections[alias].ensure_connection()


class Collected:
    """What the lane rules read of a collected test: its file, its marks and its fixtures."""

    def __init__(self, folder: str, *, marks: tuple[str, ...] = (), fixtures: tuple[str, ...] = ()) -> None:
        self.path = lanes.TESTS / folder / "test_x.py"
        self.nodeid = f"tests/{folder}/test_x.py::test_x"
        self.fixturenames = fixtures
        self.marks = list(marks)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name)


def test_each_test_gets_the_mark_of_its_folder() -> None:
    items = [Collected(folder) for folder in ("unit", "db", "process", "browser")] + [Collected("fixtures")]
    lanes.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.marks for item in items] == [["unit"], ["db"], ["process"], ["browser"], []]
    assert lanes.lane_of(Collected("db")) == "db" and lanes.TESTS == Path(__file__).resolve().parents[1]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "collected",
    [
        Collected("unit", marks=("django_db",)),
        Collected("unit", marks=("database_server",)),
        Collected("unit", fixtures=("django_db_setup", "db")),
        Collected("unit", fixtures=("live_server",)),
    ],
    ids=["django_db mark", "database_server mark", "database fixture", "live server"],
)
def test_a_test_in_tests_unit_that_asks_for_a_database_is_refused_at_collection(collected: Collected) -> None:
    with pytest.raises(pytest.UsageError, match="move them to tests/db"):
        lanes.pytest_collection_modifyitems([collected])  # type: ignore[list-item]


def test_the_same_needs_are_fine_outside_tests_unit() -> None:
    items = [Collected("db", marks=("django_db",)), Collected("process", marks=("database_server",))]
    lanes.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.marks for item in items] == [["django_db", "db"], ["database_server", "process"]]


def test_a_missing_tool_is_a_skip_while_editing_and_a_failure_in_make_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TEST_LANE", "check")
    assert not lanes.must_have_tools()
    monkeypatch.setenv("TEST_LANE", "test")
    assert lanes.must_have_tools()
    monkeypatch.delenv("TEST_LANE")
    monkeypatch.setenv("CI", "true")
    assert lanes.must_have_tools()
