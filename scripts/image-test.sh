#!/usr/bin/env bash
# make image-test: build the image with the project's Dockerfile and run it for real (podman; see
# scripts/image_test.py). As root, missing system packages are installed with apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
missing=()
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> apt-get install ${missing[*]} (the image test)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "error: the image test needs ${missing[*]} (as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
exec "${VENV:-.venv}/bin/python" scripts/image_test.py
