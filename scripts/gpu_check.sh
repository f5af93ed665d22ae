#!/usr/bin/env bash
# One GPU session's worth of checks: every test marked `gpu`, then benchmarks (GPU_BENCHMARKS, default "gemm";
# "gemm compile" adds the compile-time benchmark).
# On the lent H200 (see docs/GPU.md): source .devkit/prelude.sh && bash scripts/gpu_check.sh "$OUT"
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
python3 -m pytest -p no:nbval -p no:cacheprovider -m gpu -q -rs tests 2>&1 | tee "$out/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}
for bench in ${GPU_BENCHMARKS:-gemm}; do
  [ -f "benchmarks/$bench.py" ] && timeout 300 python3 "benchmarks/$bench.py" 2>&1 | tee "$out/bench_$bench.log"
done
exit "$tests_rc"
