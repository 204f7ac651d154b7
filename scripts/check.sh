#!/usr/bin/env bash
# make check: the quick lane while editing, against the same real MariaDB: no lint, no browser, no slow
# tests; it ends with its wall time. PYTEST_ARGS adds pytest arguments, e.g. "tests/test_window.py -x".
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_LANE=check TEST_LANE_STARTED=$(date +%s.%N)
export TEST_LANE TEST_LANE_STARTED

scripts/bootstrap.sh
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
scripts/with-test-db.sh "${VENV:-.venv}/bin/python" -m pytest -q -m "not browser and not slow" ${PYTEST_ARGS:-}
