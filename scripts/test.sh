#!/usr/bin/env bash
# Install, then run the unit tests (without the nbval plugin, which costs ~2 s per run) and the tutorial
# notebooks under nbval. GPU tests are skipped, with the reason, where no CUDA device is present; so are notebook
# cells tagged `gpu` (the tile_nb pytest plugin, which also applies tile_nb's output sanitizers and prints the
# compared / ignored / skipped / failed cells of each notebook). TILE_NB_GPU=require: fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/install.sh ray   # the test extra plus Ray, so tests/test_tune_ray.py runs (~20 s to install)
py=$(bash scripts/python.sh)
echo "install: $(( $(date +%s) - start )) s"
"$py" -m pytest -p no:nbval -q -m "not difftest" tests
# Lint, with the rule set pinned in pyproject.toml ([tool.ruff.lint]).
"$py" -m ruff check tile_nb tests benchmarks
# The differential tests' CPU tier (tests/difftest/README.md): generated kernels on the interpreter against a torch
# model, each compiled for sm_90a and sm_80 (nvcc + ptxas). Derandomized: the same kernels every run.
tier=$(date +%s)
"$py" -m pytest -p no:nbval -p no:cacheprovider -q -m difftest tests/test_difftest_cpu.py
echo "difftest CPU tier: $(( $(date +%s) - tier )) s"
shopt -s nullglob
notebooks=(notebooks/*.ipynb)
if (( ${#notebooks[@]} )); then
  "$py" -m pytest -q -p no:cacheprovider --nbval --tile-nb-gpu="${TILE_NB_GPU:-auto}" "${notebooks[@]}"
fi
# The JupyterLab extension's unit tests (Jest), where Node is installed.
if command -v npm >/dev/null 2>&1; then
  (cd extension && npm ci --no-audit --no-fund --loglevel=error && npm test -- --silent)
else
  echo "SKIPPED extension unit tests: npm is not installed"
fi
echo "tests total: $(( $(date +%s) - start )) s"
