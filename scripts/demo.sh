#!/usr/bin/env bash
# make demo: the delivery loop on the embedded default (SQLite, no MySQL) against a local receiver,
# then the dashboard. DEMO_SERVE=0 checks the dashboard once and exits; DEMO_PORT picks its port.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh

demo_dir="$PWD/var/demo"
mkdir -p "$demo_dir"
# The demo is hermetic: its own SQLite files, no .env, a throwaway key; it never reads a real Phorge.
export DJANGO_SETTINGS_MODULE=gorge_site.settings GORGE_ENV_FILE=/dev/null
export DEBUG=true
SECRET_KEY="demo-only-$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
export SECRET_KEY
export DATABASE_URL="sqlite:///$demo_dir/site.sqlite3"
export GORGE_WEBHOOK_DATABASE_URL="sqlite:///$demo_dir/phabricator_herald.sqlite3"

args=(--port "${DEMO_PORT:-8000}")
[ "${DEMO_SERVE:-1}" = 0 ] && args+=(--no-serve)
exec "${VENV:-.venv}/bin/python" manage.py demo "${args[@]}"
