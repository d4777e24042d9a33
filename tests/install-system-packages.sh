#!/bin/sh
# What the tests need from the system, installed when missing (the first step of the README's test command):
# Chromium, which the web page's tests drive through Playwright (it never downloads a browser), Python's venv
# module, which Debian ships apart, and PostgreSQL's server, which the shared-store tests start in a temporary folder
# (tests/postgres_fixtures.py; Debian keeps initdb in /usr/lib/postgresql/N/bin). Debian/Ubuntu through apt-get,
# as root or with sudo; elsewhere it says what to install and stops.
set -eu
missing=""
command -v chromium >/dev/null 2>&1 || missing="chromium"
python3 -c "import ensurepip, venv" >/dev/null 2>&1 || missing="$missing python3-venv"
command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$missing postgresql"
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "the tests need:$missing (install them with your system's package manager)" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then as_root=""; elif command -v sudo >/dev/null 2>&1; then as_root="sudo"; else
  echo "the tests need:$missing; run as root or install sudo" >&2
  exit 1
fi
echo "installing$missing (apt-get)" >&2
$as_root apt-get update -q
# shellcheck disable=SC2086  # one word per package
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
