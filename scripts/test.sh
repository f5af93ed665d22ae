#!/usr/bin/env bash
# Install, then run the unit tests (without the nbval plugin, which costs ~2 s per run) and the tutorial
# notebooks under nbval. GPU tests are skipped, with the reason, where no CUDA device is present; so are notebook
# cells tagged `gpu` (the tile_nb pytest plugin, which also applies tile_nb's output sanitizers and prints the
# compared / ignored / skipped / failed cells of each notebook). TILE_NB_GPU=require: fail instead of skipping.
# Every step runs even when an earlier one fails (a failing unit test must not hide a notebook failure); the
# script exits 1 at the end, naming the steps that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/install.sh ray || exit 1  # the test extra plus Ray, so tests/test_tune_ray.py runs (~20 s to install)
py=$(bash scripts/python.sh) || exit 1
echo "install: $(( $(date +%s) - start )) s"
failed=()
step() {  # step NAME COMMAND...: run it, time it, remember a failure
  local name=$1 begin=$SECONDS
  shift
  "$@" || failed+=("$name")
  echo "$name: $(( SECONDS - begin )) s"
}
step "unit tests" "$py" -m pytest -p no:nbval -q -m "not difftest" -n auto tests  # one worker per core (xdist)
# Lint, with the rule set pinned in pyproject.toml ([tool.ruff.lint]).
step ruff "$py" -m ruff check tile_nb tests benchmarks
# Every benchmarks/results file that the repository names exists (the results are renamed and pruned by hand).
step "results links" "$py" scripts/check_results_links.py
# The differential tests' CPU tier (tests/difftest/README.md): generated kernels on the interpreter against a torch
# model, each compiled for sm_90a and sm_80 (nvcc + ptxas). Derandomized: the same kernels every run.
step "difftest CPU tier" "$py" -m pytest -p no:nbval -p no:cacheprovider -q -m difftest tests/test_difftest_cpu.py
shopt -s nullglob
notebooks=(notebooks/*.ipynb)
if (( ${#notebooks[@]} )); then
  step notebooks "$py" -m pytest -q -p no:cacheprovider --nbval --tile-nb-gpu="${TILE_NB_GPU:-auto}" "${notebooks[@]}"
fi
# The JupyterLab extension's unit tests (Jest), where Node is installed.
if command -v npm >/dev/null 2>&1; then
  step "extension unit tests" bash -c 'cd extension && npm ci --no-audit --no-fund --loglevel=error && npm test -- --silent'
else
  echo "SKIPPED extension unit tests: npm is not installed"
fi
echo "tests total: $(( $(date +%s) - start )) s"
if (( ${#failed[@]} )); then
  printf 'FAILED steps: %s\n' "$(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')" >&2
  exit 1
fi
