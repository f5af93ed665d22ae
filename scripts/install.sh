#!/usr/bin/env bash
# Install tile_nb and what its tests and notebooks need, on a fresh machine with Python >= 3.10.
#
# Into a virtual environment, `.venv` in the repository root, made here when it is missing (TILE_NB_VENV=PATH picks
# another folder; TILE_NB_VENV=none installs into the `python3` on PATH instead, e.g. a prepared GPU machine or
# binder). The other scripts run the environment's python through `scripts/python.sh`.
# Usage: install.sh [lab]   (`lab` adds JupyterLab and builds + installs the tile_nb JupyterLab extension)
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/python.sh --create)
# torch first: pinned 2.13.0 takes the CPU build; a bare `torch` requirement would pull several GB of CUDA build.
# Where a torch is already installed (a GPU machine), keep it.
"$py" -c "import torch" 2>/dev/null || "$py" -m pip install -q torch==2.13.0
"$py" -m pip install -q -e ".[test${1:+,$1}]"
if [ "${1:-}" = "lab" ]; then
  bash scripts/install_extension.sh "$py"
fi
