#!/usr/bin/env bash
# The quality gate that `make test` runs before pytest: style, types, Django's checks, no migrations.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${VENV:-.venv}/bin/python
# Django's checks run on the production settings module with throwaway values: nothing is connected.
export DJANGO_SETTINGS_MODULE=gorge_site.settings GORGE_ENV_FILE=/dev/null
export SECRET_KEY=lint-only-not-a-secret-0123456789-abcdefghijklmnopqrstuvwxyz
export DATABASE_URL=sqlite://:memory:
export GORGE_WEBHOOK_SILENT=false  # declared, as a deployment must (else check warns gorge.W003)

status=0
step() {
  printf '==> %s\n' "$*" >&2
  "$@" || status=1
}
step "$PY" -m ruff check .
step "$PY" -m ruff format --check .
step "$PY" -m mypy webhook_delivery gorge_site
step "$PY" manage.py makemigrations --check --dry-run
step "$PY" manage.py check
[ "$status" = 0 ] || printf 'lint: failed (see above)\n' >&2
exit "$status"
