#!/usr/bin/env bash
# One GPU session's worth of checks, in as few device calls as the 10-minute limit allows (docs/GPU.md).
# On the lent H200: source .devkit/prelude.sh && bash scripts/gpu_check.sh "$OUT" [PART]
#   PART=main (default): every test marked `gpu` (sm_90a), the tutorials' code cells (scripts/gpu_cells.py on
#                        NOTEBOOKS, default notebooks/*.ipynb), then the benchmarks in GPU_BENCHMARKS
#                        (default "host_cost torch_op_cost"), each a JSON and a log
#   PART=older:          the `gpu` tests and the tutorials' cells again with the code of older GPUs loaded as PTX
#                        (TILE_NB_ARCH=compute_80, then compute_75; issue 35)
# At most 8 files come back from $OUT, so each part writes few. Exits non-zero if the sm_90a tests failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu}
part=${2:-main}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
notebooks=(${NOTEBOOKS:-notebooks/*.ipynb})
gpu_tests() {  # $1: log name
  python3 -m pytest -p no:nbval -p no:cacheprovider -m gpu -q -rfEs -n 8 tests 2>&1 | tee "$out/$1"
  return "${PIPESTATUS[0]}"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee "$out/device.txt"
date -u +%FT%TZ | tee -a "$out/device.txt"
if [[ "$part" == main ]]; then
  gpu_tests gpu_tests.log
  tests_rc=$?
  timeout 240 python3 scripts/gpu_cells.py "${notebooks[@]}" > "$out/tutorial_cells.log" 2>&1
  echo "tutorial cells exit $?" >> "$out/tutorial_cells.log"
  for bench in ${GPU_BENCHMARKS:-host_cost torch_op_cost}; do
    timeout 240 python3 "benchmarks/$bench.py" --json "$out/$bench.json" > "$out/$bench.log" 2>&1
    echo "$bench exit $?" >> "$out/$bench.log"
  done
  exit "$tests_rc"
fi
for arch in compute_80 compute_75; do
  TILE_NB_ARCH=$arch gpu_tests "gpu_tests_$arch.log"
  TILE_NB_ARCH=$arch timeout 200 python3 scripts/gpu_cells.py "${notebooks[@]}" > "$out/tutorial_cells_$arch.log" 2>&1
  echo "tutorial cells exit $?" >> "$out/tutorial_cells_$arch.log"
done
