#!/usr/bin/env bash
# make unit: the database-free lane, seconds, and no MariaDB needed: the tests tests/lanes.py marks `unit`,
# without the slow ones. The suite's test server is a closed port here, so a test that reaches a database
# without its mark errors instead of passing. PYTEST_ARGS adds pytest arguments, e.g. "-k payload".
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_LANE=unit TEST_LANE_STARTED=$(date +%s.%N)
export TEST_LANE TEST_LANE_STARTED

scripts/bootstrap.sh
# Nothing listens on port 1: the user name is what the error then shows.
export GORGE_TEST_DATABASE_URL=mysql://the-unit-lane-has-no-database@127.0.0.1:1
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
"${VENV:-.venv}/bin/python" -m pytest -q -m "unit and not slow" ${PYTEST_ARGS:-}
