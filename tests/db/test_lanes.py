"""A test in tests/db is in the db lane, not the unit lane, and reaches Django's test databases."""

from __future__ import annotations

import pytest
from django.db import connections

from tests.support.helpers import PHORGE_DB


@PHORGE_DB
def test_a_test_in_tests_db_is_in_the_db_lane_and_outside_the_unit_lane(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("db") is not None
    assert request.node.get_closest_marker("unit") is None
    connections["phorge"].ensure_connection()
