#!/usr/bin/env bash
# Create or reuse .venv and install what is missing. Safe to run again: Python packages are installed
# only when requirements*.txt changed since the last install (a stamp inside the venv), system
# packages only when absent.
#   scripts/bootstrap.sh            Python dependencies (and the MariaDB client headers to build them)
#   scripts/bootstrap.sh --browser  also what the whole suite needs: Debian's chromium (the browser test),
#                                   prometheus (promtool, for the alerting-rule tests), curl and php-cli (the
#                                   delivery path's differential tests; php -l on contrib/phorge's patch),
#                                   tinyproxy-bin (the forward proxy of the outbound-proxy tests)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.requirements.sha256"
want_browser=false
[ "${1:-}" = "--browser" ] && want_browser=true

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

apt_updated=false
# Installs Debian packages as root; otherwise stops with the command to run.
need_packages() {
  local why=$1; shift
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    if [ "$apt_updated" = false ]; then
      say "apt-get update"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      apt_updated=true
    fi
    say "apt-get install $* ($why)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  else
    die "$why needs the system packages: $* (as root: apt-get install $*)"
  fi
}

command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.11 or newer (or set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "Python 3.11 or newer is needed; $PYTHON is $("$PYTHON" -V 2>&1)"

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || need_packages "creating a virtualenv" python3-venv
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi

wanted=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$wanted" ]; then
  # mysqlclient has no Linux wheel: it compiles against the MariaDB client library; pycurl is built against
  # the system's libcurl (curl-config, from libcurl4-openssl-dev), the one PHP's curl extension uses.
  missing=()
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  if ! pkg-config --exists libmariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null; then
    missing+=(libmariadb-dev)
  fi
  command -v curl-config >/dev/null || missing+=(libcurl4-openssl-dev)
  command -v cc >/dev/null || missing+=(build-essential)
  [ ${#missing[@]} -eq 0 ] || need_packages "building mysqlclient" "${missing[@]}"
  say "installing Python packages from requirements-dev.txt"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r requirements-dev.txt
  printf '%s\n' "$wanted" >"$STAMP"
fi

if [ "$want_browser" = true ] && ! command -v chromium >/dev/null; then
  need_packages "the browser test (Playwright drives Debian's chromium)" chromium
fi
if [ "$want_browser" = true ] && ! command -v curl >/dev/null; then
  need_packages "the differential tests of the delivery path (the real curl is their oracle)" curl
fi
if [ "$want_browser" = true ] && ! command -v promtool >/dev/null; then
  need_packages "the alerting-rule tests (promtool check rules / test rules)" prometheus
fi
if [ "$want_browser" = true ] && ! command -v php >/dev/null; then
  need_packages "the Phorge patch tests (php -l) and the differential tests (Phorge's parse of an answer)" php-cli
fi
if [ "$want_browser" = true ] && ! command -v tinyproxy >/dev/null; then
  need_packages "the outbound-proxy tests (a real forward proxy, CONNECT for https)" tinyproxy-bin
fi
