#!/usr/bin/env bash
# Install, then run the unit tests (without the nbval plugin, which costs ~2 s per run) and the tutorial
# notebooks under nbval. GPU tests are skipped, with the reason, where no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/install.sh
echo "install: $(( $(date +%s) - start )) s"
# The differential tests' CPU tier (marked difftest, a few minutes) runs as its own step of .ci/run.
python3 -m pytest -p no:nbval -q -m "not difftest" tests
shopt -s nullglob
notebooks=(notebooks/*.ipynb)
if (( ${#notebooks[@]} )); then
  python3 -m pytest -q -p no:cacheprovider --nbval "${notebooks[@]}" --nbval-sanitize-with notebooks/nbval_sanitize.cfg
fi
# The JupyterLab extension's unit tests (Jest), where Node is installed.
if command -v npm >/dev/null 2>&1; then
  (cd extension && npm ci --no-audit --no-fund --loglevel=error && npm test -- --silent)
else
  echo "SKIPPED extension unit tests: npm is not installed"
fi
echo "tests total: $(( $(date +%s) - start )) s"
