#!/usr/bin/env bash
# Install tile_nb and what its tests and notebooks need, on a fresh machine with Python >= 3.10.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --upgrade pip
# torch first: pinned 2.13.0 takes the CPU build; a bare `torch` requirement would pull several GB of CUDA build.
# Where a torch is already installed (a GPU machine), keep it.
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test${1:+,$1}]"
