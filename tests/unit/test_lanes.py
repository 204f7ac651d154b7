"""The unit lane holds what needs no database, and a test in it cannot reach one through Django."""

from __future__ import annotations

import pytest
from django.db import connections

from tests.helpers import PHORGE_DB


def test_a_test_without_a_database_mark_is_in_the_unit_lane_and_django_refuses_it_a_connection(
    request: pytest.FixtureRequest,
) -> None:
    assert request.node.get_closest_marker("unit") is not None
    for alias in ("default", "phorge"):
        with pytest.raises(RuntimeError, match="Database access not allowed"):
            connections[alias].ensure_connection()


@PHORGE_DB
def test_a_test_with_a_database_mark_is_outside_the_unit_lane(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is None


@pytest.mark.database_server
def test_a_test_that_reaches_a_server_itself_is_outside_the_unit_lane(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is None
