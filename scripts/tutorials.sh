#!/usr/bin/env bash
# The main job: the tutorial notebooks. Headless by default (executes every notebook, on the CPU interpreter when
# there is no GPU, and writes the executed copies to build/notebooks/); `--lab` opens them in JupyterLab instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--lab" ]; then
  bash scripts/install.sh lab
  exec python3 -m jupyter lab --allow-root notebooks/
fi
bash scripts/install.sh
python3 scripts/run_notebooks.py notebooks/*.ipynb
