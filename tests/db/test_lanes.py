"""A test in tests/db is in the db lane, not the unit lane, and reaches Django's test databases; the suite
creates and drops only the databases whose names it generated."""

from __future__ import annotations

import os

import pytest
from django.db import connections

from tests.support.helpers import PHORGE_DB


@PHORGE_DB
def test_a_test_in_tests_db_is_in_the_db_lane_and_outside_the_unit_lane(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("db") is not None
    assert request.node.get_closest_marker("unit") is None
    connections["phorge"].ensure_connection()


def test_the_suite_refuses_a_database_name_it_did_not_generate() -> None:
    from tests.support.helpers import throwaway_name

    assert throwaway_name(f"gwtest{os.getpid()}_herald")
    for name in ("phabricator_herald", "gwtest_herald", "gwtest12_herald_x", "prod_gwtest1_herald", "gwtest1"):
        assert not throwaway_name(name)
