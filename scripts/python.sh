#!/usr/bin/env bash
# Print the python the scripts use: .venv/bin/python (or $TILE_NB_VENV/bin/python; TILE_NB_VENV=none: python3).
# `--create` makes the virtual environment first when it is missing, with $TILE_NB_PYTHON (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TILE_NB_VENV:-.venv}
if [ "$venv" = "none" ]; then
  command -v python3
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  if [ "${1:-}" != "--create" ]; then
    echo "no virtual environment at $venv: run bash scripts/install.sh first" >&2
    exit 1
  fi
  # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) separately, in python3-venv: install it as root.
  base=${TILE_NB_PYTHON:-python3}
  if ! "$base" -c "import ensurepip" 2>/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing python3-venv (Debian's venv support)" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
  fi
  if ! "$base" -m venv "$venv" >&2; then
    echo "$base -m venv failed; on Debian/Ubuntu: apt-get install python3-venv (or set TILE_NB_VENV=none)" >&2
    rm -rf "$venv"
    exit 1
  fi
fi
echo "$(cd "$venv" && pwd)/bin/python"
