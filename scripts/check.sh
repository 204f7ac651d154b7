#!/usr/bin/env bash
# make check: the quick lane while editing, against the same real MariaDB: tests/unit, tests/db and
# tests/process without the slow tests; no lint, no browser. Random order: the seed is printed, and
# PYTEST_ARGS="-p randomly --randomly-seed=N" repeats one ("-p no:randomly": file order). It ends with its wall
# time. PYTEST_ARGS adds pytest arguments, e.g. "tests/db/test_window.py -x".
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_LANE=check TEST_LANE_STARTED=$(date +%s.%N)
export TEST_LANE TEST_LANE_STARTED

scripts/bootstrap.sh
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
scripts/with-test-db.sh "${VENV:-.venv}/bin/python" -m pytest -q -p randomly -m "not slow" \
  tests/unit tests/db tests/process ${PYTEST_ARGS:-}
