#!/usr/bin/env bash
# make test: dependencies, the lint gate, then the whole pytest suite against a real MariaDB/MySQL
# (scripts/with-test-db.sh finds or starts one); it ends with its wall time, lint included. PYTEST_ARGS adds
# pytest arguments, e.g. "-k golden -x". Every folder of tests/, in file order (make check and make unit shuffle).
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_LANE=test TEST_LANE_STARTED=$(date +%s.%N)
export TEST_LANE TEST_LANE_STARTED

scripts/bootstrap.sh --browser
scripts/lint.sh
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
scripts/with-test-db.sh "${VENV:-.venv}/bin/python" -m pytest ${PYTEST_ARGS:-}
