#!/usr/bin/env bash
# Run a command with a reachable MariaDB/MySQL for the tests, e.g. scripts/with-test-db.sh .venv/bin/python -m pytest
# (or the bench: both read the server from GORGE_TEST_DATABASE_URL, through tests/support/testdb.py)
#   GORGE_TEST_DATABASE_URL     server for the throwaway test databases (default mysql://root@127.0.0.1:3306);
#                               the suite ignores every GORGE_WEBHOOK_* variable and names its own databases
#   GORGE_TEST_DB=auto          use that server; if nothing answers and mariadbd is installed, start a private one
#   GORGE_TEST_DB=private       always start a private throwaway server (own data dir and port, removed after)
#   GORGE_TEST_DB=external      never start one
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${VENV:-.venv}/bin/python
mode=${GORGE_TEST_DB:-auto}
private_dir=""
private_pid=""

find_mariadbd() {
  local candidate
  for candidate in "$(command -v mariadbd || true)" /usr/sbin/mariadbd /usr/local/sbin/mariadbd; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}

# shellcheck disable=SC2317 # called by the EXIT trap
stop_private() {
  if [ -n "$private_pid" ]; then
    kill "$private_pid" 2>/dev/null || true
    wait "$private_pid" 2>/dev/null || true
  fi
  [ -z "$private_dir" ] || rm -rf "$private_dir"
}

start_private() {
  local mariadbd=$1 port install_db run_as=()
  install_db="$(dirname "$mariadbd")/../bin/mariadb-install-db"
  [ -x "$install_db" ] || install_db=$(command -v mariadb-install-db) \
    || { echo "error: mariadbd is installed but mariadb-install-db is not" >&2; exit 1; }
  [ "$(id -u)" = 0 ] && run_as=(--user=root)
  private_dir=$(mktemp -d "${TMPDIR:-/tmp}/gorge-test-mariadb.XXXXXX")
  trap stop_private EXIT
  port=$("$PY" scripts/testdb.py free-port)
  echo "==> starting a private MariaDB on 127.0.0.1:$port (data in $private_dir, removed afterwards)" >&2
  "$install_db" --no-defaults --datadir="$private_dir/data" --auth-root-authentication-method=normal \
    --skip-test-db "${run_as[@]}" >"$private_dir/install.log" 2>&1 \
    || { cat "$private_dir/install.log" >&2; exit 1; }
  "$mariadbd" --no-defaults --datadir="$private_dir/data" --socket="$private_dir/mariadbd.sock" \
    --port="$port" --bind-address=127.0.0.1 --skip-name-resolve --log-error="$private_dir/error.log" \
    "${run_as[@]}" >"$private_dir/stderr.log" 2>&1 &
  private_pid=$!
  for _ in $(seq 1 300); do
    if [ -S "$private_dir/mariadbd.sock" ] && "$PY" scripts/testdb.py root "$private_dir/mariadbd.sock" 2>/dev/null; then
      break
    fi
    kill -0 "$private_pid" 2>/dev/null || break
    sleep 0.1
  done
  export GORGE_TEST_DATABASE_URL="mysql://root@127.0.0.1:$port"
  "$PY" scripts/testdb.py ping >/dev/null || { cat "$private_dir/error.log" >&2; exit 1; }
}

case "$mode" in
  private)
    mariadbd=$(find_mariadbd) \
      || { echo "error: GORGE_TEST_DB=private needs mariadbd (apt-get install mariadb-server)" >&2; exit 1; }
    start_private "$mariadbd"
    ;;
  auto | external)
    if ! "$PY" scripts/testdb.py ping >/dev/null; then
      if [ "$mode" = auto ] && mariadbd=$(find_mariadbd); then
        start_private "$mariadbd"
      else
        cat >&2 <<'MSG'
error: the tests need a real MariaDB or MySQL and none answers (see the line above).
  Start one on 127.0.0.1:3306 whose root user has no password (apt-get install mariadb-server, then
  start it), or install mariadb-server so that `make test` starts a private throwaway server itself, or
  set GORGE_TEST_DATABASE_URL=mysql://USER:PASS@HOST:PORT for a server where USER may create and drop
  databases and users (the suite only ever creates and drops databases named gwtest<pid>_*).
MSG
        exit 1
      fi
    fi
    ;;
  *)
    echo "error: GORGE_TEST_DB must be auto, private or external (got $mode)" >&2
    exit 1
    ;;
esac

status=0
"$@" || status=$?
exit "$status"
