#!/usr/bin/env bash
# make unit: tests/unit, the lane that needs no database server and no promtool: about a minute, no MariaDB
# started.
# The suite's test server is a closed port here, so a test that reaches a database errors instead of passing
# (and tests/support/lanes.py refuses one in tests/unit that asks for a database). Random order (the seed is
# printed; PYTEST_ARGS="-p no:randomly" for file order, "-p randomly --randomly-seed=N" to repeat one); it
# prints the coverage of the worker's job, scheduler and loop and of the watcher's conditions.
# PYTEST_ARGS adds pytest arguments, e.g. "-k payload".
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_LANE=unit TEST_LANE_STARTED=$(date +%s.%N)
export TEST_LANE TEST_LANE_STARTED

scripts/bootstrap.sh
# Nothing listens on port 1: the user name is what the error then shows.
export GORGE_TEST_DATABASE_URL=mysql://the-unit-lane-has-no-database@127.0.0.1:1
coverage=(
  --cov=webhook_delivery.worker.job --cov=webhook_delivery.worker.scheduling --cov=webhook_delivery.worker.loop
  --cov=webhook_delivery.alerts.conditions --cov-report=term-missing:skip-covered
)
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
"${VENV:-.venv}/bin/python" -m pytest -q -p randomly "${coverage[@]}" tests/unit ${PYTEST_ARGS:-}
