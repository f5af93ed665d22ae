#!/usr/bin/env bash
# The main job: the tutorial notebooks. Headless by default (executes every notebook, on the CPU interpreter when
# there is no GPU, and writes the executed copies to build/notebooks/); `--lab` opens them in JupyterLab instead,
# with the tile_nb extension installed (kernel views, line mapping, %%tilekernel highlighting), on the notebooks/
# folder; arguments after `--lab` go to `jupyter lab` (e.g. `--lab --port 8890 --no-browser`). JupyterLab runs as
# `python -m jupyterlab` of the environment: `python -m jupyter lab` would run the first `jupyter-lab` on PATH, which
# may be another environment's (a conda base, an activated virtualenv).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--lab" ]; then
  bash scripts/install.sh lab
  py=$(bash scripts/python.sh)
  shift
  root=(); [ "$(id -u)" = 0 ] && root=(--allow-root)
  echo "tutorials.sh --lab: opens JupyterLab on notebooks/; arguments after --lab go to 'jupyter lab'" \
       "(given: ${*:-none})" >&2
  exec "$py" -m jupyterlab "${root[@]}" "$@" notebooks/
fi
bash scripts/install.sh
"$(bash scripts/python.sh)" scripts/run_notebooks.py notebooks/*.ipynb
